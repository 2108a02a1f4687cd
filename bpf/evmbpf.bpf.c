// SPDX-License-Identifier: GPL-2.0
/* evmbpf: module calls of a CPython + PyTorch process, seen through slot_tp_call.
 *
 * slot_tp_call(self, args, kwargs) is the C function every call of an instance of a
 * class with a Python __call__ goes through; torch.nn.Module is such a class. The entry
 * probe keeps the calls whose self is a Module, describes args and kwargs as the
 * reference tracer's _describe would, and remembers the stack pointer; the return probe
 * pairs the return with it and describes the output (or notes NULL: an exception).
 * Everything is read here, synchronously, while the target thread is stopped.
 *
 * This file holds the programs only; what they call is in the headers, one concern
 * each, in the order they build on each other: state (configuration, counters, the ring
 * buffer, reads), types, calls, values, attrs, kvcache, describe, markers, frames,
 * orphans, exceptions, cudamem, bound. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "evmbpf.h"
#include "pyoffsets.h"
#include "state.bpf.h"
#include "types.bpf.h"
#include "hold.bpf.h"
#include "calls.bpf.h"
#include "values.bpf.h"
#include "attrs.bpf.h"
#include "kvcache.bpf.h"
#include "describe.bpf.h"
#include "markers.bpf.h"
#include "frames.bpf.h"
#include "orphans.bpf.h"
#include "exceptions.bpf.h"
#include "cudamem.bpf.h"
#include "bound.bpf.h"
#include "samples.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* 3.11-3.13: _PyObject_LookupSpecial(self, attr) */
SEC("uprobe")
int BPF_KPROBE(marker_enter, void *mgr, void *attr)
{
	if (!ps_enter())
		return 0;
	return marker_seen((__u64)mgr, (__u64)attr + pyo.str_ascii_data);
}

/* 3.9/3.10: _PyObject_LookupSpecial(self, _Py_Identifier *) */
SEC("uprobe")
int BPF_KPROBE(marker_enter_ident, void *mgr, void *ident)
{
	if (!ps_enter())
		return 0;
	return marker_seen((__u64)mgr, rd64((__u64)ident + pyo.ident_string));
}

/* 3.14: _PyObject_LookupSpecialMethod(attr, method_and_self), self a _PyStackRef in
 * method_and_self[1] (LOAD_SPECIAL) */
SEC("uprobe")
int BPF_KPROBE(marker_enter_stackref, void *attr, void *method_and_self)
{
	if (!ps_enter())
		return 0;
	__u64 mgr = rd64((__u64)method_and_self + 8) & ~(__u64)pyo.stackref_tag_mask;
	return mgr ? marker_seen(mgr, (__u64)attr + pyo.str_ascii_data) : 0;
}

/* PyEval_EvalCode(code, globals, locals): evalmetry/debug.py's module body (samples) */
SEC("uprobe")
int BPF_KPROBE(host_exec_enter, void *code, void *globals)
{
	if (!ps_enter())
		return 0;
	return host_exec_seen((__u64)code, (__u64)globals, PT_REGS_SP(ctx));
}

SEC("uretprobe")
int BPF_KRETPROBE(host_exec_exit)
{
	if (!ps_enter())
		return 0;
	return host_exec_done(PT_REGS_SP(ctx));
}

/* the hardware watch on note_samples' first code unit (samples) */
SEC("perf_event")
int samples_watch(struct bpf_perf_event_data *ctx)
{
	if (!ps_enter())
		return 0;
	return samples_seen();
}

int call_enter(struct pt_regs *ctx);
int bound_outer(struct pt_regs *ctx);

/* bound.bpf.h: two bound calls entered one right inside the other: call_enter -> bound_outer
 * (the outer's entry) -> call_enter again (the inner's, and the module call's own) */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
	__uint(key_size, sizeof(__u32));
	__array(values, int(void *));
} bound_progs SEC(".maps") = {
	.values = { [0] = (void *)&bound_outer, [1] = (void *)&call_enter },
};

SEC("uprobe")
int BPF_KPROBE(call_enter, void *self, void *args, void *kwargs)
{
	struct proc_state *ps = ps_enter();
	if (!ps)
		return 0;
	readcount_what_now(RC_W_SELF);
	__u64 type = rd64((__u64)self + 8);
	readcount_what_now(0);
	if (!type || classify_type_fast(type) != T_MODULE)
		return 0;
	ABLATE_RETURN(ABL_AFTER_TYPE, 0);
	__u64 sp = PT_REGS_SP(ctx);
	check_orphans();
	/* the thread's open calls (made at its first module call): one look-up a call */
	struct call_stack *open = bpf_task_storage_get(&open_calls, bpf_get_current_task_btf(), 0,
						       BPF_LOCAL_STORAGE_GET_F_CREATE);
	struct bound_thread *bound = NULL;
	readcount_what_now(RC_W_BOUND);
	int found = ps->orphans_pending ? 0 : bound_check(open, sp);
	readcount_what_now(0);
	if (found == 2) {
		bpf_tail_call(ctx, &bound_progs, 0);
		bound_outer_failed();
		found = 0;
	}
	if (found) {
		__u32 tid = (__u32)bpf_get_current_pid_tgid();
		bound = bpf_map_lookup_elem(&bound_threads, &tid);
	}
	if ((phase_rules && enter_call() == 1) || (ps->hold_next && ps->cfg.runtime))
		report_stack(!ps->hold_next);
	cudamem_emit();
	if (ABLATED(ABL_NO_RECORDS)) {
		ps->hold_next = 0;
		open_push(ps, open, sp, (__u64)self);
		return 0;
	}
	struct scratch *s = begin(REC_ENTER, (__u64)self, sp);
	if (!s)
		return 0;
	struct rec_call *r = (void *)s->buf;
	r->flags = 0;
	r->marker = active_marker();
	if (ps->first_call) {
		ps->first_call = 0;
		r->flags = REC_F_HELD; /* the first call: its model is read (held or not) */
		if (ps->hold_next) /* this thread only, in a ptrace stop (hold.bpf.h) */
			s->flags |= REC_F_WANT_HOLD;
		ps->hold_next = 0;
	}
	push(s, W_ONE, (__u64)kwargs, ROOT_DEPTH);
	push(s, W_ONE, (__u64)args, ROOT_DEPTH);
	if (bound) { /* described first: the bound call that encloses this one */
		__u64 bargs = bound->args, bkwargs = bound->kwargs;
		r->flags |= REC_F_BOUND;
		asm volatile("" ::: "memory"); /* nstack re-read: the verifier bounds it again */
		push(s, W_ONE, bkwargs, ROOT_DEPTH);
		asm volatile("" ::: "memory");
		push(s, W_ONE, bargs, ROOT_DEPTH);
	}
	describe_call(s);
	finish(s);
	open_push(ps, open, sp, (__u64)self);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(call_exit, void *ret)
{
	struct proc_state *ps = ps_enter();
	if (!ps)
		return 0;
	/* The return popped the return address: sp is 8 above the entry's. */
	__u64 entry_sp = PT_REGS_SP(ctx) - 8;
	__u64 obj = pop_call(ps, entry_sp);
	if (!obj)
		return 0;
	if (phase_rules)
		leave_call();
	if (ABLATED(ABL_NO_RECORDS))
		return 0;
	struct scratch *s = begin(REC_EXIT, obj, entry_sp);
	if (!s)
		return 0;
	struct rec_call *r = (void *)s->buf;
	r->flags = ret ? 0 : REC_F_EXCEPTION;
	r->marker = active_marker();
	if (ret) {
		push(s, W_ONE, (__u64)ret, 0);
		describe_call(s);
	}
	finish(s);
	return 0;
}

/* The outer of two bound calls entered one right inside the other: its entry, then the
 * module call's probe again (bound_progs) */
SEC("uprobe")
int BPF_KPROBE(bound_outer)
{
	bound_outer_record(PT_REGS_SP(ctx));
	bpf_tail_call(ctx, &bound_progs, 1);
	return 0;
}

/* A hardware watchpoint on a bound Module.__call__'s call site (bound.bpf.h) */
SEC("perf_event")
int bound_trap(struct bpf_perf_event_data *ctx)
{
	if (!ps_enter())
		return 0;
	return bound_hit(ctx->addr);
}

/* PyErr_Display(type, value, tb): an exception reached the top level. Called from
 * sys.excepthook; the objects are alive here and gone by the time user space looks. */
SEC("uprobe")
int BPF_KPROBE(exc_display, void *unused, void *value, void *tb)
{
	struct proc_state *ps = ps_enter();
	if (!ps)
		return 0;
	__u32 zero = 0;
	struct rec_exception *e = bpf_map_lookup_elem(&exc_scratch, &zero);
	if (!e || !value)
		return 0;
	cudamem_emit();
	__u64 id = bpf_get_current_pid_tgid();
	__u64 exc = (__u64)value;
	e->hdr.kind = REC_EXCEPTION;
	e->hdr.size = sizeof(*e);
	e->hdr.pid = id >> 32;
	e->hdr.tid = (__u32)id;
	e->hdr.ts_ns = bpf_ktime_get_ns();
	e->total_frames = 0;
	e->msg_len = -1;
	e->msg_kind = 0;
	e->type_name[0] = 0;
	e->msg[0] = 0;
	__u64 type = rd64(exc + 8);
	bpf_probe_read_user_str(e->type_name, EXC_NAME_MAX, (void *)rd64(type + pyo.tp_name));
	__u64 args = rd64(exc + pyo.exc_args);
	__s64 nargs = (__s64)rd64(args + 16);
	if (nargs == 0) {
		e->msg_len = 0;
	} else if (nargs == 1) {
		__u64 arg = rd64(args + pyo.tuple_items);
		__u64 atype = rd64(arg + 8);
		if (rd64(atype + pyo.tp_flags) & TPF_UNICODE) {
			/* the message as code points of its kind (1, 2, 4 bytes): any text */
			__u32 state = (__u32)rd64(arg + pyo.str_state);
			__u32 kind = (state >> 2) & 7;
			__u64 len = rd64(arg + pyo.str_length);
			__u64 data = arg + (((state >> 6) & 1) ? pyo.str_ascii_data : pyo.str_compact_data);
			if (((state >> 5) & 1) && (kind == 1 || kind == 2 || kind == 4)) {
				__u64 bytes = len * kind;
				if (bytes > EXC_MSG_MAX - 4)
					bytes = (EXC_MSG_MAX - 4) / kind * kind;
				__u32 nb = bytes;
				asm volatile("" : "+r"(nb)); /* keep the mask for the verifier */
				nb &= EXC_MSG_MAX - 1;
				if (!bpf_probe_read_user(e->msg, nb, (void *)data)) {
					e->msg_len = bytes / kind;
					e->msg_kind = kind;
				}
			}
		}
	}
	e->value = tb ? (__u64)tb : rd64(exc + pyo.exc_traceback);
	struct loop_ctx lc = { .p = e };
	bpf_loop(256, tb_step, &lc, 0);
	e->value = exc;
	e->nframes = e->total_frames < EXC_TB_MAX ? e->total_frames : EXC_TB_MAX;
	if (ps_output(ps, e, sizeof(*e), 0))
		__sync_fetch_and_add(&ps->dropped_records, 1);
	return 0;
}

/* c10::cuda::SetDevice, ExchangeDevice, MaybeExchangeDevice, MaybeSetDevice,
 * set_device (DeviceIndex): the
 * thread's current device as torch.cuda.current_device() then says. */
SEC("uprobe")
int BPF_KPROBE(cuda_set_device_probe, long dev)
{
	if (!ps_enter())
		return 0;
	return cuda_set_device(dev);
}

/* c10::cuda::GetDevice(DeviceIndex *), entry and return: the device of a thread that
 * set it before the attach (placed only until those threads are known) */
SEC("uprobe")
int BPF_KPROBE(cuda_get_device_enter, void *out)
{
	if (!ps_enter())
		return 0;
	return cuda_getdev_enter((__u64)out);
}

SEC("uretprobe")
int BPF_KRETPROBE(cuda_get_device_exit, long rc)
{
	if (!ps_enter())
		return 0;
	return cuda_getdev_exit(rc);
}

/* the dynamic loader's _dl_debug_state(): a dlopen's objects mapped (until libc10_cuda.so
 * is) */
SEC("uprobe")
int BPF_KPROBE(cuda_dlopen_probe)
{
	if (!ps_enter())
		return 0;
	return cuda_dlopen_seen();
}

/* the dynamic loader's _dl_debug_state(), until libc10.so is mapped (evmbpf record: the
 * call probes are placed then; REC_TORCH_LOADED, its thread held when it may be) */
SEC("uprobe")
int BPF_KPROBE(torch_dlopen_probe)
{
	struct proc_state *ps = ps_enter();
	if (!ps)
		return 0;
	__u32 seen = ps->torch_ld_seen;
	int found = ld_added(ps->torch_ld_debug, &seen, LD_C10);
	ps->torch_ld_seen = seen;
	if (!found)
		return 0;
	ps->torch_ld_debug = 0; /* once */
	ps->torch_loaded = 1;   /* user space looks here too: the record may be dropped */
	__u32 flags = hold_thread() ? REC_F_PTRACE : 0;
	struct rec_loaded *r = ps_reserve(ps, sizeof(*r));
	if (!r) {
		__sync_fetch_and_add(&ps->dropped_records, 1);
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	r->hdr.kind = REC_TORCH_LOADED;
	r->hdr.size = sizeof(*r);
	r->hdr.pid = id >> 32;
	r->hdr.tid = (__u32)id;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->flags = flags;
	r->pad = 0;
	bpf_ringbuf_submit(r, 0);
	return 0;
}

/* c10::cuda::device_count_ensure_non_zero(): CUDA's lazy init, before the allocator's */
SEC("uprobe")
int BPF_KPROBE(cuda_init_probe)
{
	if (!ps_enter())
		return 0;
	return cuda_init_seen();
}

/* A record of the target's processes and threads (struct rec_task_exit) into its ring. */
static __always_inline void task_record(struct proc_state *ps, __u32 kind, __u32 pid,
					__u32 tid, int code, int group_dead)
{
	struct rec_task_exit *r = ps_reserve(ps, sizeof(*r));
	if (!r) {
		__sync_fetch_and_add(&ps->dropped_records, 1);
		return;
	}
	r->hdr.kind = kind;
	r->hdr.size = sizeof(*r);
	r->hdr.pid = pid;
	r->hdr.tid = tid;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->exit_code = code;
	r->group_dead = group_dead;
	bpf_ringbuf_submit(r, 0);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(task_exit, struct task_struct *p, bool group_dead)
{
	struct proc_state *ps = ps_slot(p->tgid);
	if (!ps)
		return 0;
	if (group_dead) {
		/* kept here too: the record can be dropped when the ring buffer is full */
		ps->group_exit_code = p->exit_code;
		ps->group_exited = 1;
	}
	cuda_task_gone(ps, p->pid);
	/* what is kept by thread id: the id may come again, in another process this object
	 * serves */
	__u32 tid = p->pid;
	bpf_map_delete_elem(&bound_threads, &tid);
	bpf_map_delete_elem(&markers, &tid);
	bpf_map_delete_elem(&call_depth, &tid);
	bpf_map_delete_elem(&host_exec, &tid);
	task_record(ps, REC_TASK_EXIT, p->tgid, p->pid, p->exit_code, group_dead);
	return 0;
}

/* The target forked a process (a DataLoader worker, the fork start method), not a thread
 * nor a vfork child that shares its memory. The child's copy of the code has the target's
 * breakpoints, and a uprobe_multi link for the target's pid runs nothing in it, yet the
 * kernel keeps them there (a perf uprobe takes its own away at the first hit): the child
 * would trap at each __call__ while evmbpf traces its parent. User space has them taken
 * away (uprobes.c, probes_sweep). */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(task_fork, struct task_struct *parent, struct task_struct *child)
{
	if (parent->tgid == child->tgid || parent->mm == child->mm)
		return 0;
	struct proc_state *ps = ps_slot(parent->tgid);
	if (!ps)
		return 0;
	task_record(ps, REC_TASK_FORK, parent->tgid, child->tgid, 0, 0);
	return 0;
}

/* The target exec'd: the Python process evmbpf read is gone, its records end here (the
 * uprobes stay on its pid and would see the new program's calls). */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(task_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	struct proc_state *ps = ps_slot(p->tgid);
	if (!ps)
		return 0;
	task_record(ps, REC_TASK_EXEC, p->tgid, p->pid, 0, 1);
	return 0;
}
