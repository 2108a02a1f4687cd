/* One record a leaf call, the collector's part. The probes keep a plain enter record
 * back in the process's defer buffer and send it with the exit that follows as one
 * REC_PAIR record, or on its own before any other record of the process
 * (bpf/state.bpf.h). So nothing is kept back while the process makes records; what is
 * kept while it makes none (a thread inside a leaf call that lasts: a hang, a slow op)
 * the collector takes itself once it has waited DEFER_TAKE_MS, and at the end, once the
 * probes are gone. Taking it is a compare-and-swap on the state the probes share
 * (the object's .bss, mapped): the probes then send that call's exit on its own. The
 * records already in the ring were made before it (any made after it would have sent
 * it first) and are read first; a record made while the collector holds it (its
 * clock is later) comes after it. */
#include "defer.h"

#include <bpf/bpf.h>

#include "session_state.h"
#include "util.h"

#define DEFER_TAKE_MS 20

_Static_assert(DEFER_HDR == sizeof(struct rec_hdr), "DEFER_HDR is the REC_PAIR header's size");

int defer_claim(struct session *s, int force)
{
	struct proc_state *ps = s->ps;
	if (!ps || !s->skel || __atomic_load_n(&ps->defer_state, __ATOMIC_ACQUIRE) != DEFER_READY)
		return 0;
	if (!force && mono_ns() - __atomic_load_n(&ps->defer_ts, __ATOMIC_RELAXED) <
			      DEFER_TAKE_MS * 1000000ull)
		return 0;
	uint64_t want = DEFER_READY;
	if (!__atomic_compare_exchange_n(&ps->defer_state, &want, DEFER_BUSY, 0, __ATOMIC_ACQ_REL,
					 __ATOMIC_ACQUIRE))
		return 0; /* sent meanwhile */
	static struct defer_buf d;
	uint32_t len = ps->defer_len;
	if (!bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.defer_bufs), &s->slot, &d) &&
	    len >= sizeof(struct rec_call) && len <= DEFER_ENTER_MAX) {
		s->taken = d.buf + DEFER_HDR;
		s->taken_len = len;
		s->taken_ts = ((const struct rec_hdr *)s->taken)->ts_ns;
		s->leaf_taken++;
	}
	return 1;
}

void defer_release(struct session *s)
{
	__atomic_store_n(&s->ps->defer_state, DEFER_NONE, __ATOMIC_RELEASE);
}
