// SPDX-License-Identifier: GPL-2.0
/* tensor_bytes: --numeric's small tensors read at the probe.
 *
 * A CPU tensor whose index space spans at most TENSOR_BYTES_MAX bytes of its storage
 * is read here, by the probe, while its thread is in it: the bytes go into the ring
 * buffer as a REC_TENSOR_BYTES record just before the call record that describes the
 * tensor, and that call needs no hold (no stop, no context switch) for it. Read only
 * after checking the extent against the storage's size (offset + span, non-negative
 * strides, from the TensorImpl and StorageImpl fields just read); a read that fails (a
 * page not present) leaves the tensor to the hold. The bytes are staged in a map entry
 * of this CPU (probes do not migrate), whose count user space sets to the CPUs'. */
#ifndef EVMBPF_TENSOR_BYTES_BPF_H
#define EVMBPF_TENSOR_BYTES_BPF_H

#include "state.bpf.h"

struct tensor_bytes_buf {
	struct rec_tensor_bytes hdr;
	__u8 data[TENSOR_BYTES_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* user space: one per possible CPU */
	__type(key, __u32);
	__type(value, struct tensor_bytes_buf);
} tensor_bytes_map SEC(".maps");

/* the most bytes read at the probe (0: every tensor is read from a held thread) */
const volatile __u32 tensor_bytes_max = 0;
/* --stop-on-nonfinite: an exit record still holds its thread (the target is stopped
 * there, before its caller runs on, when the output holds a NaN or an Inf) */
const volatile __u32 tensor_bytes_hold_exits = 0;
/* per process: struct proc_state's tensor_bytes_sent */

static __always_inline __u32 dtype_itemsize(__u8 dtype)
{
	switch (dtype) {
	case 0: case 1: case 11: return 1;       /* uint8, int8, bool */
	case 2: case 5: case 15: case 27: return 2; /* int16, float16, bfloat16, uint16 */
	case 3: case 6: case 28: return 4;       /* int32, float32, uint32 */
	case 4: case 7: case 29: return 8;       /* int64, float64, uint64 */
	}
	return 0;
}

/* 1 when the tensor's bytes are in the ring buffer as record `seq` of the call record
 * stamped rec_ts. */
static __always_inline int tensor_bytes(const struct dnode_tensor *t,
					const struct dnode_tensor_data *d, __u32 ndim,
					__u64 rec_ts, __u32 seq)
{
	__u32 isz = dtype_itemsize(t->dtype);
	if (!tensor_bytes_max || !isz || t->numel <= 0 || d->offset < 0 || !d->data)
		return 0;
	__u64 span = 1;
	for (int k = 0; k < TENSOR_MAX_DIMS; k++) {
		if (k >= ndim)
			break;
		__s64 sz = t->sizes[k], st = d->strides[k];
		if (sz <= 0 || st < 0 || sz > TENSOR_BYTES_MAX || st > TENSOR_BYTES_MAX)
			return 0;
		span += (__u64)(sz - 1) * (__u64)st;
		if (span > TENSOR_BYTES_MAX)
			return 0;
	}
	__u64 len = span * isz;
	if (len > tensor_bytes_max || len > TENSOR_BYTES_MAX || (__u64)d->offset > d->nbytes ||
	    ((__u64)d->offset + span) * isz > d->nbytes)
		return 0;
	__u32 cpu = bpf_get_smp_processor_id();
	struct tensor_bytes_buf *b = bpf_map_lookup_elem(&tensor_bytes_map, &cpu);
	if (!b)
		return 0;
	__u32 n = (__u32)len;
	if (n == 0 || n > TENSOR_BYTES_MAX)
		return 0;
	__u64 addr = d->data + (__u64)d->offset * isz;
	if (bpf_probe_read_user(b->data, n, (void *)addr))
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	struct proc_state *ps = ps_cur();
	b->hdr.hdr.kind = REC_TENSOR_BYTES;
	b->hdr.hdr.size = sizeof(b->hdr) + n;
	b->hdr.hdr.pid = id >> 32;
	b->hdr.hdr.tid = (__u32)id;
	b->hdr.hdr.ts_ns = rec_ts;
	b->hdr.addr = addr;
	b->hdr.seq = seq;
	b->hdr.len = n;
	if (ps_output(ps, b, sizeof(b->hdr) + n, BPF_RB_NO_WAKEUP))
		return 0; /* the ring is full: the hold reads it instead */
	__sync_fetch_and_add(&ps->tensor_bytes_sent, 1);
	return 1;
}

#endif /* EVMBPF_TENSOR_BYTES_BPF_H */
