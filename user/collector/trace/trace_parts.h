/* What the parts of the trace (user/collector/trace*.c, phases.c, stacks.c, error.c)
 * share, and nothing outside them needs: trace.h is the interface to the rest. */
#ifndef EVMBPF_TRACE_PARTS_H
#define EVMBPF_TRACE_PARTS_H

#include "trace.h"

#define DEFAULT_PHASE "other"

/* trace_writer.c: close an event (the reference's "i", then tid and ts_ns when tid is
 * not 0; ts 0: the time of the record being read) and write it; the header, once. */
void trace_emit(struct trace *t, struct buf *ev, uint32_t tid, uint64_t ts);
void trace_header(struct trace *t);
/* A finished line (newline included) into the file or the --tail ring, now: the way out
 * of lines that waited for CUDA tensors' stats (cupti_numeric.c). */
void trace_write_line(struct trace *t, struct buf *line);

/* trace.c: the name of a type for descriptions (struct describe_ctx's callback). */
const char *trace_type_name(void *arg, uint64_t type);

/* phases.c */
/* The phase an event gets: the innermost marker active on its thread (marker, as the
 * BPF side saw it), else what the rules gave the thread's outermost call, else other. */
const char *phase_at(struct trace *t, const struct thread_stack *s, uint64_t marker);
/* What the rules give the frames recorded under an outermost call; NULL: none matched. */
const char *phase_from_rules(struct trace *t, const struct thread_stack *s);
/* The outermost module call among those frames: the model, after a mid-forward attach. */
uint64_t phase_enclosing_model(struct trace *t, const struct thread_stack *s);
void phase_stack_record(struct trace *t, const struct rec_stack *r);
void phase_marker_record(struct trace *t, const struct rec_marker *r);
/* Is a marker of this kind (MARKER_KIND_*) `marker` or one enclosing it? */
int phase_marker_kind_in(const struct trace *t, uint64_t marker, uint32_t kind);

/* stacks.c */
struct thread_stack *stack_of(struct trace *t, uint32_t tid);
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

#endif
