// SPDX-License-Identifier: GPL-2.0
/* frames: Python frames.
 *
 * The Python frames of the probed thread: its PyThreadState (the runtime's current one
 * on 3.9-3.11, the GIL's holder on 3.12+) and the frame chain's code objects, reported
 * at an outermost module call for --phase rules and to find the model after an attach
 * in the middle of a forward. */
#ifndef EVMBPF_FRAMES_BPF_H
#define EVMBPF_FRAMES_BPF_H

#include "state.bpf.h"
#include "hold.bpf.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, __u8);
} known_codes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct rec_stack);
} stack_scratch SEC(".maps");

/* The running thread's PyThreadState. 3.9-3.11 keep the current one in _PyRuntime;
 * 3.12+ in a thread-local, so there it is the GIL's last holder: the probed thread is
 * running Python code, so it holds the GIL. */
static __always_inline __u64 current_tstate(void)
{
	struct proc_state *ps = ps_cur();
	if (pyo.rt_tstate_current)
		return rd64(ps->cfg.runtime + pyo.rt_tstate_current);
	__u64 interp = rd64(ps->cfg.runtime + pyo.rt_interp_main);
	__u64 gil = interp ? rd64(interp + pyo.interp_gil) : 0;
	return gil ? rd64(gil + pyo.gil_last_holder) : 0;
}

/* A thread's innermost Python frame. */
static __always_inline __u64 tstate_frame(__u64 tstate)
{
	if (!tstate)
		return 0;
	__u64 frame = rd64(tstate + pyo.tstate_frame);
	if (pyo.tstate_cframe && frame)
		frame = rd64(frame + pyo.cframe_frame);
	return frame;
}

/* The code objects (and first locals) of the Python frames under this call. May hold
 * the target (hold_codes) unless the caller holds it anyway. */
static __always_inline void report_stack_walk(int may_hold)
{
	struct proc_state *ps = ps_cur();
	__u32 zero = 0;
	struct rec_stack *r = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!r || !ps->cfg.runtime)
		return;
	__u64 frame = tstate_frame(current_tstate());
	/* 3.9/3.10 frames are PyFrameObjects, 3.11+ _PyInterpreterFrames */
	__u16 code_at = pyo.version <= 310 ? pyo.frameobj_code : pyo.iframe_code;
	__u32 n = 0;
	for (int i = 0; i < STACK_FRAMES_MAX; i++) {
		if (!frame)
			break;
		r->code[i] = rd64(frame + code_at) & ~3ULL;
		r->first[i] = rd64(frame + pyo.iframe_localsplus) & ~3ULL;
		frame = rd64(frame + pyo.frame_back);
		n++;
	}
	/* the count read back from the record: to the verifier any count, so the loop below
	 * is checked once, not once for each length the walk above can end with */
	r->n = n;
	r->flags = 0;
	if (ps->hold_codes && may_hold) {
		__u8 one = 1;
		for (int i = 0; i < STACK_FRAMES_MAX; i++) {
			if (i >= *(volatile __u32 *)&r->n)
				break;
			__u64 code = r->code[i];
			__u64 key = PS_KEY(ps, code);
			if (!code || bpf_map_lookup_elem(&known_codes, &key))
				continue;
			bpf_map_update_elem(&known_codes, &key, &one, BPF_ANY);
			r->flags = REC_F_HELD;
		}
		if (r->flags) /* this thread, in a ptrace stop (hold.bpf.h), or not held */
			r->flags = hold_thread() ? REC_F_HELD | REC_F_PTRACE : 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	r->hdr.kind = REC_STACK;
	r->hdr.size = sizeof(*r);
	r->hdr.pid = id >> 32;
	r->hdr.tid = (__u32)id;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	if (ps_output(ps, r, sizeof(*r), 0))
		__sync_fetch_and_add(&ps->dropped_records, 1);
}

/* Global (split.bpf.h): verified once, not in each of call_enter's paths. */
__noinline int report_stack(int may_hold)
{
	report_stack_walk(may_hold);
	return 0;
}

#endif /* EVMBPF_FRAMES_BPF_H */
