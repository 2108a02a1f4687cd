/* What the rest of the collector tells a trace, and reads of it (trace.h): the one way
 * into struct trace from outside trace/. */
#include <stdio.h>

#include "trace.h"
#include "describe.h"
#include "sink.h"

void trace_set_end(struct trace *t, uint64_t ts_ns)
{
	t->end_ns = ts_ns;
}

void trace_set_cuda(struct trace *t, struct cudamem *cuda)
{
	t->cuda = cuda;
}

void trace_set_types(struct trace *t, int type_map_fd, uint64_t type_tag)
{
	t->type_map_fd = type_map_fd;
	t->type_tag = type_tag;
}

void trace_set_oom_killed(struct trace *t)
{
	t->oom_killed = 1;
}

void trace_set_recorded_why(struct trace *t, const char *why)
{
	snprintf(t->recorded_why, sizeof(t->recorded_why), "%s", why);
}

void trace_bound_forget(struct trace *t)
{
	t->bound.self = 0;
}

void trace_write_failed(struct trace *t)
{
	t->write_reported = 1;
}

const char *trace_nonfinite(const struct trace *t)
{
	return t->nonfinite;
}

uint64_t trace_records(const struct trace *t)
{
	return t->records;
}

uint64_t trace_events(const struct trace *t)
{
	return t->events;
}

int trace_called(const struct trace *t)
{
	return t->call_id > 0;
}

int trace_forwarded(const struct trace *t)
{
	return t->forward_id > 0;
}

int trace_oom_killed(const struct trace *t)
{
	return t->oom_killed;
}

const char *trace_out_path(const struct trace *t)
{
	return t->out_path;
}

uint64_t trace_record_bytes(const struct trace *t)
{
	return t->record_bytes;
}

int64_t trace_forward_id(const struct trace *t)
{
	return t->forward_id;
}

long trace_tail_lines(const struct trace *t)
{
	return t->opts.tail;
}

const char *trace_current_phase(const struct trace *t)
{
	for (size_t i = 0; i < t->nthreads; i++) {
		const struct thread_stack *s = &t->threads[i];
		if (s->depth && s->frames[s->depth - 1].phase)
			return s->frames[s->depth - 1].phase;
	}
	return t->last_phase;
}

void trace_set_gpu(struct trace *t, struct gpu_calls *gpu)
{
	t->gpu = gpu;
}

void trace_push_sink(struct trace *t, struct sink *stage, trace_cuda_stats_fn *cuda_stats)
{
	stage->next = t->sink;
	t->sink = stage;
	if (t->dctx)
		t->dctx->cuda_stats = cuda_stats;
}

int trace_numeric(const struct trace *t)
{
	return t->opts.numeric;
}

int trace_stops_on_nonfinite(const struct trace *t)
{
	return t->opts.stop_on_nonfinite;
}
