/* The host's note_samples(contexts) and without_samples(), seen from outside: the
 * documents each forward covers (its watch is session/samples_watch.c's). */
#ifndef EVMBPF_SAMPLES_H
#define EVMBPF_SAMPLES_H

#include <stdint.h>

#include "evmbpf.h"

struct trace;
struct buf;

/* REC_SAMPLES: read the contexts as the reference's set_samples does, reconcile the
 * thread's stack ("a new batch was declared"). */
void samples_record(struct trace *t, const struct rec_samples *r);
/* `"samples": ..., "batch_rows": ...` for an event; blank under without_samples() (the
 * innermost marker `marker` or one enclosing it). */
void samples_put(struct trace *t, struct buf *b, int *first, uint64_t marker);

#endif
