/* Phases (phases.c): the markers the BPF side saw (phase() context managers, generate,
 * note_samples), the --phase rules on the frames under an outermost call, and whether a
 * frame is a module call's. */
#ifndef EVMBPF_PHASES_H
#define EVMBPF_PHASES_H

#include "trace_state.h"

#define DEFAULT_PHASE "other"

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

/* Is this code object Module.__call__'s (_call_impl / _wrapped_call_impl)? `first` is
 * the frame's first local (it names a method's class on 3.9/3.10). */
int trace_is_module_call(struct trace *t, uint64_t code, uint64_t first);
/* A frame's first local as an object: through the cell it is kept in when a closure
 * captures it (3.11+; torch 2's Module._call_impl does that to self). */
uint64_t trace_first_object(struct trace *t, uint64_t first);

#endif
