/* evmbpf export's state, shared by its walk of the trace (export.c) and its two
 * formats (export_chrome.c, export_speedscope.c): the threads of the target, the module
 * calls open on each, the time base, and what both formats write with. */
#ifndef EVMBPF_EXPORT_TIMELINE_H
#define EVMBPF_EXPORT_TIMELINE_H

#include <stdint.h>
#include <stdio.h>

#include "reader_keymap.h"
#include "reader_trace.h"
#include "util.h"

/* The forward and phase tracks of thread T are threads T + these in the output: real
 * tids stay below 2^22 (PID_MAX_LIMIT). */
#define FORWARDS_TID 100000000LL
#define PHASES_TID 200000000LL
/* A trace without timestamps: one event a microsecond. */
#define SEQ_NS 1000
/* speedscope: each thread's profile past the first is kept in a temporary file until
 * the end; threads past this many are left out (and said so). */
#define MAX_SPILLS 256

struct frame {
	char *name;            /* the module's path, for the closing event */
	long long call;
	int has_call;
	int64_t start;
	size_t sframe;         /* speedscope frame */
};

struct thread {
	long long tid;
	size_t index;          /* order of first appearance */
	struct frame *stack;
	size_t depth;
	size_t cap;
	int64_t last;          /* latest time written on this thread */
	int64_t first;
	int64_t *at_depth;     /* the time of its last event at each depth */
	size_t *open_at;       /* how many calls were open after that event */
	size_t ndepth;
	int64_t ended;         /* when the last slice on its module track ended */
	int fwd_open;
	char *phase;           /* the phase slice open, or NULL */
	FILE *events;          /* speedscope: where its profile's events go */
	int spilled;           /* events is a temporary file */
	int left_out;          /* speedscope: past MAX_SPILLS */
	long long nev;
};

struct exporter {
	int chrome;             /* --format chrome, else speedscope */
	FILE *out;
	const char *file;
	struct rd_trace t;
	long long pid;
	int timed;             /* the time base is set */
	int seq;               /* no timestamps: time is the event number */
	long long t0;          /* ts_ns of the first timed event */
	long long i0;
	int64_t now;           /* the latest time, ns since t0 */
	struct thread **threads;
	size_t nthreads;
	struct rd_keymap by_tid;
	long long nout;
	cJSON *header;
	struct buf line;
	int64_t mem_at;        /* chrome: the time of the last counter event */
	/* speedscope */
	int begun;
	struct rd_keymap frames;
	struct buf frames_json;
	size_t nframes;
	size_t nspills;
	struct thread *direct;
	long long unmatched;
	long long left_out;
	/* said at the end */
	long long unfinished;
};

/* b's text to `to` after the ",\n" that separates it from the *count texts before it;
 * b is emptied. */
void export_emit(FILE *to, long long *count, struct buf *b);
/* s as a JSON string, in UTF-8 (jsonw.h's jw_str_utf8). */
void export_jstr(struct buf *b, const char *s);

#endif
