/* Whether hardware breakpoints fire on this machine (hwwatch.c): the self-test. */
#ifndef EVMBPF_HWWATCH_H
#define EVMBPF_HWWATCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct hw_watch {
	int opened;             /* the kernel accepted the read/write breakpoint */
	int err;                /* why not, when it did not */
	int exec_err;           /* the execute breakpoint's refusal, or 0 */
	int forced;             /* EVMBPF_TEST_NO_DEBUG_REGISTERS=1 */
	uint64_t rw_hits, rw_runs;
	uint64_t exec_hits, exec_runs;
};

/* A hardware breakpoint on thread tid (0: this one) of the kind every watch of evmbpf's
 * is: user mode only, type HW_BREAKPOINT_*, len bytes at addr; HW_WATCH_SAMPLE: each hit
 * is a sample (a BPF program attached to the fd runs), else the fd counts hits;
 * HW_WATCH_INHERIT: threads started later get it too. The fd, or -1 (errno). */
#define HW_WATCH_SAMPLE 1
#define HW_WATCH_INHERIT 2
int hw_watch_open(pid_t tid, uint32_t type, uint64_t addr, uint64_t len, int flags);
/* The self-test, run once (the first call) and kept. */
const struct hw_watch *hw_watch_check(void);
/* 1 when a read/write breakpoint counted every access. */
int hw_watch_works(void);
/* Why they do not, in words (for a message). */
const char *hw_watch_why(char *buf, size_t cap);
/* What is lost without them, in words. */
extern const char *const HW_WATCH_LOST;
/* Said once on stderr when they do not fire. */
void hw_watch_say(void);

#endif
