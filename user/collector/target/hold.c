/* The holds. Every thread of a target is PTRACE_SEIZEd (PTRACE_O_TRACECLONE for those it
 * starts later; under --follow and evmbpf record PTRACE_O_TRACEFORK and TRACEVFORK, so
 * that its children are seized at their birth, and PTRACE_O_TRACEEXEC where its execs are
 * followed, so that an exec holds it in the kernel's own exec stop until the follower
 * lets it go: a stop no session's catch-all (hold_continue) may end). No PTRACE_O_EXITKILL: if evmbpf dies
 * the kernel detaches, and a SIGURG still pending is ignored by default. A thread that
 * signals itself SIGURG at a probe enters signal-delivery-stop alone; user space reads
 * what its record names and continues it with signal 0. Every other stop is passed on
 * as if nobody traced the target: other signals are re-injected, group-stops are held
 * with PTRACE_LISTEN (so that SIGCONT still wakes them), new threads are continued.
 * A ptrace stop is reported to the tracer alone: the target's parent (a shell, su,
 * sudo, a batch system's step daemon) never sees one. evmbpf never writes the target's
 * memory or registers.
 *
 * What being traced costs the target: each signal it receives waits for evmbpf's loop
 * to pass it on (hold_pump, from every round of it and between records), and its
 * parent learns of its exit once evmbpf has taken it in (the same pump). */
#include "hold.h"

#include <dirent.h>
#include <stdint.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "exitclose.h"
#include "util.h"

/* set when evmbpf is asked to stop (SIGINT, SIGTERM, SIGHUP): waits end early */
extern volatile sig_atomic_t stop_signal;

enum { T_RUNNING, T_HELD, T_GONE };

/* Every held process's threads in one table (one wait for them all: waitpid(-1)), each
 * with its process. A thread is T_HELD in a stop of ours: its SIGURG, an interrupt of
 * hold_stop_all (sig: a signal that came meanwhile, delivered when it is continued), or
 * the first stop of a process seized at its birth (born). */
static struct thread {
	pid_t tid, leader;
	int state, sig;
	unsigned born : 1, interrupting : 1;
	unsigned exec : 1;   /* held in its exec's stop (HOLD_EXECS): hold_resume's alone */
	unsigned listen : 1; /* held in a group-stop (its user's): left in it, not continued */
	unsigned read : 1;   /* held, its record read: continued once the ring is drained */
} *threads;
static size_t nthreads, cap;
static struct leader {
	pid_t pid;
	unsigned birth : 1;      /* seized at its birth by the kernel, not by hold_start */
	unsigned born_seen : 1;  /* its first stop was reported */
	unsigned resume : 1;     /* hold_resume came before that first stop */
	unsigned follow : 1;     /* its children are seized at their birth */
	unsigned execs : 1;      /* its execs are held (HOLD_EXECS) */
	uint64_t born_ns;        /* when its first stop was reported, or (before) was awaited */
	uint64_t exec_ns;        /* when its exec's stop was reported (0: none held) */
} leaders[JOB_LEADERS_MAX];
static int nleaders;
/* exits seen by our waits (a launched child's status is reaped there), kept for
 * whoever waits for that process */
static struct { pid_t pid; int status; } reaped[JOB_LEADERS_MAX];
static int nreaped;
static char error[256];

/* a process seized at its birth, or held at its exec, that nothing resumed (its record
 * was lost) runs on */
#define BORN_HOLD_MAX_NS (3ull * 1000000000ull)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct leader *leader_of(pid_t pid)
{
	for (int i = 0; i < nleaders; i++)
		if (leaders[i].pid == pid)
			return &leaders[i];
	return NULL;
}

static struct leader *leader_add(pid_t pid, int birth)
{
	struct leader *l = leader_of(pid);
	if (l || nleaders == JOB_LEADERS_MAX)
		return l;
	l = &leaders[nleaders++];
	memset(l, 0, sizeof(*l));
	l->pid = pid;
	l->birth = birth != 0;
	l->born_ns = now_ns();
	return l;
}

/* the process a thread belongs to, from /proc (Tgid) */
static pid_t tgid_of(pid_t tid)
{
	char path[64], line[128];
	snprintf(path, sizeof(path), "/proc/%d/status", tid);
	FILE *f = fopen(path, "re");
	pid_t tgid = 0;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "Tgid:", 5)) {
			tgid = (pid_t)atoi(line + 5);
			break;
		}
	if (f)
		fclose(f);
	return tgid;
}

static struct thread *thread_of(pid_t tid)
{
	for (size_t i = 0; i < nthreads; i++)
		if (threads[i].tid == tid)
			return &threads[i];
	return NULL;
}

static struct thread *thread_add(pid_t tid, pid_t leader)
{
	struct thread *t = thread_of(tid);
	if (t)
		return t;
	if (nthreads == cap) {
		cap = cap ? cap * 2 : 64;
		threads = xrealloc(threads, cap * sizeof(*threads));
	}
	t = &threads[nthreads++];
	memset(t, 0, sizeof(*t));
	t->tid = tid;
	t->leader = leader;
	t->state = T_RUNNING;
	return t;
}

/* pid's process leaves the tables (it exited, or evmbpf detached from it) */
static void forget(pid_t pid)
{
	size_t k = 0;
	for (size_t i = 0; i < nthreads; i++)
		if (threads[i].leader != pid)
			threads[k++] = threads[i];
	nthreads = k;
	struct leader *l = leader_of(pid);
	if (l)
		*l = leaders[--nleaders];
}

static void cont(struct thread *t)
{
	int sig = t->sig, listen = t->listen;
	t->state = T_RUNNING;
	t->sig = 0;
	t->born = t->interrupting = t->listen = t->exec = t->read = 0;
	if (listen)
		ptrace(PTRACE_LISTEN, t->tid, 0, 0); /* stopped as its user left it */
	else
		ptrace(PTRACE_CONT, t->tid, 0, (void *)(long)sig);
}

static struct leader *birth(pid_t pid);

static void on_sigchld(int sig)
{
	(void)sig; /* interrupts the ring buffers' poll: a thread has something to say */
}

static long status_field(pid_t pid, const char *key)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "re");
	long v = -1;
	size_t n = strlen(key);
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':') {
			v = strtol(line + n + 1, NULL, 10);
			break;
		}
	if (f)
		fclose(f);
	return v;
}

static int catches_sigurg(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "re");
	int caught = 0;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "SigCgt:", 7))
			caught = (strtoull(line + 7, NULL, 16) >> (SIGURG - 1)) & 1;
	if (f)
		fclose(f);
	return caught;
}

const char *hold_refusal(pid_t pid, char *buf, size_t n)
{
	if (leader_of(pid))
		return NULL;
	long tracer = status_field(pid, "TracerPid");
	if (tracer > 0 && tracer != getpid()) {
		snprintf(buf, n, "%d is already traced by process %ld (a debugger, py-spy, strace?)",
			 pid, tracer);
		return buf;
	}
	if (catches_sigurg(pid)) {
		snprintf(buf, n, "%d handles SIGURG itself, which evmbpf uses to hold a thread at "
			 "its probe", pid);
		return buf;
	}
	return NULL;
}

int hold_check(pid_t pid)
{
	char why[192];
	if (!hold_refusal(pid, why, sizeof(why)))
		return 0;
	warnx_("--numeric: %s; evmbpf holds threads through ptrace and does not take them from "
	       "another tracer: detach it first, or trace without --numeric", why);
	return -1;
}

const char *hold_error(void)
{
	return error;
}

int hold_start(pid_t pid, int how)
{
	int follow = (how & HOLD_CHILDREN) != 0;
	char why[192];
	if (hold_refusal(pid, why, sizeof(why))) {
		snprintf(error, sizeof(error), "%s", why);
		return -1;
	}
	struct leader *l = leader_of(pid);
	if (l) /* seized at its birth (or by an earlier session of this run) */
		return 0;
	if (status_field(pid, "TracerPid") == getpid()) {
		/* seized at its birth, its parent's fork event not taken in yet */
		if (!birth(pid))
			return -1;
		thread_add(pid, pid);
		return 0;
	}
	if (nleaders == JOB_LEADERS_MAX) {
		snprintf(error, sizeof(error), "more than %d processes are held at once",
			 JOB_LEADERS_MAX);
		return -1;
	}
	static int handler;
	if (!handler++) {
		struct sigaction sa = { .sa_handler = on_sigchld };
		sigemptyset(&sa.sa_mask);
		sigaction(SIGCHLD, &sa, NULL);
	}
	l = leader_add(pid, 0);
	l->follow = follow;
	l->execs = (how & HOLD_EXECS) != 0;
	long opts = PTRACE_O_TRACECLONE | (follow ? PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK : 0) |
		    (l->execs ? PTRACE_O_TRACEEXEC : 0);
	size_t before = nthreads;
	/* until a pass finds no thread it has not seized (threads may start meanwhile) */
	for (int pass = 0, added = 1; added && pass < 100; pass++) {
		added = 0;
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/task", pid);
		DIR *d = opendir(path);
		if (!d) {
			snprintf(error, sizeof(error), "cannot list the threads of %d: %s", pid,
				 strerror(errno));
			hold_release(pid, 0);
			return -1;
		}
		struct dirent *e;
		while ((e = readdir(d))) {
			pid_t tid = (pid_t)atoi(e->d_name);
			if (tid <= 0 || thread_of(tid))
				continue;
			if (ptrace(PTRACE_SEIZE, tid, 0, (void *)opts)) {
				if (errno == ESRCH)
					continue; /* it has exited */
				int err = errno;
				closedir(d);
				snprintf(error, sizeof(error), "cannot seize thread %d of %d "
					 "(PTRACE_SEIZE: %s): is it traced already, or is ptrace "
					 "restricted (kernel.yama.ptrace_scope)?", tid, pid, strerror(err));
				hold_release(pid, 0);
				return -1;
			}
			thread_add(tid, pid);
			added = 1;
		}
		closedir(d);
	}
	debugx("%zu threads of %d seized%s", nthreads - before, pid,
	       follow ? " (its children are seized at their birth)" : "");
	return 0;
}

void hold_no_execs(pid_t pid)
{
	struct leader *l = leader_of(pid);
	if (l)
		l->execs = 0; /* the option stays: its exec's stop is continued as it comes */
}

int hold_active(pid_t pid)
{
	return leader_of(pid) != NULL;
}

static void reaped_add(pid_t pid, int status)
{
	reaped[nreaped % JOB_LEADERS_MAX].pid = pid;
	reaped[nreaped++ % JOB_LEADERS_MAX].status = status;
}

/* A new process, seized at its birth: in the table, held until hold_resume (or the cap
 * is reached: it runs on untraced). */
static struct leader *birth(pid_t pid)
{
	struct leader *l = leader_add(pid, 1);
	if (!l)
		debugx("%d: more than %d processes held; it runs on unheld", pid, JOB_LEADERS_MAX);
	else if (l->birth)
		l->follow = l->execs = 1; /* its options are its parent's: a follower's */
	return l;
}

/* Is tid's SIGURG ours (the BPF side's, sent by the kernel: SI_KERNEL)? One sent by a
 * process (kill, tgkill, sigqueue) is the target's own, and delivered. */
static int ours(pid_t tid)
{
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	if (ptrace(PTRACE_GETSIGINFO, tid, 0, &si))
		return 1;
	return si.si_code != SI_USER && si.si_code != SI_TKILL && si.si_code != SI_QUEUE;
}

/* One report of a traced thread (waitpid's). */
static void handle(pid_t tid, int status)
{
	struct thread *t = thread_of(tid);
	if (WIFEXITED(status) || WIFSIGNALED(status)) {
		if (!t && exit_close_reaped(tid))
			return; /* a helper that closed links (exitclose.h): its own */
		if (t)
			t->state = T_GONE;
		if (leader_of(tid) || !t) {
			/* a held process ended (its other threads are gone before it), or a child
			 * of evmbpf's that no one seized: kept for whoever waits for it */
			reaped_add(tid, status);
			if (leader_of(tid))
				forget(tid);
		}
		return;
	}
	if (!WIFSTOPPED(status))
		return;
	if (!t) { /* a new thread's or process's first stop, before its parent's event */
		pid_t tgid = tgid_of(tid);
		struct leader *l = tgid > 0 ? leader_of(tgid) : NULL;
		if (!l && tgid > 0)
			l = birth(tgid);
		if (!l) {
			ptrace(PTRACE_DETACH, tid, 0, 0);
			return;
		}
		t = thread_add(tid, l->pid);
	}
	int sig = WSTOPSIG(status), event = status >> 16;
	if (event == PTRACE_EVENT_CLONE || event == PTRACE_EVENT_FORK ||
	    event == PTRACE_EVENT_VFORK) {
		unsigned long child = 0;
		if (!ptrace(PTRACE_GETEVENTMSG, tid, 0, &child) && child) {
			if (event == PTRACE_EVENT_CLONE)
				thread_add((pid_t)child, t->leader);
			else if (birth((pid_t)child))
				thread_add((pid_t)child, (pid_t)child);
		}
		t = thread_of(tid); /* the table may have moved */
		cont(t);
		return;
	}
	struct leader *l = leader_of(t->leader);
	if (event == PTRACE_EVENT_EXEC) {
		/* a thread other than the leader exec'd: it has the leader's tid now, and the
		 * others are gone (their exits come) */
		unsigned long former = 0;
		if (!ptrace(PTRACE_GETEVENTMSG, tid, 0, &former) && (pid_t)former != tid &&
		    thread_of((pid_t)former))
			thread_of((pid_t)former)->state = T_GONE;
		t = thread_of(tid);
		if (l && l->execs) {
			t->state = T_HELD; /* until the follower has probed the new program */
			t->exec = 1;
			l->exec_ns = now_ns();
		} else {
			ptrace(PTRACE_CONT, tid, 0, 0);
		}
		return;
	}
	if (event == PTRACE_EVENT_STOP) {
		if ((sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU) &&
		    t->interrupting) {
			t->state = T_HELD; /* in a group-stop: read so, and left in it */
			t->listen = 1;
		} else if (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU) {
			ptrace(PTRACE_LISTEN, tid, 0, 0); /* a group-stop: stays stopped, SIGCONT wakes it */
		} else if (l && l->birth && !l->born_seen && tid == l->pid) {
			/* a process seized at its birth: held until its probes are placed */
			l->born_seen = 1;
			l->born_ns = now_ns();
			t->state = T_HELD;
			t->born = 1;
			if (l->resume)
				cont(t);
		} else if (t->interrupting) {
			t->state = T_HELD; /* hold_stop_all's */
		} else {
			ptrace(PTRACE_CONT, tid, 0, 0);
		}
	} else if (event) {
		ptrace(PTRACE_CONT, tid, 0, 0);
	} else if (sig == SIGURG && ours(tid)) {
		t->state = T_HELD; /* ours: continued once its records are read */
	} else if (t->interrupting) {
		t->state = T_HELD; /* stopped as we wanted: its signal goes with it when it runs */
		t->sig = sig;
	} else {
		if (sig == SIGTRAP) {
			/* a breakpoint trap of no one's in a traced process kills it: a probe or a
			 * watch left where the kernel no longer knows it. Said, so that it can be
			 * found; delivered, as it would be without evmbpf. */
			siginfo_t si;
			memset(&si, 0, sizeof(si));
			ptrace(PTRACE_GETSIGINFO, tid, 0, &si);
			warnx_("warning: thread %d of %d received SIGTRAP (si_code %d, at %p): passed "
			       "on", tid, t->leader, si.si_code, si.si_addr);
		}
		ptrace(PTRACE_CONT, tid, 0, (void *)(long)sig); /* not ours: delivered */
	}
}

void hold_pump(void)
{
	if (!nleaders)
		return;
	int status;
	pid_t w;
	while ((w = waitpid(-1, &status, __WALL | WNOHANG)) > 0)
		handle(w, status);
	uint64_t now = 0;
	for (int i = 0; i < nleaders; i++) {
		struct leader *l = &leaders[i];
		if (l->exec_ns) {
			if (!now)
				now = now_ns();
			if (now - l->exec_ns > BORN_HOLD_MAX_NS) {
				debugx("%d was held at its exec and nothing asked for it: it runs on",
				       l->pid);
				hold_resume(l->pid);
			}
		}
		if (!l->birth || (l->born_seen && l->resume))
			continue;
		if (!now)
			now = now_ns();
		if (now - l->born_ns <= BORN_HOLD_MAX_NS)
			continue;
		if (!l->born_seen) { /* awaited, never seen: not ours (or gone) */
			if (l->resume && !thread_of(l->pid)) {
				forget(l->pid);
				i--;
			}
			continue;
		}
		debugx("%d was seized at its birth and nothing asked for it: it runs on", l->pid);
		hold_resume(l->pid);
	}
}

/* Wait (1 ms steps) until t is T_HELD, or timeout_ms passed: 0 held, -1 not */
static int wait_held(pid_t tid, int timeout_ms)
{
	for (int waited = 0;; waited++) {
		struct thread *t = thread_of(tid);
		if (!t || t->state == T_GONE)
			return -1;
		if (t->state == T_HELD)
			return 0;
		if (stop_signal || waited >= timeout_ms * 10)
			return -1;
		int status;
		pid_t w = waitpid(tid, &status, __WALL | WNOHANG);
		if (w > 0) {
			handle(w, status);
			continue;
		}
		if (w < 0 && errno != EINTR)
			return -1;
		usleep(100);
	}
}

int hold_wait(pid_t tid)
{
	if (!nleaders)
		return -1;
	if (wait_held(tid, 1000)) {
		debugx("thread %d did not stop at its hold within a second; read as it runs", tid);
		return -1;
	}
	/* tests only (tests/test_numeric.py): the first hold lasts this long */
	static int delayed;
	const char *ms = getenv("EVMBPF_TEST_NUMERIC_HOLD_MS");
	if (ms && !delayed++) {
		fprintf(stderr, "holding thread %d\n", tid);
		usleep((useconds_t)atoi(ms) * 1000);
	}
	return 0;
}

void hold_continue(pid_t pid)
{
	for (size_t i = 0; i < nthreads; i++)
		if (threads[i].leader == pid && threads[i].state == T_HELD && !threads[i].born &&
		    !threads[i].exec)
			cont(&threads[i]);
}

void hold_continue_thread(pid_t tid)
{
	struct thread *t = thread_of(tid);
	if (t && t->state == T_HELD && !t->born && !t->exec)
		t->read = 1;
}

void hold_continue_read(void)
{
	for (size_t i = 0; i < nthreads; i++)
		if (threads[i].read && threads[i].state == T_HELD && !threads[i].born &&
		    !threads[i].exec)
			cont(&threads[i]);
}

void hold_resume(pid_t pid)
{
	struct leader *l = leader_of(pid);
	if (!l)
		l = birth(pid); /* its fork record came before its parent's fork event */
	if (!l)
		return;
	l->resume = 1;
	l->exec_ns = 0;
	for (size_t i = 0; i < nthreads; i++)
		if (threads[i].leader == pid && threads[i].state == T_HELD)
			cont(&threads[i]);
}

int hold_stop_all(pid_t pid)
{
	int rc = 0;
	for (size_t i = 0; i < nthreads; i++) {
		struct thread *t = &threads[i];
		if (t->leader != pid || t->state != T_RUNNING)
			continue;
		if (ptrace(PTRACE_INTERRUPT, t->tid, 0, 0))
			continue; /* gone */
		t->interrupting = 1;
	}
	for (size_t i = 0; i < nthreads; i++) {
		pid_t tid = threads[i].tid;
		if (threads[i].leader == pid && threads[i].interrupting &&
		    threads[i].state == T_RUNNING && wait_held(tid, 500))
			rc = -1;
	}
	return rc;
}

int hold_leader_exit(pid_t pid, int *status)
{
	for (int i = 0; i < nreaped && i < JOB_LEADERS_MAX; i++)
		if (reaped[i].pid == pid) {
			*status = reaped[i].status;
			return 1;
		}
	return 0;
}

/* A report of pid's threads while they are let go: each stop is where it is detached
 * from (a signal on its way goes with it, but ours, SIGURG), an exit is
 * taken in (a zombie leader is reapable once its other threads are). */
static void release_handle(pid_t pid, pid_t w, int status)
{
	struct thread *t = thread_of(w);
	if (!t || t->leader != pid) {
		handle(w, status); /* another process's, or a new one's */
		return;
	}
	if (WIFEXITED(status) || WIFSIGNALED(status)) {
		t->state = T_GONE;
		if (w == pid)
			reaped_add(pid, status);
		return;
	}
	if (!WIFSTOPPED(status))
		return;
	int sig = WSTOPSIG(status), event = status >> 16;
	if (event == PTRACE_EVENT_CLONE) {
		unsigned long child = 0;
		if (!ptrace(PTRACE_GETEVENTMSG, w, 0, &child) && child)
			thread_add((pid_t)child, pid); /* its first stop comes: detached there */
		t = thread_of(w);
	}
	t->state = T_HELD;
	t->sig = !event && !(sig == SIGURG && ours(w)) ? sig : 0;
}

void hold_release(pid_t pid, int stop_target)
{
	if (!leader_of(pid))
		return;
	if (stop_target)
		kill(pid, SIGSTOP); /* pending before any held thread runs again */
	/* a running thread must be in a ptrace stop to be detached */
	for (size_t i = 0; i < nthreads; i++)
		if (threads[i].leader == pid && threads[i].state == T_RUNNING &&
		    ptrace(PTRACE_INTERRUPT, threads[i].tid, 0, 0) && errno == ESRCH &&
		    kill(threads[i].tid, 0))
			threads[i].state = T_GONE; /* gone, reaped by someone */
	/* until each is detached or has exited; bounded: a thread that never stops (its
	 * exit not reported) is left to the kernel, which detaches it when evmbpf exits */
	uint64_t deadline = now_ns() + 2000000000ull;
	for (;;) {
		int left = 0;
		for (size_t i = 0; i < nthreads; i++) {
			struct thread *t = &threads[i];
			if (t->leader != pid || t->state == T_GONE)
				continue;
			if (t->state == T_HELD) {
				if (!ptrace(PTRACE_DETACH, t->tid, 0, (void *)(long)t->sig)) {
					t->state = T_GONE;
					continue;
				}
				t->state = T_RUNNING; /* not in a stop after all (a zombie): its exit comes */
			}
			left++;
		}
		if (!left || now_ns() > deadline)
			break;
		int status;
		pid_t w = waitpid(-1, &status, __WALL | WNOHANG);
		if (w > 0)
			release_handle(pid, w, status);
		else if (w < 0 && errno == ECHILD)
			break;
		else
			usleep(200);
	}
	forget(pid);
}

void hold_release_all(void)
{
	while (nleaders) {
		hold_pump();
		if (nleaders)
			hold_release(leaders[nleaders - 1].pid, 0);
	}
}
