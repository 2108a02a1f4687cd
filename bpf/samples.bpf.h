// SPDX-License-Identifier: GPL-2.0
/* samples: the host's note_samples(contexts), seen from outside.
 *
 * note_samples is a plain Python function: no C function is entered for its call on
 * 3.11+ (the interpreter pushes its frame inline), so it is watched with a hardware
 * breakpoint on its first code unit (user/collector/session/samples_watch.c arms one per thread):
 * the interpreter fetches it once per call, where the frame is the thread's current
 * one and its first local is `contexts`, alive and unchanged. The record holds the
 * thread (hold.bpf.h) while user space reads the contexts, and wakes the collector at once.
 * To find the function before its first call, the module body of evalmetry/debug.py is
 * caught as PyEval_EvalCode runs it (the import's exec): on its return the globals hold
 * note_samples. Nothing is read or stopped for any other module body, and nothing here
 * runs at module calls. */
#ifndef EVMBPF_SAMPLES_BPF_H
#define EVMBPF_SAMPLES_BPF_H

#include "state.bpf.h"
#include "hold.bpf.h"
#include "markers.bpf.h"
#include "frames.bpf.h"

/* note_samples' code object, once user space has armed the watch on it */
/* per process: struct proc_state's samples_code */
/* user space allows holding the thread (hold.bpf.h) while it reads (not in a foreground
 * terminal's process group: job control would see it) */
/* per process: struct proc_state's samples_hold */
/* per process: struct proc_state's samples_spurious */

/* the module body's globals, and the stack pointer that pairs its return (the imports
 * it runs return first) */
struct host_exec_call {
	__u64 globals;
	__u64 sp;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct host_exec_call);
} host_exec SEC(".maps");

static __always_inline int samples_output(__u32 kind, __u64 obj, __u64 code)
{
	struct proc_state *ps = ps_cur();
	struct rec_samples *r = ps_reserve(ps, sizeof(*r));
	if (!r) {
		__sync_fetch_and_add(&ps->dropped_records, 1);
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	r->hdr.kind = kind;
	r->hdr.size = sizeof(*r);
	r->hdr.pid = id >> 32;
	r->hdr.tid = (__u32)id;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->obj = obj;
	r->code = code;
	r->pad = 0;
	r->flags = 0;
	if (ps->numeric_hold || ps->samples_hold)
		r->flags = hold_thread() ? REC_F_HELD | REC_F_PTRACE : 0;
	bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
	return 0;
}

/* PyEval_EvalCode(code, globals, locals): a module body (or exec/eval) starts. */
static __always_inline int host_exec_seen(__u64 code, __u64 globals, __u64 sp)
{
	struct proc_state *ps = ps_cur();
	if ((bpf_get_current_pid_tgid() >> 32) != ps->tgid || !code || !globals)
		return 0;
	if (!code_in_host(code))
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct host_exec_call c = { .globals = globals, .sp = sp };
	bpf_map_update_elem(&host_exec, &tid, &c, BPF_ANY);
	return 0;
}

static __always_inline int host_exec_done(__u64 sp)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct host_exec_call *c = bpf_map_lookup_elem(&host_exec, &tid);
	if (!c || c->sp != sp - 8) /* the return popped the return address */
		return 0;
	__u64 g = c->globals;
	bpf_map_delete_elem(&host_exec, &tid);
	return samples_output(REC_SAMPLES_HOST, g, 0);
}

/* The watch fired: the interpreter fetched note_samples' first code unit. Other reads
 * of it (the specializer's, on a first call) find another frame current: skipped. */
static __always_inline int samples_seen(void)
{
	struct proc_state *ps = ps_cur();
	if ((bpf_get_current_pid_tgid() >> 32) != ps->tgid || !ps->samples_code || !ps->cfg.runtime)
		return 0;
	__u64 frame = tstate_frame(current_tstate());
	__u16 code_at = pyo.version <= 310 ? pyo.frameobj_code : pyo.iframe_code;
	__u64 code = frame ? rd64(frame + code_at) & ~3ULL : 0;
	if (code != ps->samples_code) {
		__sync_fetch_and_add(&ps->samples_spurious, 1);
		return 0;
	}
	__u64 contexts = rd64(frame + pyo.iframe_localsplus) & ~3ULL;
	return samples_output(REC_SAMPLES, contexts, code);
}

#endif /* EVMBPF_SAMPLES_BPF_H */
