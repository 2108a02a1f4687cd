// SPDX-License-Identifier: GPL-2.0
/* calls: open module calls.
 *
 * The module calls open on each thread, so that a return is paired with its entry:
 * keyed by the stack pointer at slot_tp_call's entry (the uretprobe sees it 8 higher).
 * Nothing is read from the target here; the registers of the probe say it all. */
#ifndef EVMBPF_CALLS_BPF_H
#define EVMBPF_CALLS_BPF_H

#include "state.bpf.h"

struct pending_key {
	__u32 tid;
	__u32 pad;
	__u64 sp;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct pending_key);
	__type(value, __u64);
} pending SEC(".maps");

/* The module calls open on each thread, innermost last: the return probe pairs with its
 * entry by stack pointer here, one task-local lookup a probe (the `pending` hash, an
 * update and a delete per call, is only the overflow for deeper nesting). */
#define CALLS_MAX 64

/* bound.bpf.h: the frames a walk passed between known and this module's Module.__call__
 * frames, known's first (its decorators' wrappers: 2 or 3 of them), when they are more
 * than one */
#define KNOWN_CHAIN 3

struct open_call {
	__u64 sp;
	__u64 self;
	__u64 known;    /* bound.bpf.h: a frame whose callees call this module's children directly */
	__u64 known_sp; /* and the stack pointer of such a child's call (3.9-3.12) */
	__u64 tstate;   /* the thread state the walk that kept known read (when known is set) */
	__u64 nchain;   /* 0: known is right above this module's frames; else the frames */
	__u64 kcode[KNOWN_CHAIN]; /* from known down: each one's code object */
	__u64 kback[KNOWN_CHAIN]; /* and the frame below it (the last: this module's) */
};

struct call_stack {
	__u32 n;
	__u32 pad;
	struct open_call c[CALLS_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct call_stack);
} open_calls SEC(".maps");

/* pending_used (struct proc_state): the overflow hash was used, returns not on the
 * stacks look there. */

/* Module calls open on each thread (only kept when rules are given). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} call_depth SEC(".maps");

/* --phase rules: count module calls open on this thread; 1 for an outermost call. */
static __always_inline __u32 enter_call(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), one = 1;
	__u32 *depth = bpf_map_lookup_elem(&call_depth, &tid);
	if (!depth) {
		bpf_map_update_elem(&call_depth, &tid, &one, BPF_ANY);
		return 1;
	}
	__sync_fetch_and_add(depth, 1);
	return *depth;
}

static __always_inline void leave_call(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u32 *depth = bpf_map_lookup_elem(&call_depth, &tid);
	if (depth && *depth)
		__sync_fetch_and_add(depth, -1);
}

/* A module call entered: kept open on the thread (cs: its stack, NULL when it has none)
 * until its return pairs with it by stack pointer; past CALLS_MAX deep, in the pending
 * hash. */
static __always_inline void open_push(struct proc_state *ps, struct call_stack *cs, __u64 sp,
				      __u64 self)
{
	if (cs && cs->n < CALLS_MAX) {
		cs->c[cs->n & (CALLS_MAX - 1)].sp = sp;
		cs->c[cs->n & (CALLS_MAX - 1)].self = self;
		cs->c[cs->n & (CALLS_MAX - 1)].known = 0;
		cs->c[cs->n & (CALLS_MAX - 1)].known_sp = 0;
		cs->c[cs->n & (CALLS_MAX - 1)].tstate = 0;
		cs->c[cs->n & (CALLS_MAX - 1)].nchain = 0;
		cs->n++;
		return;
	}
	struct pending_key key = { .tid = (__u32)bpf_get_current_pid_tgid(), .sp = sp };
	if (!ps->pending_used)
		ps->pending_used = 1;
	bpf_map_update_elem(&pending, &key, &self, BPF_ANY);
}

/* The entry of the call returning with this stack pointer (its entry's), or 0: not a
 * module call. The stack grows down: open calls deeper than this one (never seen to
 * return, e.g. entered before the return probe was attached) are dropped, a few a
 * return; an outer call's on top means this call is not one of ours. */
static __always_inline __u64 pop_call(struct proc_state *ps, __u64 sp)
{
	struct call_stack *cs = bpf_task_storage_get(&open_calls, bpf_get_current_task_btf(), 0, 0);
	if (cs) {
		for (int k = 0; k < 4; k++) {
			__u32 n = cs->n;
			if (!n || n > CALLS_MAX)
				break;
			__u32 i = (n - 1) & (CALLS_MAX - 1);
			__u64 at = cs->c[i].sp;
			if (at > sp)
				break;
			cs->n = i;
			if (at == sp)
				return cs->c[i].self;
		}
	}
	if (!ps->pending_used)
		return 0;
	struct pending_key key = { .tid = (__u32)bpf_get_current_pid_tgid(), .sp = sp };
	__u64 *self = bpf_map_lookup_elem(&pending, &key);
	if (!self)
		return 0;
	__u64 obj = *self;
	bpf_map_delete_elem(&pending, &key);
	return obj;
}

#endif /* EVMBPF_CALLS_BPF_H */
