/* --numeric's hold. Every thread of the target is PTRACE_SEIZEd (PTRACE_O_TRACECLONE
 * for those it starts later; no PTRACE_O_EXITKILL: if evmbpf dies the kernel detaches,
 * and a pending SIGURG is ignored by default). A thread that signals itself SIGURG at a
 * probe enters signal-delivery-stop alone; user space reads what its record describes
 * and continues it with signal 0. Every other stop is passed on as if nobody traced the
 * target: other signals are re-injected, group-stops are held with PTRACE_LISTEN (so that
 * SIGCONT still wakes them), new threads are continued. evmbpf never writes the
 * target's memory or registers. */
#include "hold.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include "session_state.h"
#include "util.h"

enum { T_RUNNING, T_HELD, T_GONE };

/* Every held process's threads in one table (one wait for them all: waitpid(-1)), each
 * with its process; several processes (several --pid, --follow) each have a leader. */
static struct { pid_t tid, leader; int state; } *threads;
static size_t nthreads, cap;
static struct { pid_t pid; int exited, status; } leaders[JOB_LEADERS_MAX];
static int nleaders;
/* leaders' exits seen by our waitpid (a launched child's status is reaped there), kept
 * after their release for whoever waits for that child */
static struct { pid_t pid; int status; } reaped[JOB_LEADERS_MAX];
static int nreaped;

static int leader_slot(pid_t pid)
{
	for (int i = 0; i < nleaders; i++)
		if (leaders[i].pid == pid)
			return i;
	return -1;
}

/* the process a thread belongs to: a held leader's, from /proc (Tgid) */
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

static size_t slot_of(pid_t tid, int add)
{
	for (size_t i = 0; i < nthreads; i++)
		if (threads[i].tid == tid)
			return i;
	if (!add)
		return (size_t)-1;
	if (nthreads == cap) {
		cap = cap ? cap * 2 : 64;
		threads = xrealloc(threads, cap * sizeof(*threads));
	}
	threads[nthreads].tid = tid;
	threads[nthreads].leader = add > 1 ? (pid_t)add : tgid_of(tid);
	threads[nthreads].state = T_RUNNING;
	return nthreads++;
}

static void on_sigchld(int sig)
{
	(void)sig; /* interrupts the ring buffer's poll: a thread has something to say */
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

int hold_check(pid_t pid)
{
	long tracer = status_field(pid, "TracerPid");
	if (tracer > 0) {
		warnx_("--numeric: %d is already traced by process %ld (a debugger?); evmbpf holds "
		       "threads through ptrace and does not take them from it: detach it first, "
		       "or trace without --numeric", pid, tracer);
		return -1;
	}
	if (catches_sigurg(pid)) {
		warnx_("--numeric: %d handles SIGURG itself, which evmbpf uses to hold a thread "
		       "at its probe; trace it without --numeric", pid);
		return -1;
	}
	return 0;
}

int hold_start(pid_t pid)
{
	if (hold_check(pid))
		return -1;
	if (leader_slot(pid) >= 0)
		return 0;
	if (nleaders == JOB_LEADERS_MAX) {
		warnx_("--numeric: more than %d processes held; %d is not", JOB_LEADERS_MAX, pid);
		return -1;
	}
	if (!nleaders) {
		struct sigaction sa = { .sa_handler = on_sigchld };
		sigemptyset(&sa.sa_mask);
		sigaction(SIGCHLD, &sa, NULL);
	}
	leaders[nleaders++] = (typeof(leaders[0])){ pid, 0, 0 };
	size_t before = nthreads;
	/* until a pass finds no thread it has not seized (threads may start meanwhile) */
	for (int pass = 0, added = 1; added && pass < 100; pass++) {
		added = 0;
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/task", pid);
		DIR *d = opendir(path);
		if (!d) {
			warnx_("--numeric: cannot list the threads of %d: %s", pid, strerror(errno));
			hold_release(pid, 0);
			return -1;
		}
		struct dirent *e;
		while ((e = readdir(d))) {
			pid_t tid = (pid_t)atoi(e->d_name);
			if (tid <= 0 || slot_of(tid, 0) != (size_t)-1)
				continue;
			if (ptrace(PTRACE_SEIZE, tid, 0, (void *)(long)PTRACE_O_TRACECLONE)) {
				if (errno == ESRCH)
					continue; /* it has exited */
				int err = errno;
				closedir(d);
				warnx_("--numeric: cannot hold thread %d of %d (PTRACE_SEIZE: %s); is it "
				       "traced already, or is ptrace restricted (kernel.yama.ptrace_scope)?",
				       tid, pid, strerror(err));
				hold_release(pid, 0);
				return -1;
			}
			slot_of(tid, pid);
			added = 1;
		}
		closedir(d);
	}
	debugx("--numeric: %zu threads of %d seized", nthreads - before, pid);
	return 0;
}

int hold_active(pid_t pid)
{
	return leader_slot(pid) >= 0;
}

/* One report of a traced thread (waitpid's). */
static void handle(pid_t tid, int status)
{
	size_t i = slot_of(tid, 0);
	if (WIFEXITED(status) || WIFSIGNALED(status)) {
		if (i != (size_t)-1)
			threads[i].state = T_GONE;
		int l = leader_slot(tid);
		if (l >= 0) {
			leaders[l].exited = 1;
			leaders[l].status = status;
			reaped[nreaped % JOB_LEADERS_MAX].pid = tid;
			reaped[nreaped++ % JOB_LEADERS_MAX].status = status;
		}
		return;
	}
	if (!WIFSTOPPED(status))
		return;
	if (i == (size_t)-1) /* a new thread's first stop, before its parent's clone event */
		i = slot_of(tid, 1);
	int sig = WSTOPSIG(status), event = status >> 16;
	if (event == PTRACE_EVENT_CLONE) {
		unsigned long child = 0;
		if (!ptrace(PTRACE_GETEVENTMSG, tid, 0, &child) && child)
			slot_of((pid_t)child, threads[i].leader > 1 ? threads[i].leader : 1);
		ptrace(PTRACE_CONT, tid, 0, 0);
	} else if (event == PTRACE_EVENT_STOP) {
		if (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU)
			ptrace(PTRACE_LISTEN, tid, 0, 0); /* a group-stop: stays stopped, SIGCONT wakes it */
		else
			ptrace(PTRACE_CONT, tid, 0, 0);
	} else if (event) {
		ptrace(PTRACE_CONT, tid, 0, 0);
	} else if (sig == SIGURG) {
		threads[i].state = T_HELD; /* ours: continued once its records are read */
	} else {
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
}

int hold_wait(pid_t tid)
{
	if (!nleaders)
		return -1;
	size_t i = slot_of(tid, 0);
	for (;;) {
		if (i != (size_t)-1 && threads[i].state == T_HELD) {
			/* tests only (tests/test_numeric.py): the first hold lasts this long */
			static int delayed;
			const char *ms = getenv("EVMBPF_TEST_NUMERIC_HOLD_MS");
			if (ms && !delayed++) {
				fprintf(stderr, "holding thread %d\n", tid);
				usleep((useconds_t)atoi(ms) * 1000);
			}
			return 0;
		}
		if (i != (size_t)-1 && threads[i].state == T_GONE)
			return -1;
		int status;
		pid_t w = waitpid(tid, &status, __WALL);
		if (w < 0) {
			if (errno == EINTR && !stop_signal)
				continue;
			return -1;
		}
		handle(w, status);
		i = slot_of(tid, 0);
	}
}

void hold_continue(pid_t pid)
{
	for (size_t i = 0; i < nthreads; i++)
		if (threads[i].leader == pid && threads[i].state == T_HELD) {
			threads[i].state = T_RUNNING;
			ptrace(PTRACE_CONT, threads[i].tid, 0, 0);
		}
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

void hold_release(pid_t pid, int stop_target)
{
	int l = leader_slot(pid);
	if (l < 0)
		return;
	if (stop_target)
		kill(pid, SIGSTOP); /* pending before any held thread runs again */
	for (size_t i = 0; i < nthreads; i++) {
		pid_t tid = threads[i].tid;
		if (threads[i].leader != pid || threads[i].state == T_GONE)
			continue;
		if (threads[i].state == T_HELD) {
			ptrace(PTRACE_DETACH, tid, 0, 0);
			continue;
		}
		/* a running thread must be in a ptrace-stop to be detached */
		if (ptrace(PTRACE_INTERRUPT, tid, 0, 0))
			continue; /* gone */
		for (;;) {
			int status;
			pid_t w = waitpid(tid, &status, __WALL);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0 || WIFEXITED(status) || WIFSIGNALED(status))
				break;
			int sig = WSTOPSIG(status), event = status >> 16;
			if (event == PTRACE_EVENT_CLONE) {
				unsigned long child = 0;
				if (!ptrace(PTRACE_GETEVENTMSG, tid, 0, &child) && child)
					slot_of((pid_t)child, pid);
			}
			/* a signal on its way is delivered; ours (SIGURG) and traps are not */
			ptrace(PTRACE_DETACH, tid, 0,
			       (void *)(long)(!event && sig != SIGURG ? sig : 0));
			break;
		}
	}
	/* this process's threads leave the table */
	size_t k = 0;
	for (size_t i = 0; i < nthreads; i++)
		if (threads[i].leader != pid)
			threads[k++] = threads[i];
	nthreads = k;
	leaders[l] = leaders[--nleaders];
	if (!nleaders)
		signal(SIGCHLD, SIG_DFL);
}
