/* The trace's lines (trace_writer.c): events closed and handed to the trace's sinks. */
#ifndef EVMBPF_TRACE_WRITER_H
#define EVMBPF_TRACE_WRITER_H

#include "trace_state.h"

/* Close an event (the reference's "i", then tid and ts_ns when tid is not 0; ts 0: the
 * time of the record being read) and write it; the header, once. */
void trace_emit(struct trace *t, struct buf *ev, uint32_t tid, uint64_t ts);
/* The end of an event's line: its "i", and its thread and wall-clock time when tid is
 * not 0, the closing brace and the newline. */
void trace_event_end(struct buf *ev, int64_t i, uint32_t tid, uint64_t wall_ns);
void trace_header(struct trace *t);
/* Mention the drops the BPF side counted (where they were seen, and at the end). */
void trace_set_dropped(struct trace *t, uint64_t dropped);
/* The closing mark of a machine whose hardware breakpoints do not fire: what the trace
 * could not observe, as line number i. */
void trace_write_unobservable(struct trace *t, int64_t i);
/* The mark of a module tree read up to its bound (struct modtree's cut): which bound,
 * how many modules are named; the calls of the others are not traced. */
void trace_write_model_cut(struct trace *t, int64_t i);
/* evmbpf record's closing mark: why it wrote the file, line i; with `threads` (a JSON
 * document, or NULL) under that key. */
void trace_write_recorded(struct trace *t, int64_t i, const char *why, const char *threads);

#endif
