/* What each forward covers, built in one streaming pass: the reference's
 * forward_index() and the set of forwards summarize_trace() counts.
 *
 * One record a forward number; nothing else grows with the trace. */
#ifndef EVMBPF_READER_INDEX_H
#define EVMBPF_READER_INDEX_H

#include <stdio.h>

#include "reader_keymap.h"
#include "reader_trace.h"

struct rd_fwd {
	cJSON *number;        /* the forward as the first enter gave it (1, 1.0, ...) */
	struct pykey key;     /* points into number, or into header_key */
	cJSON *header_key;    /* the forward of the event that created the record */
	long long modules;    /* enter events */
	cJSON *phase;         /* the first enter's phase */
	cJSON *samples;       /* from the last `forward` event, NULL if none */
	cJSON *batch_rows;
};

struct rd_index {
	struct rd_fwd *v;
	size_t n;
	size_t cap;
	struct rd_keymap map;
	size_t entered;       /* records with at least one enter: len(forwards) */
};

/* Account for one event (enter and forward events matter). May take parts of it. */
void rd_index_add(struct rd_index *x, struct rd_event *event);
/* forward_index(): the entered forwards in order. A malloc'd array of pointers. */
size_t rd_index_sorted(struct rd_index *x, struct rd_fwd ***out);
/* One forward_index() entry as the healthy summary prints it (no indent). */
void rd_index_line(struct buf *b, const struct rd_fwd *f, int unobservable);
/* json.dumps(forward_index(events)). */
void rd_index_json(FILE *out, struct rd_fwd **sorted, size_t n);
void rd_index_free(struct rd_index *x);

#endif
