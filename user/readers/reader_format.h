/* The reference reader's renderings of one event's parts, in C: _format_samples,
 * _stats_text, _format_tensor, _format_args, _io_summary and _io_columns of
 * evalmetry/debug.py, byte for byte.
 *
 * Where the reference would raise on a malformed event (a key missing, a value of
 * the wrong type), these print what they can instead; docs/readers.md lists how. */
#ifndef EVMBPF_READER_FORMAT_H
#define EVMBPF_READER_FORMAT_H

#include <stdio.h>

#include "reader_pyv.h"
#include "util.h"

/* Most copies of an indent ('  ' * depth) written; Python would build any size. */
#define RD_MAX_DEPTH 10000

void rd_format_samples(struct buf *b, const cJSON *event, int unobservable);
/* The same for the rows themselves (event.get("samples")). */
void rd_format_rows(struct buf *b, const cJSON *rows, int unobservable);
void rd_stats_text(struct buf *b, const cJSON *stats);
void rd_format_tensor(struct buf *b, const cJSON *described);
/* Appends one line per input to out, each starting with indent. */
void rd_format_args(FILE *out, const cJSON *event, const char *indent);
void rd_io_summary(struct buf *b, const cJSON *described);
void rd_io_columns(struct buf *b, const cJSON *event);
/* '  ' * event['depth']: how many levels (0 for a depth that is not an int). */
long long rd_depth(const cJSON *event);
/* Python's `x.get("stats") or {}` style: v when truthy, else NULL (an empty dict). */
const cJSON *rd_or_empty(const cJSON *v);

#endif
