/* One loaded BPF object serves every traced process of the same Python and torch
 * layout: what differs between them (the target's addresses, which ASLR moves; what its
 * probes learnt; its counters) is a struct proc_state of its own, in the object's
 * `procs` array (a global of its .bss) at the process's slot, which the `proc_slot` hash
 * gives by tgid. Shared by bpf/ and user/ (user space reads and writes its slot through
 * the skeleton's mapped .bss, as it did the object's globals). */
#ifndef EVMBPF_PROCSLOT_H
#define EVMBPF_PROCSLOT_H

#include "evmbpf.h"

/* processes one object serves at once, less one: slot 0 is no process's. A slot's
 * number tags (bits 56-63) the keys of the maps keyed by the target's addresses, which
 * differ in meaning per process */
#define PROC_SLOTS 128
#define PROC_TAG_SHIFT 56
#define BOUND_DEPTHS 4

struct proc_state {
	__u32 tgid;          /* 0: free */
	__u32 slot;
	__u64 tag;           /* slot << PROC_TAG_SHIFT */
	struct target_config cfg;
	/* counters read by user space */
	__u64 dropped_records;
	__u64 dropped_bytes;
	__u64 truncated_records;
	__u64 read_faults;
	__u64 holds;
	__u64 hold_refused;
	__u64 tensor_bytes_sent;
	__u64 samples_spurious;
	/* the target's exit status (wait(2) encoding), once its last thread has exited */
	__s32 group_exit_code;
	__u32 group_exited;
	/* holds (see state.bpf.h, hold.bpf.h, bound.bpf.h, samples.bpf.h) */
	__u32 first_call; /* the first module call to come: its record (the model read) wakes us */
	__u32 hold_next;  /* ... and holds its thread, where the process may be held */
	__u32 hold_codes;
	__u32 numeric_hold;
	__u32 bound_hold;
	__u32 bound_off;
	__u32 bound_slots; /* sites a thread may have watched at once (0: BOUND_SITES) */
	__u32 samples_hold;
	__u64 samples_code;
	/* what the probes learnt of this process */
	__u32 layout_hint;
	__u32 pending_used;
	__u32 markers_live;
	__u32 orphans_pending;
	__u64 bound_gil;
	__u32 bound_depth[BOUND_DEPTHS];
	/* CUDA (cudamem.bpf.h) */
	__u64 cuda_stats[CUDA_MAX_DEVICES];
	__u32 cuda_ndev;
	__u32 cuda_alloc_off;
	__u32 cuda_reserved_off;
	__u32 cuda_unknown_on;
	__u32 cuda_init_armed;
	__u32 cuda_init_hold;
	__u64 cuda_ld_debug;
	__u32 cuda_ld_seen;
	/* torch awaited (evmbpf record: no call probe until libc10.so is mapped;
	 * ldwatch.bpf.h): torch_ld_debug is &_r_debug while it is, torch_ld_seen the r_map
	 * entries looked at, torch_loaded set by the probe when it is mapped */
	__u32 torch_ld_seen;
	__u64 torch_ld_debug;
	__u32 torch_loaded;
	__u32 pad;
	/* module record bytes written since the last forced wakeup (state.bpf.h, rb_flags) */
	__u64 ring_unwoken;
	/* the enter record kept back (state.bpf.h, defer_flush): its state (DEFER_*), its
	 * length in the process's defer buffer, its thread, stack pointer and clock */
	__u64 defer_state;   /* 64 bits: the BPF side's compare-and-swap needs no -mcpu=v3 */
	__u32 defer_len;
	__u32 defer_tid;
	__u64 defer_sp;
	__u64 defer_ts;
	__u64 defer_pairs;   /* counted: leaf calls sent as one record */
	__u64 defer_flushed; /* enters kept back, then sent on their own */
};

/* Each CPU's program's process (bpf/state.bpf.h: ps_enter, ps_cur), in one line with
 * three others: its slot, its tgid (the proc_slot look-up's key, off the stack) and the
 * task's pid_tgid as the program's top read it. Written by the programs only. */
struct cpu_cur {
	__u32 slot;
	__u32 tgid;
	__u64 id;
};

#endif
