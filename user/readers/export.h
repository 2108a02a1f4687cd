/* evmbpf export TRACE --format chrome|speedscope: a trace as a timeline.
 *
 * chrome: the Trace Event JSON that torch.profiler writes and Perfetto and
 * chrome://tracing open. Per thread of the target: a track of its module calls (one
 * slice a call, named by its path; args: class, inputs, output, call, forward, phase,
 * depth), a track of its forwards and one of its phases; `error`, `unwound` and
 * `dropped` events as instant events with their details; `mem` as counters.
 * speedscope: speedscope's evented format, one profile a thread, frames named
 * "path (Class)".
 *
 * Streaming: memory holds the calls open on each thread, the names of the frames
 * (speedscope) and nothing that grows with the number of events. A damaged trace is
 * read as the other readers read it (a cut last line and corrupt lines skipped), and
 * calls still open when it ends (a killed tracer) end at its last timestamp, marked
 * "unfinished". Time is the trace's `ts_ns` from its first event on; a trace without
 * timestamps (the in-process tracer writes none) is laid out one event a microsecond.
 */
#ifndef EVMBPF_EXPORT_H
#define EVMBPF_EXPORT_H

#include <stdio.h>

enum rd_export_format {
	RD_EXPORT_CHROME,
	RD_EXPORT_SPEEDSCOPE,
};

/* The format a --format value names: 0, or -1 for none. */
int rd_export_format_of(const char *name, enum rd_export_format *fmt);

/* The export of the trace read from in (`file` names it in diagnostics and in the
 * output) written to out. Returns the exit code: 0, or 1 when nothing usable was read
 * or writing failed. */
int rd_export(FILE *in, const char *file, enum rd_export_format fmt, FILE *out);

/* evmbpf export: rd_export into `output` ("-" for stdout; NULL for stdout unless it is
 * a terminal). A file is created with mode 0600 (under sudo, owned by SUDO_UID), never
 * over an existing one unless force, never through a symbolic link, never over the
 * trace itself; it is removed again when the export fails. */
int rd_export_to(FILE *in, const char *file, enum rd_export_format fmt, const char *output,
		 int force);

#endif
