/* The module calls open on each thread, as the reference's per-thread stack keeps
 * them, and its reconcile rules: frames left by an exception or never seen to return
 * become `unwound` events, outermost first, with the reason the reference gives. */
#include "stacks.h"

#include <stdlib.h>
#include <string.h>

#include "events.h"

struct thread_stack *stack_of(struct trace *t, uint32_t tid)
{
	for (size_t i = 0; i < t->nthreads; i++)
		if (t->threads[i].tid == tid)
			return &t->threads[i];
	t->threads = xrealloc(t->threads, (t->nthreads + 1) * sizeof(*t->threads));
	struct thread_stack *s = &t->threads[t->nthreads++];
	memset(s, 0, sizeof(*s));
	s->tid = tid;
	return s;
}

void stack_event_seen(struct trace *t, uint32_t tid, uint64_t ts_ns)
{
	struct thread_stack *s = stack_of(t, tid);
	s->last_ns = ts_ns;
	s->hang_said = 0;
}

void stack_frame_free(struct frame *f)
{
	free(f->phase);
	free(f->args);
	rawnodes_unref(f->nodes);
}

static void emit_unwound(struct trace *t, struct thread_stack *s, size_t from, const char *reason)
{
	size_t n = s->depth - from;
	for (size_t k = 0; k < n; k++) {
		const struct frame *f = &s->frames[from + k];
		struct call_event ev = {
			.kind = CALL_UNWOUND, .deepest = k == n - 1, .tid = s->tid,
			/* the reference's depth: len(stack) - len(frames) + position */
			.depth = (int64_t)(s->depth - n + k), .forward = s->forward,
			.call = f->call_id, .mod = f->mod, .phase = f->phase, .reason = reason,
			.args = f->args, .nodes = f->nodes,
		};
		events_put(t, &ev);
	}
}

void stack_truncate(struct thread_stack *s, size_t depth)
{
	while (s->depth > depth)
		stack_frame_free(&s->frames[--s->depth]);
}

void stack_reconcile(struct trace *t, struct thread_stack *s, const char *reason)
{
	if (!s->depth)
		return;
	emit_unwound(t, s, 0, reason);
	stack_truncate(s, 0);
}

/* The reference's _pop_to: the innermost frame of this path; frames above it never
 * returned (an exception left them and something in between caught it). */
int stack_pop_to(struct trace *t, struct thread_stack *s, const char *path, struct frame *out)
{
	for (size_t i = s->depth; i-- > 0;) {
		if (strcmp(s->frames[i].mod->path, path))
			continue;
		if (i + 1 < s->depth) {
			emit_unwound(t, s, i + 1, "an inner module did not return");
			stack_truncate(s, i + 1);
		}
		*out = s->frames[--s->depth];
		return 1;
	}
	return 0;
}

void stacks_reconcile_all(struct trace *t, const char *reason)
{
	for (size_t i = 0; i < t->nthreads; i++)
		stack_reconcile(t, &t->threads[i], reason);
}

/* Frames entered and neither returned nor left by an exception: still running. */
int stacks_running(const struct trace *t)
{
	for (size_t i = 0; i < t->nthreads; i++)
		for (size_t k = 0; k < t->threads[i].depth; k++)
			if (!t->threads[i].frames[k].raised)
				return 1;
	return 0;
}

void stacks_free(struct trace *t)
{
	for (size_t i = 0; i < t->nthreads; i++) {
		stack_truncate(&t->threads[i], 0);
		free(t->threads[i].frames);
	}
	free(t->threads);
	t->threads = NULL;
	t->nthreads = 0;
}

void stacks_write_open(struct trace *t, const char *reason)
{
	for (size_t i = 0; i < t->nthreads; i++)
		if (t->threads[i].depth)
			emit_unwound(t, &t->threads[i], 0, reason);
}
