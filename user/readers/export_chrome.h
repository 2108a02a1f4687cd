/* evmbpf export --format chrome: the Trace Event JSON that torch.profiler writes and
 * Perfetto and chrome://tracing open (export.h). export.c walks the trace and calls
 * these for what the timeline shows; each writes its events to x->out. */
#ifndef EVMBPF_EXPORT_CHROME_H
#define EVMBPF_EXPORT_CHROME_H

#include "export_timeline.h"

void chrome_begin(struct exporter *x);
/* A thread first seen: its tracks' names and order. */
void chrome_thread(struct exporter *x, struct thread *th);

/* The module track: a call's slice opened, closed (args: the members to say, without
 * the braces, or NULL), an exit whose enter is not in the trace, an unwound call. */
void chrome_enter(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns);
void chrome_close_call(struct exporter *x, struct thread *th, const struct frame *f,
		       int64_t ns, const char *args);
void chrome_unmatched_exit(struct exporter *x, struct thread *th, struct rd_event *e,
			   int64_t ns, long long d);
void chrome_unwound(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns);
/* The args members of a returned call's slice, and of one an exception unwound. */
void chrome_return_args(struct buf *args, struct rd_event *e);
void chrome_unwound_args(struct buf *why, struct rd_event *e);

/* The forward and phase tracks: a forward opens its slice (closing the last one); the
 * phase slice changes when an event's phase does. */
void chrome_forward(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns);
void chrome_close_forward(struct exporter *x, struct thread *th, int64_t ns, const char *args);
void chrome_phase_at(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns);
void chrome_close_phase(struct exporter *x, struct thread *th, int64_t ns, const char *args);

/* Instants and counters. */
void chrome_error(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns,
		  int threaded);
void chrome_dropped(struct exporter *x, struct thread *th, struct rd_event *e, int64_t ns);
void chrome_mem(struct exporter *x, struct rd_event *e, int64_t ns);

/* The document's end: its otherData (the trace, the clock, the header). */
void chrome_end(struct exporter *x);

#endif
