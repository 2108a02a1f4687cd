/* One record a leaf call: the collector's part (defer.c). */
#ifndef EVMBPF_DEFER_H
#define EVMBPF_DEFER_H

struct session;

/* Claim the enter record the probes kept back (bpf/state.bpf.h, defer_flush) when it has
 * been kept over DEFER_TAKE_MS (a thread inside a long leaf call: a hang), or at once
 * with force (the probes are gone; a flush asked for the trace now): 1 when claimed,
 * s->taken then the record (NULL: unreadable), until defer_release. 0: none to take. */
int defer_claim(struct session *s, int force);
/* The probes may keep an enter back again. */
void defer_release(struct session *s);

#endif
