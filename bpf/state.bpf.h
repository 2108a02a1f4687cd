// SPDX-License-Identifier: GPL-2.0
/* state: configuration, counters, ring buffer, reads.
 *
 * The configuration user space fills in before load (CPython and tensor layouts, the
 * target's addresses), the counters it reads back, the ring buffer every record goes
 * through, and the one way anything is read from the target: bpf_probe_read_user of its
 * memory (a fault is counted, never fatal; nothing is ever written there). */
#ifndef EVMBPF_STATE_BPF_H
#define EVMBPF_STATE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "evmbpf.h"
#include "pyoffsets.h"
#include "readcount.bpf.h" /* a profiling build's read counter (nothing otherwise) */

const volatile struct py_offsets pyo = {};
const volatile struct target_config cfg = {};
const volatile struct tensor_layout layouts[TENSOR_LAYOUTS] = {};
const volatile __u32 n_layouts = 0;

/* Counters read by user space. */
__u64 dropped_records = 0;
__u64 dropped_bytes = 0;
__u64 truncated_records = 0;
__u64 read_faults = 0;
/* Stop the target (SIGSTOP) at the next module call, so that user space can read the
 * model's module tree before it can change or be freed; user space sends SIGCONT. */
__u32 hold_next = 0;
/* --phase rules: stop the target (SIGSTOP) when the frames under an outermost call hold
 * code objects user space has not named yet, so that it names them (and, on 3.9/3.10,
 * finds their classes) while they exist: a short job could be gone by the time the
 * collector reads its records. Once per code object; user space sends SIGCONT. */
__u32 hold_codes = 0;
/* The target's exit status (wait(2) encoding), once its last thread has exited. */
__s32 group_exit_code = 0;
__u32 group_exited = 0;

/* Index + 1 of the tensor layout that last matched: tried first. */
__u32 layout_hint = 0;
/* Wake the collector only once this much is waiting in the ring buffer (0: every
 * record). It polls every 100 ms anyway, and a wakeup per record (an irq_work, an IPI,
 * a context switch) costs the target more than describing the call does. */
const volatile __u64 wakeup_bytes = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 24); /* resized from user space */
} events SEC(".maps");

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
		__sync_fetch_and_add(&read_faults, 1);
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
