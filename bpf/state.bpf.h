// SPDX-License-Identifier: GPL-2.0
/* state: configuration, per-process state, ring buffers, reads.
 *
 * What user space fills in before load and every process of this object shares (the
 * CPython and tensor layouts, the options), each traced process's own slot (its
 * addresses, counters, holds, what the probes learnt: include/procslot.h) and its own
 * ring buffer, both found by its tgid, and the one way anything is read from the target:
 * bpf_probe_read_user of its memory (a fault is counted, never fatal; nothing is ever
 * written there). */
#ifndef EVMBPF_STATE_BPF_H
#define EVMBPF_STATE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "evmbpf.h"
#include "pyoffsets.h"
#include "procslot.h"
#include "readcount.bpf.h" /* a profiling build's read counter (nothing otherwise) */
#include "ablate.bpf.h"    /* a profiling build's stages left out (nothing otherwise) */

/* The same for every process this object serves: one Python build and torch layout,
 * one session's options. The verifier folds them. */
const volatile struct py_offsets pyo = {};
const volatile struct tensor_layout layouts[TENSOR_LAYOUTS] = {};
const volatile __u32 n_layouts = 0;
/* --phase rules given: report the frames under outermost calls */
const volatile __u32 phase_rules = 0;
/* Wake the collector only once a process has written this much to its ring buffer since
 * its last wakeup (0: every record; values.bpf.h, rb_flags). It polls every 100 ms anyway, and a wakeup per record (an irq_work, an IPI,
 * a context switch) costs the target more than describing the call does. */
const volatile __u64 wakeup_bytes = 0;

/* Everything else is per process (include/procslot.h): its configuration (the type
 * objects and _PyRuntime at its own addresses), its counters, what its probes learnt.
 * A process's slot is found by its tgid; a tgid without one (a process whose slot is
 * not filled yet, or was freed) is not traced: every program returns at once. Slot 0 is
 * no process's: what ps_cur() gives when none is found (written, never read). The states
 * are a global array (user space maps it with the object's .bss): reached without a map
 * lookup, never NULL, no key on the stack (call_enter's description chain is at the
 * 512-byte stack limit). */
struct proc_state procs[PROC_SLOTS] = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PROC_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} proc_slot SEC(".maps");

/* Set by user space where the kernel preempts its own code (preempt=full or lazy,
 * PREEMPT_RT; user/collector/machine/preempt.c): a uprobe program may then be preempted,
 * and another task's program run on its CPU meanwhile, over the per-CPU buffers and the
 * CPU's slot the first one was using. Each program's top (ps_enter, ps_slot) writes the
 * task's pid_tgid into the CPU's `cur`; before a record goes to a ring, the CPU's entry
 * must still hold the current task's: else another task's program ran on the CPU since
 * this one began, and the record, built in a buffer the other may have written, is
 * dropped (counted here and as any drop, in the process's state). Where it is 0 the
 * verifier removes the check. */
const volatile __u32 preempt_guard = 0;
__u64 preempted_records = 0;

/* The slot of the program running on a CPU, set at its top (ps_enter) and read below
 * it (ps_cur): nothing else of ours runs on that CPU until the program returns, as the
 * per-CPU scratch maps already rely on. None nests in another (uprobes and breakpoints
 * fire in user mode, a breakpoint's program runs in its exception), and uprobe programs
 * run with migration off: on a kernel that does not preempt kernel code (preempt=none or
 * voluntary) that keeps others off the CPU; under preempt=full or lazy it does not, and
 * preempt_guard above drops the records such a run may have mixed (docs/design.md).
 * Indexed by CPU, masked. */
#define CUR_CPUS 1024
struct cpu_cur cur[CUR_CPUS] = {}; /* include/procslot.h */

/* Each process's own ring buffer (user space makes it and puts it at the process's
 * slot): one busy process cannot make another's records drop. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, PROC_SLOTS);
	__type(key, __u32);
	__array(values, struct {
		__uint(type, BPF_MAP_TYPE_RINGBUF);
		__uint(max_entries, 4096); /* a template: each is made from user space */
	});
} rings SEC(".maps");

/* The slot of tgid (0: none), remembered as this CPU's current one. */
static __always_inline __u32 ps_find(__u32 tgid)
{
	__u32 cpu = bpf_get_smp_processor_id() & (CUR_CPUS - 1);
	cur[cpu].tgid = tgid;
	__u32 *slot = bpf_map_lookup_elem(&proc_slot, &cur[cpu].tgid); /* the key: no stack */
	__u32 idx = slot ? *slot & (PROC_SLOTS - 1) : 0;
	if (procs[idx].tgid != tgid)
		idx = 0;
	cur[cpu].slot = idx;
	return idx;
}

/* The state of tgid, NULL when it has none. Most often the CPU's last program was the
 * same process's: its slot still holds that tgid, and no hash lookup is made. A freed
 * slot is zeroed only after its tgid has left proc_slot, and a slot is filled before its
 * tgid enters it, so a slot whose tgid matches is the process's. */
static __always_inline struct proc_state *ps_slot(__u32 tgid)
{
	__u32 cpu = bpf_get_smp_processor_id() & (CUR_CPUS - 1);
	if (preempt_guard) /* the tracepoints' own top (ps_enter writes it first too) */
		cur[cpu].id = bpf_get_current_pid_tgid();
	__u32 idx = cur[cpu].slot & (PROC_SLOTS - 1);
	if (!idx || procs[idx].tgid != tgid)
		idx = ps_find(tgid);
	return idx ? &procs[idx & (PROC_SLOTS - 1)] : NULL;
}

/* At the top of each program: the current process's state, NULL when it has none. */
static __always_inline struct proc_state *ps_enter(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	cur[bpf_get_smp_processor_id() & (CUR_CPUS - 1)].id = id;
	return ps_slot(id >> 32);
}

/* Below the top: the current task's pid_tgid, as ps_enter read it (a helper's call and
 * return cost 10-20 ns on some guests: docs/design.md, *Calls this guest charges for*) */
static __always_inline __u64 cur_pid_tgid(void)
{
	return cur[bpf_get_smp_processor_id() & (CUR_CPUS - 1)].id;
}

/* Below the top: the state ps_enter found (never NULL; slot 0 when none). No branch:
 * it is inlined in every read's fault path. */
static __always_inline struct proc_state *ps_cur(void)
{
	__u32 cpu = bpf_get_smp_processor_id() & (CUR_CPUS - 1);
	return &procs[cur[cpu].slot & (PROC_SLOTS - 1)];
}

/* The process's ring buffer (NULL: none: the record is dropped and counted) */
static __always_inline void *ps_ring(struct proc_state *ps)
{
	if (preempt_guard && cur_pid_tgid() != bpf_get_current_pid_tgid()) {
		__sync_fetch_and_add(&preempted_records, 1);
		return NULL;
	}
	return bpf_map_lookup_elem(&rings, &ps->slot); /* the key: no stack */
}

/* Whether a module record wakes the collector. A thread waits for us, or a read must
 * come soon though nothing waits (the first call's model, where the process could not be
 * held: it runs on meanwhile): at once. Otherwise once wakeup_bytes have been written
 * since the last wakeup, counted in the process's state rather than asked of the ring
 * (bpf_ringbuf_query cost as much as the record's output): a collector asleep in
 * epoll_wait has read the ring empty before it slept (ring_buffer__consume reads until
 * no record is left), so what waits for it is at most what was written since the last
 * wakeup; it reads every 100 ms anyway, and an epoll_wait begun with records waiting
 * returns at once. The process's threads race on the count: an add lost delays a
 * wakeup by a record. */
static __always_inline __u64 rb_flags(struct proc_state *ps, __u32 rec_flags, __u32 size)
{
	if (rec_flags & (REC_F_PTRACE | REC_F_HELD)) {
		ps->ring_unwoken = 0;
		return BPF_RB_FORCE_WAKEUP;
	}
	if (!wakeup_bytes)
		return 0;
	__u64 n = ps->ring_unwoken + size;
	if (n < wakeup_bytes) {
		ps->ring_unwoken = n;
		return BPF_RB_NO_WAKEUP;
	}
	ps->ring_unwoken = 0;
	return BPF_RB_FORCE_WAKEUP;
}

/* One record a leaf call. A module call's enter record is kept back (deferred) in its
 * process's defer buffer instead of going to the ring; when the same thread's return
 * from that call comes next, the enter and the exit go out as one REC_PAIR record (one
 * reserve and commit, one wakeup count, instead of two). Any other record of the
 * process first sends the kept enter on its own (defer_flush, at the top of ps_output
 * and ps_reserve), so the ring's order is the order the records were made in: a call
 * with a child, a record of another thread, a thread's exit (a thread killed inside a
 * leaf: task_exit's record flushes its enter first), an exec. The collector takes an
 * enter kept longer than it waits (a thread hung inside a leaf) and the one left when
 * the probes are gone (session/defer.c). Module calls run under the GIL, so one enter
 * is kept at a time in a process; defer_state's compare-and-swap settles the rest (a
 * thread's exit on another CPU, the collector):
 *   DEFER_NONE -> DEFER_BUSY (being written) -> DEFER_READY -> DEFER_BUSY (being sent,
 *   or paired, or taken by the collector) -> DEFER_NONE. */
const volatile __u32 defer_calls = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PROC_SLOTS);
	__type(key, __u32);
	__type(value, struct defer_buf);
} defer_bufs SEC(".maps");

/* The kept enter on its own, when there is one. */
static __noinline int defer_flush(struct proc_state *ps)
{
	if (!ps || ps->defer_state != DEFER_READY)
		return 0;
	if (__sync_val_compare_and_swap(&ps->defer_state, DEFER_READY, DEFER_BUSY) != DEFER_READY)
		return 0;
	struct defer_buf *d = bpf_map_lookup_elem(&defer_bufs, &ps->slot);
	void *rb = ps_ring(ps);
	__u64 len = ps->defer_len;
	if (d && rb && len >= sizeof(struct rec_hdr) && len <= DEFER_ENTER_MAX) {
		if (bpf_ringbuf_output(rb, &d->buf[DEFER_HDR], len, rb_flags(ps, 0, len)))
			__sync_fetch_and_add(&ps->dropped_records, 1);
	}
	__sync_lock_test_and_set(&ps->defer_state, DEFER_NONE);
	return 0;
}

static __always_inline long ps_output(struct proc_state *ps, void *data, __u64 size, __u64 flags)
{
	if (defer_calls)
		defer_flush(ps);
	void *rb = ps_ring(ps);
	return rb ? bpf_ringbuf_output(rb, data, size, flags) : -1;
}

#define ps_reserve(ps, size) ({ if (defer_calls) defer_flush(ps); void *rb_ = ps_ring(ps); \
				rb_ ? bpf_ringbuf_reserve(rb_, size, 0) : NULL; })

/* A key of the maps keyed by the target's addresses: the process's tag above them */
#define PS_KEY(ps, addr) ((__u64)(addr) | (ps)->tag)

/* Py_TPFLAGS_*_SUBCLASS */
#define TPF_LONG (1UL << 24)
#define TPF_LIST (1UL << 25)
#define TPF_TUPLE (1UL << 26)
#define TPF_UNICODE (1UL << 28)
#define TPF_DICT (1UL << 29)

static __always_inline __u64 rd64(__u64 addr)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		__sync_fetch_and_add(&ps_cur()->read_faults, 1);
	return v;
}

static __always_inline int name_is(__u64 name_ptr, const char *want, int n)
{
	char buf[32] = {};
	if (n > (int)sizeof(buf))
		return 0;
	if (bpf_probe_read_user(buf, n & 31, (void *)name_ptr))
		return 0;
	for (int i = 0; i < n && i < (int)sizeof(buf); i++)
		if (buf[i] != want[i])
			return 0;
	return 1;
}

struct loop_ctx {
	void *p;
};

#endif /* EVMBPF_STATE_BPF_H */
