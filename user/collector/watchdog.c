#include "watchdog.h"

#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

static volatile uint32_t *pending;  /* shared with the watchdog */
static pid_t watcher = -1;
static pid_t watched;

static void on_parent_death(int sig)
{
	(void)sig;
	if (*pending)
		kill(watched, SIGCONT);
	_exit(0);
}

int watchdog_start(pid_t target)
{
	if (watcher > 0)
		return 0;
	void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return -1;
	pending = page;
	watched = target;
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		/* hold no BPF program or file of evmbpf's: when evmbpf dies, its probes go */
		syscall(SYS_close_range, 0, ~0U, 0);
		struct sigaction sa = { .sa_handler = on_parent_death };
		sigemptyset(&sa.sa_mask);
		sigaction(SIGTERM, &sa, NULL);
		signal(SIGINT, SIG_IGN);
		signal(SIGHUP, SIG_IGN);
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		if (getppid() != parent)
			on_parent_death(0);
		for (;;)
			pause();
	}
	watcher = pid;
	return 0;
}

void watchdog_pending(int value)
{
	if (pending)
		*pending = (uint32_t)value;
}

void watchdog_stop(void)
{
	watchdog_pending(0);
	if (watcher > 0) {
		kill(watcher, SIGKILL);
		waitpid(watcher, NULL, 0);
		watcher = -1;
	}
}
