/* Whether the running kernel preempts its own code (preempt.c): the programs' per-CPU
 * buffers and their CPU's current slot (bpf/state.bpf.h) assume that nothing else of
 * theirs runs on a CPU until a program returns, which holds only where it does not. */
#ifndef EVMBPF_PREEMPT_H
#define EVMBPF_PREEMPT_H

#include <stddef.h>

enum { KPREEMPT_NO, KPREEMPT_YES, KPREEMPT_UNKNOWN };

/* KPREEMPT_NO (none, voluntary), KPREEMPT_YES (full, lazy, PREEMPT_RT) or
 * KPREEMPT_UNKNOWN; how: the model, and where it was read, in words. */
int kernel_preemption(char *how, size_t cap);
/* Whether the programs check, before a record goes to the ring, that no other task's
 * program ran on their CPU since they began (EVMBPF_PREEMPT_GUARD=1 or 0 says; else
 * where the kernel preempts its code, or cannot be known not to). Said once with -v. */
int preempt_guard_wanted(void);

#endif
