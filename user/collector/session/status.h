/* What the user sees while tracing: a status line on a terminal, refreshed about once
 * a second (events written, rate, forwards, current phase, drops, file size), cleared
 * at the end, and one summary line at the end in every case. --quiet silences both. */
#ifndef EVMBPF_STATUS_H
#define EVMBPF_STATUS_H

#include <stdint.h>

#include "trace.h"

struct status {
	int quiet;            /* neither line */
	int live;             /* the status line: stderr is a terminal */
	int shown;            /* a status line is on the screen now */
	const char *out;      /* the trace's path ("-": stdout) */
	double t0, last;      /* when tracing began, when the line was last drawn (s) */
	uint64_t last_events;
	char phase[64];       /* the phase last seen running */
};

/* Tracing begins (after the attach). */
void status_start(struct status *st, int quiet, const char *out);
/* From the collector's loop, often: redraws the line when a second has passed. */
void status_tick(struct status *st, const struct trace *t, uint64_t dropped);
/* Tracing is over and the trace closed: clear the line, print the summary. */
void status_end(struct status *st, const struct trace *t, uint64_t dropped);

#endif
