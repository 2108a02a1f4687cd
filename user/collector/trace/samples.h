/* The host's note_samples(contexts) and without_samples(), seen from outside: the
 * watch on note_samples (session side) and the documents it names (trace side). */
#ifndef EVMBPF_SAMPLES_H
#define EVMBPF_SAMPLES_H

#include <stdint.h>

#include "evmbpf.h"

struct session;
struct trace;
struct buf;

/* Probe evalmetry/debug.py's module body (PyEval_EvalCode), and arm the watch at once
 * when the host has imported it already (--pid). Never fails the session. */
void samples_attach(struct session *s);
/* REC_SAMPLES_HOST: the module body has run; find note_samples and arm the watch. */
void samples_host_record(struct session *s, const struct rec_samples *r);
/* Every watch and probe of this file gone (with the other probes). */
void samples_detach(struct session *s);

/* REC_SAMPLES: read the contexts as the reference's set_samples does, reconcile the
 * thread's stack ("a new batch was declared"). */
void samples_record(struct trace *t, const struct rec_samples *r);
/* `"samples": ..., "batch_rows": ...` for an event; blank under without_samples() (the
 * innermost marker `marker` or one enclosing it). */
void samples_put(struct trace *t, struct buf *b, int *first, uint64_t marker);

#endif
