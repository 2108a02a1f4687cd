/* Closing uprobe links in a helper's exit (exitclose.h). */
#include "exitclose.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000 /* Linux 5.2 */
#endif
#ifndef P_PIDFD
#define P_PIDFD 3 /* Linux 5.4 */
#endif

#define HELPER_STACK (64 << 10)
/* at most this many helpers at once: evmbpf record's closer threads (16) and its loop */
#define HELPERS_MAX 64

struct exit_close {
	pid_t pid, parent;
	int pidfd;
	int pipe[2]; /* the helper waits for a byte on [0]: evmbpf has closed its copies */
	void *stack;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	pid_t pid;
	int reaped;
} helpers[HELPERS_MAX];

/* The helper. It shares evmbpf's memory and its thread's TLS, so it calls nothing but
 * syscall(2) (which touches errno only on an error: none here, every signal blocked) and
 * writes nothing of evmbpf's (its byte is on its own stack). It ends with exit_group:
 * from then on signals sent to it are dropped, so its exit path's closes finish. */
static int helper_main(void *arg)
{
	const struct exit_close *c = arg;
	char b;
	syscall(SYS_close, c->pipe[1]);
	syscall(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	if (syscall(SYS_getppid) == c->parent)
		syscall(SYS_read, c->pipe[0], &b, 1);
	syscall(SYS_exit_group, 0);
	return 0;
}

/* A free entry of helpers[] (mu held), or -1. */
static int free_entry(void)
{
	for (int i = 0; i < HELPERS_MAX; i++)
		if (!helpers[i].pid)
			return i;
	return -1;
}

static void unregistered(pid_t pid)
{
	pthread_mutex_lock(&mu);
	for (int i = 0; i < HELPERS_MAX; i++)
		if (helpers[i].pid == pid)
			helpers[i].pid = 0;
	pthread_mutex_unlock(&mu);
}

static int reaped_already(pid_t pid)
{
	int r = 0;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < HELPERS_MAX; i++)
		if (helpers[i].pid == pid)
			r = helpers[i].reaped;
	pthread_mutex_unlock(&mu);
	return r;
}

int exit_close_reaped(pid_t pid)
{
	int found = 0;
	pthread_mutex_lock(&mu);
	for (int i = 0; i < HELPERS_MAX && !found; i++)
		if (helpers[i].pid == pid && !helpers[i].reaped)
			found = helpers[i].reaped = 1;
	pthread_mutex_unlock(&mu);
	return found;
}

struct exit_close *exit_close_begin(void)
{
	struct exit_close *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->parent = getpid();
	c->pidfd = -1;
	c->stack = mmap(NULL, HELPER_STACK, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (c->stack == MAP_FAILED || pipe2(c->pipe, O_CLOEXEC) < 0) {
		debugx("no helper to close links in (%s): closed here", strerror(errno));
		if (c->stack != MAP_FAILED)
			munmap(c->stack, HELPER_STACK);
		free(c);
		return NULL;
	}
	/* the helper starts with every signal blocked (a terminal's ^C is not for it) */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	/* registered before it can exit: a wait of hold's for any child may reap it */
	pthread_mutex_lock(&mu);
	int e = free_entry(), err = EAGAIN;
	c->pid = -1;
	if (e >= 0) {
		c->pid = clone(helper_main, (char *)c->stack + HELPER_STACK, CLONE_VM | CLONE_PIDFD,
			       c, &c->pidfd);
		err = errno;
		if (c->pid > 0) {
			helpers[e].pid = c->pid;
			helpers[e].reaped = 0;
		}
	}
	pthread_mutex_unlock(&mu);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (c->pid < 0) {
		debugx("no helper to close links in (clone: %s): closed here", strerror(err));
		close(c->pipe[0]);
		close(c->pipe[1]);
		munmap(c->stack, HELPER_STACK);
		free(c);
		return NULL;
	}
	return c;
}

void exit_close_end(struct exit_close *c)
{
	if (!c)
		return;
	char b = 1;
	while (write(c->pipe[1], &b, 1) < 0 && errno == EINTR)
		;
	close(c->pipe[1]);
	close(c->pipe[0]);
	/* its exit closes the files: waited for (ECHILD: hold's wait reaped it, so its exit
	 * is over) */
	siginfo_t si;
	int r;
	while ((r = waitid(P_PIDFD, (id_t)c->pidfd, &si, WEXITED | __WALL)) < 0 && errno == EINTR)
		;
	if (r < 0 && errno == EINVAL) /* Linux 5.2 and 5.3: no P_PIDFD */
		while (!reaped_already(c->pid) &&
		       waitid(P_PID, (id_t)c->pid, &si, WEXITED | __WALL) < 0 && errno == EINTR)
			;
	close(c->pidfd);
	unregistered(c->pid);
	munmap(c->stack, HELPER_STACK);
	free(c);
}
