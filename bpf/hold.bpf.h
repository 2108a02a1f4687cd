// SPDX-License-Identifier: GPL-2.0
/* hold: --numeric's hold of one thread at its probe.
 *
 * A record that describes CPU tensor values ends with the thread that owns them
 * signalling itself SIGURG (default: ignored) once the record is in the ring buffer.
 * evmbpf has PTRACE_SEIZEd the target's threads, so the signal stops only this thread,
 * in signal-delivery-stop, before it runs another instruction of its own: user space
 * reads the values from the target's memory (never writing it), and continues the
 * thread with the signal suppressed. Nothing else is read here: the target's signal
 * mask only, so that a thread that blocks SIGURG (it would never stop) is not held. */
#ifndef EVMBPF_HOLD_BPF_H
#define EVMBPF_HOLD_BPF_H

#include <bpf/bpf_core_read.h>
#include "state.bpf.h"

#define SIGURG_NR 23

/* --numeric: describe where tensor values are (struct dnode_tensor_data) */
const volatile __u32 numeric = 0;
/* --numeric --cupti: a CUDA tensor holds its thread too (the agent's reductions go on
 * the tensor's stream before the thread runs on) */
const volatile __u32 numeric_cuda = 0;
/* per process (struct proc_state): numeric_hold, set by user space once every thread is
 * seized: records may then hold their thread; holds, hold_refused */

/* Stop the current thread at its return to user mode; 1 when the signal is on its way. */
static __always_inline int hold_thread(void)
{
	struct proc_state *ps = ps_cur();
	if (!ps->numeric_hold)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	unsigned long blocked = BPF_CORE_READ(task, blocked.sig[0]);
	if (blocked & (1UL << (SIGURG_NR - 1))) {
		__sync_fetch_and_add(&ps->hold_refused, 1);
		return 0;
	}
	if (bpf_send_signal_thread(SIGURG_NR)) {
		__sync_fetch_and_add(&ps->hold_refused, 1);
		return 0;
	}
	__sync_fetch_and_add(&ps->holds, 1);
	return 1;
}

#endif /* EVMBPF_HOLD_BPF_H */
