// SPDX-License-Identifier: GPL-2.0
/* cudamem: the CUDA caching allocator's counters, `mem` of enter and error events.
 *
 * User space finds each device's DeviceStats in the target (user/collector/gpu/cudamem.c:
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
#include "hold.bpf.h"
#include "ldwatch.bpf.h"

/* Per process (struct proc_state): cuda_stats, written by user space once the allocator
 * is found: DeviceStats address per device, cuda_ndev of them; cuda_alloc_off and
 * cuda_reserved_off, the offsets within DeviceStats of allocated_bytes[AGGREGATE] and
 * reserved_bytes[AGGREGATE] (Stat = {current, peak, allocated, freed}), set with them. */

/* The current device of threads that set one; absent: device 0, unless cuda_unknown
 * has the thread. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __s32);
} cuda_device SEC(".maps");

/* Threads that were there when the device probes were placed (user space lists them):
 * they may have set a device before, so none is assumed for them. Left when the thread
 * sets a device, when c10::cuda::GetDevice tells it one, or when it exits. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct cuda_unknown_v);
} cuda_unknown SEC(".maps");
/* Per process (struct proc_state): cuda_unknown_on, set by user space while cuda_unknown
 * may hold threads (no lookup otherwise); cuda_init_armed, set when
 * c10::cuda::device_count_ensure_non_zero() ran (CUDA's lazy init, just before the
 * allocator's own init) while cuda_ndev is 0; cuda_init_hold: user space allows the next
 * module call to hold the thread (hold.bpf.h) until it has found the devices.
 * cuda_ld_debug: &_r_debug in the target while libc10_cuda.so is awaited (user space
 * sets it, clears it once the library is found): the dynamic loader's _dl_debug_state()
 * at RT_CONSISTENT (r_state 0) has mapped a dlopen's objects (appended to the r_map
 * list) and run none of their code yet; cuda_ld_seen: r_map entries already looked at. */

static __always_inline int cudamem_mark(__u32 flags);

/* _dl_debug_state(): when the objects this dlopen added include libc10_cuda.so, stop the
 * thread (hold.bpf.h) so that user space places the device probes before any of its code
 * runs (MEM_F_LOADED). */
static __always_inline int cuda_dlopen_seen(void)
{
	struct proc_state *ps = ps_cur();
	__u32 seen = ps->cuda_ld_seen;
	int found = ld_added(ps->cuda_ld_debug, &seen, LD_C10_CUDA);
	ps->cuda_ld_seen = seen;
	if (found) /* held (hold.bpf.h) when it may be; a stop without its record is continued too */
		cudamem_mark(MEM_F_LOADED | (hold_thread() ? MEM_F_HELD : 0));
	return 0;
}

static __always_inline int cuda_set_device(long dev)
{
	struct proc_state *ps = ps_cur();
	__s8 d = (__s8)dev; /* DeviceIndex: int8_t */
	if (d < 0)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__s32 v = d;
	bpf_map_update_elem(&cuda_device, &tid, &v, BPF_ANY);
	if (ps->cuda_unknown_on)
		bpf_map_delete_elem(&cuda_unknown, &tid);
	return 0;
}

/* c10::cuda::GetDevice(DeviceIndex *device), entry: keep where the answer goes, for a
 * thread whose device is unknown (the others pass). */
static __always_inline int cuda_getdev_enter(__u64 out)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cuda_unknown_v *u = bpf_map_lookup_elem(&cuda_unknown, &tid);
	if (u)
		u->out = out;
	return 0;
}

/* ... its return: cudaSuccess and *device is the thread's current device. */
static __always_inline int cuda_getdev_exit(long rc)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct cuda_unknown_v *u = bpf_map_lookup_elem(&cuda_unknown, &tid);
	if (!u || !u->out)
		return 0;
	__u64 out = u->out;
	u->out = 0;
	__s8 d = -1;
	if ((int)rc != 0 || bpf_probe_read_user(&d, 1, (void *)out) || d < 0)
		return 0;
	__s32 v = d;
	if (!bpf_map_lookup_elem(&cuda_device, &tid)) /* a set during the call decides */
		bpf_map_update_elem(&cuda_device, &tid, &v, BPF_NOEXIST);
	bpf_map_delete_elem(&cuda_unknown, &tid);
	return 0;
}

/* c10::cuda::device_count_ensure_non_zero(): CUDA's lazy init is under way. */
static __always_inline int cuda_init_seen(void)
{
	struct proc_state *ps = ps_cur();
	if (!ps->cuda_ndev)
		ps->cuda_init_armed = 1;
	return 0;
}

/* A thread of the target ended: its tid may come again, for a new thread. */
static __always_inline void cuda_task_gone(struct proc_state *ps, __u32 tid)
{
	bpf_map_delete_elem(&cuda_device, &tid);
	if (ps->cuda_unknown_on)
		bpf_map_delete_elem(&cuda_unknown, &tid);
}

/* A REC_MEM without counters; 0 once it is in the ring buffer. */
static __always_inline int cudamem_mark(__u32 flags)
{
	struct proc_state *ps = ps_cur();
	__u64 id = bpf_get_current_pid_tgid();
	struct rec_mem r = {};
	r.hdr.kind = REC_MEM;
	r.hdr.size = sizeof(r);
	r.hdr.pid = id >> 32;
	r.hdr.tid = (__u32)id;
	r.hdr.ts_ns = bpf_ktime_get_ns();
	r.device = -1;
	r.flags = flags;
	if (ps_output(ps, &r, sizeof(r), 0)) {
		__sync_fetch_and_add(&ps->dropped_records, 1);
		return -1;
	}
	return 0;
}

/* A global function: verified once, apart from call_enter. */
__noinline int cudamem_emit_now(void)
{
	struct proc_state *ps = ps_cur();
	__u32 n = ps->cuda_ndev;
	if (!n) {
		if (ps->cuda_init_armed && ps->cuda_init_hold && !ps->hold_next) {
			/* CUDA initialised since the last look: stop here until user space has
			 * found the devices and read this thread's counters (MEM_F_INIT); the
			 * first module call's own hold does that look already */
			ps->cuda_init_armed = 0;
			cudamem_mark(MEM_F_INIT | (hold_thread() ? MEM_F_HELD : 0));
		}
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	__s32 *dp = bpf_map_lookup_elem(&cuda_device, &tid);
	if (!dp && ps->cuda_unknown_on) {
		struct cuda_unknown_v *u = bpf_map_lookup_elem(&cuda_unknown, &tid);
		if (u) { /* set before the attach, not seen since: `mem` null, said once */
			u->calls++;
			cudamem_mark(MEM_F_UNKNOWN);
			return 0;
		}
	}
	__s32 dev = dp ? *dp : 0;
	if (dev < 0 || dev >= CUDA_MAX_DEVICES || (__u32)dev >= n)
		return 0;
	__u64 stats = ps->cuda_stats[dev & (CUDA_MAX_DEVICES - 1)];
	if (!stats)
		return 0;
	struct rec_mem r = {};
	__s64 cp[2];
	if (bpf_probe_read_user(cp, sizeof(cp), (void *)(stats + ps->cuda_alloc_off)) ||
	    bpf_probe_read_user(&r.reserved, sizeof(r.reserved), (void *)(stats + ps->cuda_reserved_off))) {
		__sync_fetch_and_add(&ps->read_faults, 1);
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
	if (ps_output(ps, &r, sizeof(r), BPF_RB_NO_WAKEUP))
		__sync_fetch_and_add(&ps->dropped_records, 1);
	return 0;
}

/* At each module call: a process with no device found and no CUDA init to mark (every
 * CPU-only process) pays two loads here, not a call (markers.bpf.h: active_marker) */
static __always_inline void cudamem_emit(void)
{
	struct proc_state *ps = ps_cur();
	if (ps->cuda_ndev || ps->cuda_init_armed)
		cudamem_emit_now();
}

#endif /* EVMBPF_CUDAMEM_BPF_H */
