/* Whether hardware breakpoints fire on this machine (hwwatch.c): the self-test. */
#ifndef EVMBPF_HWWATCH_H
#define EVMBPF_HWWATCH_H

#include <stddef.h>
#include <stdint.h>

struct hw_watch {
	int opened;             /* the kernel accepted the read/write breakpoint */
	int err;                /* why not, when it did not */
	int exec_err;           /* the execute breakpoint's refusal, or 0 */
	int forced;             /* EVMBPF_TEST_NO_DEBUG_REGISTERS=1 */
	uint64_t rw_hits, rw_runs;
	uint64_t exec_hits, exec_runs;
};

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
