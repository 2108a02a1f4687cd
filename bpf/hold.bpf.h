// SPDX-License-Identifier: GPL-2.0
/* hold: a thread held at its probe until user space has read what its record names.
 *
 * A record that needs the target as it is at this call (the model at the first call,
 * CPU tensor values under --numeric, ...) ends with the thread that made it signalling
 * itself SIGURG once the record is in the ring buffer (seized.bpf.h): only this thread
 * stops, in a ptrace stop no one but evmbpf sees, before it runs another instruction of
 * its own; user space reads the target's memory (never writing it), and continues the
 * thread with the signal suppressed. */
#ifndef EVMBPF_HOLD_BPF_H
#define EVMBPF_HOLD_BPF_H

#include <bpf/bpf_core_read.h>
#include "state.bpf.h"
#include "seized.bpf.h"

/* --numeric: describe where tensor values are (struct dnode_tensor_data) */
const volatile __u32 numeric = 0;
/* --numeric --cupti: a CUDA tensor holds its thread too (the agent's reductions go on
 * the tensor's stream before the thread runs on) */
const volatile __u32 numeric_cuda = 0;
/* per process (struct proc_state): numeric_hold, set by user space once every thread is
 * seized: records may then hold their thread; holds, hold_refused */

/* Stop the current thread at its return to user mode (seized.bpf.h); 1 when the signal
 * is on its way. Every hold of this object: the first module call's model read, a new
 * code object's names, a bound call's site, note_samples' documents, CUDA's init, and
 * --numeric's values. */
static __always_inline int hold_thread(void)
{
	struct proc_state *ps = ps_cur();
	if (!stop_seized_thread()) {
		__sync_fetch_and_add(&ps->hold_refused, 1);
		return 0;
	}
	__sync_fetch_and_add(&ps->holds, 1);
	return 1;
}

#endif /* EVMBPF_HOLD_BPF_H */
