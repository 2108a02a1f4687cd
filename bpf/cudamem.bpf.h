// SPDX-License-Identifier: GPL-2.0
/* cudamem: the CUDA caching allocator's counters, `mem` of enter and error events.
 *
 * User space finds each device's DeviceStats in the target (user/collector/cudamem.c:
 * the exported allocator, its dynamic type, its per-device vector, each DeviceStats
 * validated) and writes their addresses here; until then (CUDA not initialised, or not
 * available) nothing is read and `mem` is null. At a module call: the thread's current
 * device (as the probes on c10::cuda::SetDevice / ExchangeDevice / MaybeExchangeDevice
 * saw it set; 0 for a thread that never set one, CUDA's default), then two reads of its
 * DeviceStats (allocated current and peak, which are adjacent; reserved current), into
 * a small REC_MEM record just before the call's own record. Nothing on the allocator's
 * hot path is probed. */
#ifndef EVMBPF_CUDAMEM_BPF_H
#define EVMBPF_CUDAMEM_BPF_H

#include "state.bpf.h"

/* Written by user space once the allocator is found: DeviceStats address per device. */
__u64 cuda_stats[CUDA_MAX_DEVICES] = {};
__u32 cuda_ndev = 0;
/* Offsets within DeviceStats of allocated_bytes[AGGREGATE] and reserved_bytes[AGGREGATE]
 * (Stat = {current, peak, allocated, freed}); set with cuda_stats. */
__u32 cuda_alloc_off = 0;
__u32 cuda_reserved_off = 0;

/* The current device of threads that set one; absent: device 0. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __s32);
} cuda_device SEC(".maps");

static __always_inline int cuda_set_device(long dev)
{
	__s8 d = (__s8)dev; /* DeviceIndex: int8_t */
	if (d < 0)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__s32 v = d;
	bpf_map_update_elem(&cuda_device, &tid, &v, BPF_ANY);
	return 0;
}

/* A global function: verified once, apart from call_enter. */
__noinline int cudamem_emit(void)
{
	__u32 n = cuda_ndev;
	if (!n)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	__s32 *dp = bpf_map_lookup_elem(&cuda_device, &tid);
	__s32 dev = dp ? *dp : 0;
	if (dev < 0 || dev >= CUDA_MAX_DEVICES || (__u32)dev >= n)
		return 0;
	__u64 stats = cuda_stats[dev & (CUDA_MAX_DEVICES - 1)];
	if (!stats)
		return 0;
	struct rec_mem r = {};
	__s64 cp[2];
	if (bpf_probe_read_user(cp, sizeof(cp), (void *)(stats + cuda_alloc_off)) ||
	    bpf_probe_read_user(&r.reserved, sizeof(r.reserved), (void *)(stats + cuda_reserved_off))) {
		__sync_fetch_and_add(&read_faults, 1);
		return 0;
	}
	r.hdr.kind = REC_MEM;
	r.hdr.size = sizeof(r);
	r.hdr.pid = id >> 32;
	r.hdr.tid = tid;
	r.hdr.ts_ns = bpf_ktime_get_ns();
	r.device = dev;
	r.allocated = cp[0];
	r.max_allocated = cp[1];
	if (bpf_ringbuf_output(&events, &r, sizeof(r), BPF_RB_NO_WAKEUP))
		__sync_fetch_and_add(&dropped_records, 1);
	return 0;
}

#endif /* EVMBPF_CUDAMEM_BPF_H */
