// SPDX-License-Identifier: GPL-2.0
/* seized: the one way the BPF side stops a thread of a target.
 *
 * evmbpf PTRACE_SEIZEs the processes it may hold (user/collector/session/hold.c). A
 * thread of such a process that signals itself SIGURG stops alone, in signal-delivery-
 * stop, reported to evmbpf and to no one else: its parent's wait(2) sees nothing, a
 * shell's job control nothing, su and sudo nothing. evmbpf reads what it needs and
 * continues the thread with the signal suppressed. If evmbpf dies meanwhile the kernel
 * detaches and the SIGURG is delivered: ignored by default (a process that handles
 * SIGURG is never seized). A thread evmbpf has not seized is never stopped: a SIGSTOP
 * would be a group-stop its parent can wait for, and a SIGURG would reach its handler. */
#ifndef EVMBPF_SEIZED_BPF_H
#define EVMBPF_SEIZED_BPF_H

#include <bpf/bpf_core_read.h>

#define SIGURG_NR 23
#define PT_PTRACED_BIT 0x1u
#define PT_TRACE_EXEC_BIT (1u << (3 + 4)) /* PT_EVENT_FLAG(PTRACE_EVENT_EXEC) */

/* evmbpf's own tgid, set before the object is loaded: the tracer a seized thread has */
const volatile __u32 tracer_tgid = 0;

/* Is task traced by evmbpf (and not by a debugger)? */
static __always_inline int seized_by_us(struct task_struct *task)
{
	if (!tracer_tgid || !(BPF_CORE_READ(task, ptrace) & PT_PTRACED_BIT))
		return 0;
	return (__u32)BPF_CORE_READ(task, parent, tgid) == tracer_tgid;
}

/* Stop the current thread at its return to user mode, seen by evmbpf alone; 1 when the
 * signal is on its way, 0 when this thread may not be stopped (not seized, or it blocks
 * SIGURG, which would then never be delivered). */
static __always_inline int stop_seized_thread(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if (!seized_by_us(task))
		return 0;
	if (task->blocked.sig[0] & (1UL << (SIGURG_NR - 1)))
		return 0;
	return !bpf_send_signal_thread(SIGURG_NR);
}

#endif /* EVMBPF_SEIZED_BPF_H */
