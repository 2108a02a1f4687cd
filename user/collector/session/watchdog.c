#include "watchdog.h"

#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util.h"

/* Shared with the watchdog: one slot per process evmbpf may hold (several when a job's
 * processes are traced at once). */
#define WATCH_SLOTS 256
struct watch_slot {
	volatile int32_t pid;
	volatile uint32_t pending;
};
static struct watch_slot *slots;
static pid_t watcher = -1;

static void on_parent_death(int sig)
{
	(void)sig;
	for (int i = 0; i < WATCH_SLOTS; i++)
		if (slots[i].pid > 0 && slots[i].pending)
			kill(slots[i].pid, SIGCONT);
	_exit(0);
}

static struct watch_slot *slot_of(pid_t target, int add)
{
	if (!slots)
		return NULL;
	for (int i = 0; i < WATCH_SLOTS; i++)
		if (slots[i].pid == target)
			return &slots[i];
	if (add)
		for (int i = 0; i < WATCH_SLOTS; i++)
			if (slots[i].pid <= 0) {
				slots[i].pending = 0;
				slots[i].pid = target;
				return &slots[i];
			}
	return NULL;
}

int watchdog_start(pid_t target)
{
	if (watcher > 0)
		return slot_of(target, 1) ? 0 : -1;
	void *page = mmap(NULL, WATCH_SLOTS * sizeof(struct watch_slot), PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		return -1;
	slots = page;
	slots[0].pid = target;
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

void watchdog_hold(pid_t target, int value)
{
	struct watch_slot *w = slot_of(target, value);
	if (w)
		w->pending = (uint32_t)value;
}

void watchdog_forget(pid_t target)
{
	struct watch_slot *w = slot_of(target, 0);
	if (w) {
		w->pending = 0;
		w->pid = 0;
	}
}

void watchdog_stop(void)
{
	for (int i = 0; slots && i < WATCH_SLOTS; i++)
		slots[i].pending = 0;
	if (watcher > 0) {
		kill(watcher, SIGKILL);
		waitpid(watcher, NULL, 0);
		watcher = -1;
	}
}
