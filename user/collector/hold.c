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

#include "session.h"
#include "util.h"

enum { T_RUNNING, T_HELD, T_GONE };

static struct { pid_t tid; int state; } *threads;
static size_t nthreads, cap;
static pid_t leader;
static int active, leader_exited, leader_status;

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
	struct sigaction sa = { .sa_handler = on_sigchld };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, NULL);
	leader = pid;
	active = 1;
	/* until a pass finds no thread it has not seized (threads may start meanwhile) */
	for (int pass = 0, added = 1; added && pass < 100; pass++) {
		added = 0;
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/task", pid);
		DIR *d = opendir(path);
		if (!d) {
			warnx_("--numeric: cannot list the threads of %d: %s", pid, strerror(errno));
			hold_release(0);
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
				hold_release(0);
				return -1;
			}
			slot_of(tid, 1);
			added = 1;
		}
		closedir(d);
	}
	debugx("--numeric: %zu threads of %d seized", nthreads, pid);
	return 0;
}

int hold_active(void)
{
	return active;
}

/* One report of a traced thread (waitpid's). */
static void handle(pid_t tid, int status)
{
	size_t i = slot_of(tid, 0);
	if (WIFEXITED(status) || WIFSIGNALED(status)) {
		if (i != (size_t)-1)
			threads[i].state = T_GONE;
		if (tid == leader) {
			leader_exited = 1;
			leader_status = status;
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
			slot_of((pid_t)child, 1);
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
	if (!active)
		return;
	int status;
	pid_t w;
	while ((w = waitpid(-1, &status, __WALL | WNOHANG)) > 0)
		handle(w, status);
}

int hold_wait(pid_t tid)
{
	if (!active)
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

void hold_continue_all(void)
{
	for (size_t i = 0; i < nthreads; i++)
		if (threads[i].state == T_HELD) {
			threads[i].state = T_RUNNING;
			ptrace(PTRACE_CONT, threads[i].tid, 0, 0);
		}
}

int hold_leader_exit(int *status)
{
	if (leader_exited)
		*status = leader_status;
	return leader_exited;
}

void hold_release(int stop_target)
{
	if (!active)
		return;
	if (stop_target)
		kill(leader, SIGSTOP); /* pending before any held thread runs again */
	for (size_t i = 0; i < nthreads; i++) {
		pid_t tid = threads[i].tid;
		if (threads[i].state == T_GONE)
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
					slot_of((pid_t)child, 1);
			}
			/* a signal on its way is delivered; ours (SIGURG) and traps are not */
			ptrace(PTRACE_DETACH, tid, 0,
			       (void *)(long)(!event && sig != SIGURG ? sig : 0));
			break;
		}
	}
	active = 0;
	nthreads = 0;
	signal(SIGCHLD, SIG_DFL);
}
