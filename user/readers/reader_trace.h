/* Reading a trace file as a stream of events, with bounded memory.
 *
 * Lines are split as Python's text mode splits them (\n, \r and \r\n), blank lines
 * (Python's str.isspace) are skipped, and every other line must be one JSON object.
 * A line that is not is skipped, and reported on stderr with its number (the first
 * RD_WARN_NAMED of them; the rest in one count at the end); a refused last line
 * without a newline is reported as cut off mid-write. Nothing but the
 * current line is held, so a trace of any size reads in constant memory.
 */
#ifndef EVMBPF_READER_TRACE_H
#define EVMBPF_READER_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "reader_json.h"
#include "util.h"

/* Bytes read at a time (1 MiB); fuzzers make it small to split lines across reads. */
extern size_t rd_read_chunk;
/* The fuzzers' switch that silences diagnostics, by the name they set it by (util.h's
 * warn_silent). */
#define rd_warn_silent warn_silent

/* Corrupt lines named one by one on stderr; the rest are counted in one line. */
#define RD_WARN_NAMED 5

/* Longest line read; a longer one is skipped as corrupt. */
#define RD_LINE_MAX (256u << 20)

struct rd_lines {
	FILE *f;
	char *buf;
	size_t start;
	size_t end;
	size_t cap;
	struct buf acc;      /* a line that spans reads */
	uint64_t pos;           /* file offset of buf[start] */
	long long lineno;       /* number of the line last returned */
	uint64_t line_off;      /* its offset and whether it ended with a newline */
	int terminated;
	int too_long;
	int eof;
	int error;
	int skip_lf;            /* the last line ended in \r: a \n next belongs to it */
	size_t max_line;
};

enum rd_kind {
	RD_OTHER,
	RD_HEADER,
	RD_FORWARD,
	RD_ENTER,
	RD_INPUT_NUMERIC,
	RD_EXIT,
	RD_UNWOUND,
	RD_ERROR,
	RD_DROPPED,
};

#define RD_EVENT_CACHE 8

/* One event, parsed only as far as it is looked at: most readers need three or four
 * scalar members of most events, and building the whole tree (args, outputs,
 * statistics) would be most of the reading time. */
struct rd_event {
	struct rd_trace *t;
	const char *line;       /* valid until the next rd_trace_next */
	size_t len;
	enum rd_kind kind;      /* event["event"] */
	cJSON *full;
	int ncache;
	const char *cache_key[RD_EVENT_CACHE];
	cJSON *cache[RD_EVENT_CACHE];
};

/* event.get(key): NULL when missing. Valid until the event is cleared. */
const cJSON *rd_ev_get(struct rd_event *e, const char *key);
int rd_ev_has(struct rd_event *e, const char *key);
/* The whole event; rd_ev_take hands it over (free it with cJSON_Delete). */
const cJSON *rd_ev_full(struct rd_event *e);
cJSON *rd_ev_take(struct rd_event *e);
/* event.get(key) as a tree of the caller's own, or NULL when missing. */
cJSON *rd_ev_take_member(struct rd_event *e, const char *key);

struct rd_trace {
	const char *path;       /* named in messages */
	struct rd_lines lines;
	struct rd_json json;
	int quiet;              /* a second pass: lines were already reported */
	long long events;       /* usable events so far */
	long long bad;          /* lines refused so far */
	long long pending;      /* a refused line not yet reported (it may be the last) */
	int pending_cut;
	char pending_why[112];
	long long named;        /* corrupt lines reported by number */
	long long unnamed;      /* and those past RD_WARN_NAMED, not yet counted out */
	long long unnamed_first;
	long long unnamed_last;
	uint64_t off;           /* where the event last returned lies in the file */
	size_t len;
	long long lineno;
	/* evmbpf's mark that note_samples could not be observed where the trace was
	 * written (the header's tracer.watch, or the closing `unobservable` event): the
	 * readers then say so instead of "none recorded" */
	int samples_unobservable;
	/* evmbpf record's closing mark: why the recorder wrote the file ("exit status 3",
	 * "killed by signal 9", "flush: the process runs on"); "" when it has none */
	char recorded_why[160];
	/* ... and whose process it was: its command line, arguments joined by spaces (cut
	 * to fit), "" when the mark has none */
	char recorded_command[512];
	/* ... and the node it ran on (its "host": at most 64 bytes kept, a control character
	 * made '?'), "" when the mark has none */
	char recorded_host[65];
	/* ... and the modules its threads were in, from the mark's thread dump ("threads":
	 * a flush, or a process that died in modules running since the recorder attached):
	 * "TID: <root> (Model) > layers.1 (Wait); ..." (cut to fit, a control character made
	 * '?'), "" when the mark has none */
	char recorded_open[512];
};

void rd_trace_init(struct rd_trace *t, FILE *f, const char *path);
/* 1 and the next event in *ev (which it clears first), 0 at the end, -1 on a read
 * error (reported on stderr). Zero-initialize ev before the first call and give it
 * to rd_ev_clear after the last. */
int rd_trace_next(struct rd_trace *t, struct rd_event *ev);
void rd_ev_clear(struct rd_event *e);
/* Start again from the top, quietly. -1 when the file cannot seek (reported). */
int rd_trace_rewind(struct rd_trace *t);
/* The event at a place rd_trace_next returned earlier, or NULL. Leaves the stream
 * where it was. */
cJSON *rd_trace_at(struct rd_trace *t, uint64_t off, size_t len);
void rd_trace_free(struct rd_trace *t);

/* The file a TRACE argument names, as the reference's read_trace finds it: the path
 * itself, or RUN/debug/trace.jsonl (then the other *.jsonl) for a run directory.
 * NULL with *err set to the reference's message when there is none; both malloc'd. */
char *rd_resolve_trace(const char *given, char **err);

/* Open the resolved file for reading, or NULL with the reason on stderr. */
/* A trace in a recorder's folder: opened without following a link, a regular file only
 * (NULL, and nothing said, otherwise). */
FILE *rd_open_trace_nofollow(const char *file);
FILE *rd_open_trace(const char *file);

#endif
