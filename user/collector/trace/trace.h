/* The trace the reference in-process tracer would have written, rebuilt from the probe
 * records: module paths, call and forward ids, depth, reconcile, errors, tail mode.
 * What the rest of evmbpf does with a trace: open it, give it records, close it (its
 * end, error.h's trace_finish, comes first). */
#ifndef EVMBPF_TRACE_H
#define EVMBPF_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "trace_state.h"

struct buf;
struct dnode_tensor;
struct dnode_tensor_data;

/* Parse NAME=[MODULE:]QUALNAME; -1 when it is not of that form. */
int phase_rule_parse(const char *text, struct phase_rule *out);

int trace_open(struct trace *t, struct target *target, const char *path, int force,
	       const struct trace_opts *opts);
/* One record from the ring buffer; held: its thread waits in a hold while it is read
 * (--numeric reads values only then). */
void trace_record(struct trace *t, const void *data, size_t size, int held);
/* The end of the trace: what the sinks keep is written (the --tail lines), then the
 * closing mark; 0, or -1 when the file could not be written (said on stderr).
 * evmbpf record's traces (deferred_file): TRACE_KEPT when the disk (or the quota) was
 * full: nothing was written, the trace is as it was, and trace_close may be tried again
 * later (or trace_abandon'ed). */
#define TRACE_KEPT 1
int trace_close(struct trace *t);
/* A trace trace_close kept (TRACE_KEPT): its file's bytes, made when the disk was first
 * found full (the trace's other state is freed then), handed to the caller: 0, or -1
 * when it has none. trace_write_kept: those bytes into path, created as the trace's file
 * is; 0, TRACE_KEPT (still no room: not tried while the file system lacks its size, or
 * ENOSPC/EDQUOT), or -1 (failed, said). */
int trace_take_kept(struct trace *t, char **data, size_t *len);
int trace_write_kept(const char *path, const char *data, size_t len);
/* The process and its BPF maps are gone: nothing more is read from them (a kept trace's
 * descriptions use the names taken when their events came). */
void trace_target_gone(struct trace *t);
/* A trace that never began: closed, its file removed. */
void trace_abandon(struct trace *t);
int trace_is_open(const struct trace *t);
/* Write out what the file's buffer holds: 0, or the errno of the first failure. */
int trace_flush(struct trace *t);
/* The file's descriptor (its size, for the status line), or -1 (stdout). */
int trace_out_fd(const struct trace *t);

/* evmbpf record. The bound in bytes of the --tail lines (a process's share of
 * --max-memory): 1 the first time it has taken lines (to be said once). What the tail
 * holds now, in bytes. */
int trace_tail_bound(struct trace *t, size_t max_bytes);
size_t trace_tail_bytes(const struct trace *t);
/* evmbpf record: whose the trace is (a JSON object, malloc'd: the trace takes it), for its
 * closing `recorded` mark's "process" */
void trace_set_recorded_who(struct trace *t, char *who);
/* evmbpf record: what each thread ran (a thread dump as `evmbpf dump --json` writes it,
 * malloc'd: the trace takes it), for its closing mark's "threads": a process attached
 * while modules ran, which died before any of them returned */
void trace_set_recorded_threads(struct trace *t, char *threads_json);
/* What its module tree holds, in bytes (names and table: counted in --max-memory) */
size_t trace_model_bytes(const struct trace *t);
/* The live tail written to path now, as a detach now would have written it: the tail,
 * the frames still open `unwound` ("session ended"), the `dropped` line, and the
 * closing `recorded` mark (its "why": why, or "flush: the process runs on" when NULL),
 * with threads_json (what each thread runs now, as `evmbpf dump
 * --json` shows it; NULL: none) as its "threads". The trace goes on untouched. With no
 * event yet, the file is that mark alone. 0 written, 1 nothing to write (no tail, or no
 * event and no threads_json), -1 failed (said). */
int trace_snapshot(struct trace *t, const char *path, const char *threads_json,
		   const char *why);
/* evmbpf record --hang-after: a thread inside a module call whose last module event came
 * before before_ns (CLOCK_MONOTONIC), not given since that event: 1, and its tid, the
 * innermost running module's path and that event's time (the thread is not given again
 * until its next module event); 0 none. */
int trace_hung_thread(struct trace *t, uint64_t before_ns, uint32_t *tid, const char **module,
		      uint64_t *since_ns);

/* What the rest of the collector tells a trace (trace_set.c): */
/* the target's exit, when its record came (CLOCK_REALTIME ns of the record) */
void trace_set_end(struct trace *t, uint64_t ts_ns);
/* the process's CUDA memory counters, for `mem` and the header's `cuda` (NULL: none) */
void trace_set_cuda(struct trace *t, struct cudamem *cuda);
/* its object's type names (a BPF map's fd, or -1) and the process's tag on their keys */
void trace_set_types(struct trace *t, int type_map_fd, uint64_t type_tag);
/* the OOM killer chose the process: its end says so */
void trace_set_oom_killed(struct trace *t);
/* evmbpf record: why the file is written (its closing mark's words) */
void trace_set_recorded_why(struct trace *t, const char *why);
/* --cupti: its module calls' GPU intervals (NULL: none) */
void trace_set_gpu(struct trace *t, struct gpu_calls *gpu);
/* --cupti --numeric: a sink in front of the trace's (lines wait there for CUDA tensors'
 * stats), and where the descriptions post CUDA tensors */
typedef void trace_cuda_stats_fn(struct describe_ctx *ctx, const struct dnode_tensor *t,
				 const struct dnode_tensor_data *d, int dtype, struct buf *out);
void trace_push_sink(struct trace *t, struct sink *stage, trace_cuda_stats_fn *cuda_stats);
/* the bound call whose entry is pending is not this module call's (bound_watch.c) */
void trace_bound_forget(struct trace *t);
/* Writes failed, and the failure was said: the close says nothing more. */
void trace_write_failed(struct trace *t);
/* What a trace has come to: */
const char *trace_nonfinite(const struct trace *t); /* the culprit's path, or NULL */
uint64_t trace_records(const struct trace *t);
uint64_t trace_events(const struct trace *t);
int trace_called(const struct trace *t);     /* a module call was seen */
int trace_forwarded(const struct trace *t);  /* a forward has begun */
int trace_oom_killed(const struct trace *t);
const char *trace_out_path(const struct trace *t);
uint64_t trace_record_bytes(const struct trace *t);
int64_t trace_forward_id(const struct trace *t);   /* the last forward's id (0: none) */
long trace_tail_lines(const struct trace *t);      /* --tail N (0: streamed) */
int trace_numeric(const struct trace *t);          /* --numeric */
int trace_stops_on_nonfinite(const struct trace *t);
/* The phase of the innermost running module of the first thread that runs one; when
 * none runs (between forwards), that of the last module entered ("" : none yet). */
const char *trace_current_phase(const struct trace *t);

#endif
