/* Do hardware breakpoints fire on this machine? Two capabilities rest on them
 * (bound.c: the return of a module called through its bound __call__; samples.c:
 * note_samples' call), and some machines accept one and never fire it: a paravirtual
 * guest whose hypervisor does not pass the debug registers through (`Hypervisor
 * detected: PVM` in dmesg) opens a PERF_TYPE_BREAKPOINT event, and its counter stays at
 * 0. So evmbpf arms one on its own memory, as the watches on the target are armed (the
 * same attributes, on this thread), executes and touches it, and counts the hits.
 * Once per run; `doctor` prints it as a line. Nothing of any other process is touched.
 *
 * EVMBPF_TEST_NO_DEBUG_REGISTERS=1 is for the tests only: the result is "none fire",
 * so what runs without them is tested on every machine. */
#include "hwwatch.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>

#include "util.h"

#define EXEC_RUNS 1000
#define RW_RUNS 2000

static volatile uint8_t touched[64] __attribute__((aligned(64)));

/* the instruction the execute watch is on; its own function, never inlined */
__attribute__((noinline)) static void executed(void)
{
	__asm__ volatile("" ::: "memory");
}

int hw_watch_open(pid_t tid, uint32_t type, uint64_t addr, uint64_t len, int flags)
{
	struct perf_event_attr a;
	memset(&a, 0, sizeof(a));
	a.type = PERF_TYPE_BREAKPOINT;
	a.size = sizeof(a);
	a.bp_type = type;
	a.bp_addr = addr;
	a.bp_len = len;
	a.sample_period = (flags & HW_WATCH_SAMPLE) ? 1 : 0;
	a.exclude_kernel = 1;
	a.exclude_hv = 1;
	a.inherit = (flags & HW_WATCH_INHERIT) ? 1 : 0;
	return (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

static uint64_t hits(int fd)
{
	uint64_t n = 0;
	if (read(fd, &n, sizeof(n)) != (ssize_t)sizeof(n))
		return 0;
	return n;
}

static void run(struct hw_watch *w)
{
	memset(w, 0, sizeof(*w));
	w->exec_runs = EXEC_RUNS;
	w->rw_runs = RW_RUNS;
	const char *forced = getenv("EVMBPF_TEST_NO_DEBUG_REGISTERS");
	if (forced && !strcmp(forced, "1")) {
		w->forced = 1;
		w->opened = 1;
		return;
	}
	/* read/write, one byte, as the watches on the target's code units */
	/* counting (no sample period: no signal, no ring); read() gives the hits */
	int rw = hw_watch_open(0, HW_BREAKPOINT_RW, (uint64_t)(uintptr_t)&touched[8],
			       HW_BREAKPOINT_LEN_1, 0);
	if (rw < 0) {
		w->err = errno;
		return;
	}
	int x = hw_watch_open(0, HW_BREAKPOINT_X, (uint64_t)(uintptr_t)executed, sizeof(long), 0);
	if (x < 0)
		w->exec_err = errno;
	w->opened = 1;
	/* stores only: an increment is a load and a store, two accesses that each fire */
	for (int i = 0; i < RW_RUNS; i++)
		touched[8] = (uint8_t)i;
	for (int i = 0; i < EXEC_RUNS; i++)
		executed();
	w->rw_hits = hits(rw);
	close(rw);
	if (x >= 0) {
		w->exec_hits = hits(x);
		close(x);
	}
}

const struct hw_watch *hw_watch_check(void)
{
	static struct hw_watch w;
	static int done;
	if (!done) {
		run(&w);
		done = 1;
		if (w.opened && !w.forced && !hw_watch_works())
			debugx("hardware breakpoints: %llu of %d accesses and %llu of %d executions "
			       "counted", (unsigned long long)w.rw_hits, RW_RUNS,
			       (unsigned long long)w.exec_hits, EXEC_RUNS);
	}
	return &w;
}

int hw_watch_works(void)
{
	const struct hw_watch *w = hw_watch_check();
	/* the watches on the target are read/write ones: those must count every access */
	return w->opened && !w->forced && w->rw_hits >= (uint64_t)w->rw_runs;
}

const char *hw_watch_why(char *buf, size_t cap)
{
	const struct hw_watch *w = hw_watch_check();
	if (w->forced)
		snprintf(buf, cap, "EVMBPF_TEST_NO_DEBUG_REGISTERS=1 says none fire");
	else if (!w->opened)
		snprintf(buf, cap, "the kernel refuses a hardware breakpoint: %s", strerror(w->err));
	else
		snprintf(buf, cap, "the kernel accepts a hardware breakpoint, and it counted %llu of "
			 "%llu accesses%s%llu of %llu executions",
			 (unsigned long long)w->rw_hits, (unsigned long long)w->rw_runs,
			 w->exec_err ? "" : " and ",
			 w->exec_err ? 0ULL : (unsigned long long)w->exec_hits,
			 w->exec_err ? 0ULL : (unsigned long long)w->exec_runs);
	if (w->exec_err && !w->forced && w->opened) {
		size_t n = strlen(buf);
		snprintf(buf + n, cap - n, " (an execute breakpoint: %s)", strerror(w->exec_err));
	}
	return buf;
}

const char *const HW_WATCH_LOST =
	"documents in flight (note_samples) are not recorded, and modules called through "
	"their bound __call__ (`model.__call__(x)`, `step = model.__call__; step(**kw)`, "
	"generate()'s decoding steps) are not followed: their own module calls are written "
	"without them, as a module called outside its model's forward is (in the forward "
	"before), or as their caller's children";

void hw_watch_say(void)
{
	static int said;
	if (said++ || hw_watch_works())
		return;
	char why[256];
	warnx_("warning: hardware breakpoints do not fire on this machine (%s; a hypervisor "
	       "that does not pass the debug registers through?): %s; the trace says so "
	       "(see docs/design.md, \"Machines without debug registers\")",
	       hw_watch_why(why, sizeof(why)), HW_WATCH_LOST);
}
