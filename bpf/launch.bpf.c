// SPDX-License-Identifier: GPL-2.0
/* Launch mode: stop the child as soon as it has exec'd, and again at its entry point,
 * where every shared library is mapped and no Python has run yet, so that the module
 * probes can be placed before the first Python instruction. The stops are SIGSTOPs the
 * collector (the child's parent) sees with waitpid and ends with SIGCONT. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "evmbpf.h"

char LICENSE[] SEC("license") = "GPL";

/* The pid to watch; cleared once the probes are in place. */
__u32 launch_pid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} stops SEC(".maps");

static __always_inline int stop_here(__u32 why)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!launch_pid || (id >> 32) != launch_pid)
		return 0;
	bpf_send_signal(19 /* SIGSTOP */);
	struct rec_hdr *r = bpf_ringbuf_reserve(&stops, sizeof(*r), 0);
	if (r) {
		r->kind = REC_STOPPED;
		r->size = sizeof(*r);
		r->pid = id >> 32;
		r->tid = why;
		r->ts_ns = bpf_ktime_get_ns();
		bpf_ringbuf_submit(r, 0);
	}
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(launch_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	return stop_here(1);
}

SEC("uprobe")
int BPF_KPROBE(launch_entry)
{
	return stop_here(2);
}
