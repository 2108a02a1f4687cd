// SPDX-License-Identifier: GPL-2.0
/* orphans: orphan exits.
 *
 * Modules that were running when evmbpf attached (their entry was never seen): user
 * space lists their frames; at each later outermost call on the thread, the frame chain
 * is walked again and the watched frames that are gone are reported as orphan exits. */
#ifndef EVMBPF_ORPHANS_BPF_H
#define EVMBPF_ORPHANS_BPF_H

#include "calls.bpf.h"
#include "frames.bpf.h"
#include "markers.bpf.h"

/* ---------------------------------------------------------------- orphans */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct orphan_list);
} orphans SEC(".maps");

/* Threads with modules that were running at the attach and have not returned yet. */
/* per process: struct proc_state's orphans_pending */

#define ORPHAN_WALK_MAX 64

struct orphan_walk {
	struct orphan_list *o;
	__u64 frame;
	__u32 n;
	__u32 live; /* bit i: orphan i's frame is still on the stack */
};

/* bpf_loop step: one frame of the thread's stack against every watched frame. */
static long orphan_step(__u64 index, void *ctx)
{
	struct orphan_walk *w = ctx;
	if (!w->frame)
		return 1;
	for (int i = 0; i < ORPHANS_MAX; i++) {
		if (i >= w->n)
			break;
		if (w->o->frame[i] == w->frame &&
		    (rd64(w->frame + pyo.iframe_localsplus) & ~3ULL) == w->o->first[i])
			w->live |= 1u << i;
	}
	w->frame = rd64(w->frame + pyo.frame_back);
	return 0;
}

/* Which of this thread's pre-attach modules have returned since its last module call:
 * their frames are gone from its Python stack (or hold another call). Reported
 * innermost first. They enclose every call seen since, so none can have returned while
 * one of those is open: only then is the stack walked. */
static __always_inline void check_orphans_walk(void)
{
	struct proc_state *ps = ps_cur();
	if (!ps->orphans_pending || !ps->cfg.runtime)
		return;
	struct call_stack *cs = bpf_task_storage_get(&open_calls, bpf_get_current_task_btf(), 0, 0);
	if (cs && cs->n)
		return;
	__u64 tstate = current_tstate();
	__u64 key = PS_KEY(ps, tstate); /* user space tags it too */
	struct orphan_list *o = tstate ? bpf_map_lookup_elem(&orphans, &key) : NULL;
	if (!o)
		return;
	struct orphan_walk w = { .o = o, .n = o->n < ORPHANS_MAX ? o->n : ORPHANS_MAX,
				 .frame = tstate_frame(tstate) };
	bpf_loop(ORPHAN_WALK_MAX, orphan_step, &w, 0);
	__u32 n = w.n, live = w.live;
	if (live == (1u << n) - 1)
		return;
	/* the kept ones counted in o->n, read back: to the verifier any count, so the loop
	 * is checked once, not once for each number kept so far */
	o->n = 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u64 marker = active_marker();
	for (int i = 0; i < ORPHANS_MAX; i++) {
		if (i >= n)
			break;
		if (live & (1u << i)) {
			__u32 keep = *(volatile __u32 *)&o->n & (ORPHANS_MAX - 1);
			o->frame[keep] = o->frame[i];
			o->first[keep] = o->first[i];
			o->self[keep] = o->self[i];
			o->n = keep + 1;
			continue;
		}
		struct rec_orphan *r = ps_reserve(ps, sizeof(*r));
		if (!r) {
			__sync_fetch_and_add(&ps->dropped_records, 1);
			continue;
		}
		r->hdr.kind = REC_ORPHAN;
		r->hdr.size = sizeof(*r);
		r->hdr.pid = id >> 32;
		r->hdr.tid = (__u32)id;
		r->hdr.ts_ns = bpf_ktime_get_ns();
		r->self = o->self[i];
		r->marker = marker;
		bpf_ringbuf_submit(r, 0);
	}
	if (!*(volatile __u32 *)&o->n) {
		bpf_map_delete_elem(&orphans, &key);
		__sync_fetch_and_add(&ps->orphans_pending, -1);
	}
}

/* Global (split.bpf.h): verified once, not in each of call_enter's paths. */
__noinline int check_orphans_list(void)
{
	check_orphans_walk();
	return 0;
}

/* At each module call: the walk's own test first, inline (markers.bpf.h: active_marker) */
static __always_inline void check_orphans(void)
{
	struct proc_state *ps = ps_cur();
	if (ps->orphans_pending && ps->cfg.runtime)
		check_orphans_list();
}

#endif /* EVMBPF_ORPHANS_BPF_H */
