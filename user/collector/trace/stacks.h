/* Each thread's stack of module calls (stacks.c): the reference's per-thread stack, its
 * _pop_to and its reconcile (`unwound` events). */
#ifndef EVMBPF_STACKS_H
#define EVMBPF_STACKS_H

#include "trace_state.h"

struct thread_stack *stack_of(struct trace *t, uint32_t tid);
/* A module event of the thread at ts_ns (CLOCK_MONOTONIC): --hang-after's clock. */
void stack_event_seen(struct trace *t, uint32_t tid, uint64_t ts_ns);
void stack_frame_free(struct frame *f);
void stack_truncate(struct thread_stack *s, size_t depth);
/* Every frame of the thread `unwound` with this reason, and the stack emptied. */
void stack_reconcile(struct trace *t, struct thread_stack *s, const char *reason);
/* The reference's _pop_to: take the innermost frame of this path off the stack (into
 * *out), the frames above it unwound; 0 when there is none. */
int stack_pop_to(struct trace *t, struct thread_stack *s, const char *path, struct frame *out);
void stacks_reconcile_all(struct trace *t, const char *reason);
/* Is any frame still running (entered, neither returned nor left by an exception)? */
int stacks_running(const struct trace *t);
/* Every thread's open frames `unwound` with this reason, the stacks left as they are
 * (a flush of evmbpf record). */
void stacks_write_open(struct trace *t, const char *reason);
/* Every thread's stack freed. */
void stacks_free(struct trace *t);

#endif
