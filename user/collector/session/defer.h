/* One record a leaf call: the collector's part (defer.c). */
#ifndef EVMBPF_DEFER_H
#define EVMBPF_DEFER_H

#include <stddef.h>

struct session;

/* The enter record the probes kept back (bpf/state.bpf.h, defer_flush), into the trace
 * when it has been kept over DEFER_TAKE_MS (a thread inside a long leaf call: a hang),
 * or at once with force (the probes are gone; a flush asked for the trace now). */
void defer_take(struct session *s, int force);

/* A REC_PAIR record: its enter, then its exit, each as a record of its own. */
void defer_pair_record(struct session *s, const void *data, size_t size);

#endif
