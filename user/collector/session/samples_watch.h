/* note_samples' watch (samples_watch.c): the session side of trace/samples.c. */
#ifndef EVMBPF_SAMPLES_WATCH_H
#define EVMBPF_SAMPLES_WATCH_H

#include "evmbpf.h"

struct session;

/* Probe evalmetry/debug.py's module body (PyEval_EvalCode), and arm the watch at once
 * when the host has imported it already (--pid). Never fails the session. */
void samples_attach(struct session *s);
/* REC_SAMPLES_HOST: the module body has run; find note_samples and arm the watch. */
void samples_host_record(struct session *s, const struct rec_samples *r);
/* Every watch and probe of this file gone (with the other probes). */
void samples_detach(struct session *s);

#endif
