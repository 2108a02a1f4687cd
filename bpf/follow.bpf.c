// SPDX-License-Identifier: GPL-2.0
/* --follow: every process a followed process starts is followed too, at any depth.
 *
 * A followed process that execs is stopped there and again at the new image's entry
 * point, where its libraries are mapped and no Python has run, so that user space
 * places its probes before the first Python instruction. The stop is a ptrace stop that
 * no one but evmbpf sees: evmbpf seizes the processes it follows, with PTRACE_O_TRACEFORK
 * and TRACEVFORK, so the kernel seizes their children as they are born, and with
 * PTRACE_O_TRACEEXEC, so that the kernel's own exec stop, right after this tracepoint,
 * holds it at its exec (a stop only the follower ends: a SIGURG stop there could be taken
 * for a lost hold of the program before and ended by its session); the entry point's
 * stop is a SIGURG (seized.bpf.h). Only evmbpf's own child before it is seized (launch mode's command, marked
 * FOLLOWED_OWN) is stopped by SIGSTOP: its parent is evmbpf, the one that sees it. A
 * process neither seized nor evmbpf's child is never stopped (the record says so). Launch
 * mode without --follow loads these programs but follow_fork and follow_exit, with the
 * command alone in `followed` (user/collector/run/launch.c). A traced Python that forks
 * without exec (a DataLoader worker, the fork start method) has a child with the same
 * memory and no probes: uprobes attached to a pid do not follow fork. Seized at its birth,
 * the child waits in the kernel's first ptrace stop until its own probes are placed. A
 * vfork child shares its parent's memory, and execs or exits at once: it is not traced
 * as a fork of its Python. Nothing of the target is read or written here.
 *
 * `evmbpf record` (follow_node): every exec on the node is reported, and never stopped:
 * the recorder looks at the process a moment later, once its libraries are mapped, and
 * traces it when it is Python; the processes it traces are followed as above. The OOM
 * killer's choice of a followed process is reported (oom:mark_victim), so that its trace
 * can tell it from a `kill -9`.
 *
 * A user's processes followed through their forks are at most follow_user_max (its real
 * uid at the fork): a fork bomb under one user's traced process does not fill `followed`
 * for every other user. A fork past it is reported FORK_UNFOLLOWED and let go. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "follow.h"
#include "seized.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define FOLLOWED_MAX 16384

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FOLLOWED_MAX);
	__type(key, __u32);   /* tgid */
	__type(value, __u32); /* FOLLOWED | FOLLOWED_PYTHON */
} followed SEC(".maps");

/* the processes follow_fork added: each one's user, and how many each user has */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FOLLOWED_MAX);
	__type(key, __u32);   /* tgid */
	__type(value, __u32); /* its real uid at its fork */
} followed_uid SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);   /* uid */
	__type(value, __u32); /* its processes in followed_uid */
} user_followed SEC(".maps");

const volatile __u32 follow_user_max = FOLLOWED_MAX / 16;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 16);
} follow_events SEC(".maps");

__u64 follow_dropped = 0;
const volatile int follow_node = 0;  /* evmbpf record: report every exec */

static __always_inline void report(__u32 kind, __u32 pid, __u32 tid, __u32 why, __s32 code)
{
	struct follow_rec *r = bpf_ringbuf_reserve(&follow_events, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&follow_dropped, 1);
		return;
	}
	r->hdr.kind = kind;
	r->hdr.size = sizeof(*r);
	r->hdr.pid = pid;
	r->hdr.tid = tid;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->why = why;
	r->exit_code = code;
	bpf_ringbuf_submit(r, 0);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(follow_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	if (ptgid == ctgid)
		return 0; /* a thread */
	__u32 *v = bpf_map_lookup_elem(&followed, &ptgid);
	if (!v)
		return 0;
	/* seized at its birth (PTRACE_O_TRACEFORK): it waits in its first ptrace stop */
	__u32 why = seized_by_us(child) ? FORK_HELD : 0;
	__u32 uid = BPF_CORE_READ(child, real_cred, uid.val), one = 1;
	__u32 *n = bpf_map_lookup_elem(&user_followed, &uid);
	if (n && *n >= follow_user_max) {
		report(FOLLOW_FORK, ctgid, ptgid, why | FORK_UNFOLLOWED, 0);
		return 0;
	}
	__u32 flags = FOLLOWED;
	if (bpf_map_update_elem(&followed, &ctgid, &flags, BPF_ANY)) {
		report(FOLLOW_FORK, ctgid, ptgid, why | FORK_UNFOLLOWED, 0); /* the map is full */
		return 0;
	}
	if (!bpf_map_update_elem(&followed_uid, &ctgid, &uid, BPF_NOEXIST)) {
		if (n)
			__sync_fetch_and_add(n, 1);
		else if (bpf_map_update_elem(&user_followed, &uid, &one, BPF_NOEXIST) &&
			 (n = bpf_map_lookup_elem(&user_followed, &uid)))
			__sync_fetch_and_add(n, 1); /* another fork made its entry first */
	}
	if ((*v & FOLLOWED_PYTHON) && child->mm != parent->mm)
		why |= FORK_OF_PYTHON;
	report(FOLLOW_FORK, ctgid, ptgid, why, 0);
	return 0;
}

static __always_inline int stop_here(__u32 why)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 *v = bpf_map_lookup_elem(&followed, &tgid);
	if (!v)
		return 0;
	__u32 own = *v & FOLLOWED_OWN;
	if (why == 1)
		*v = FOLLOWED | own; /* a new program: traced again only once user space says so */
	__s32 how = STOP_NONE;
	struct task_struct *task = bpf_get_current_task_btf();
	if (why == 1 && seized_by_us(task) && (BPF_CORE_READ(task, ptrace) & PT_TRACE_EXEC_BIT))
		how = STOP_PTRACE; /* the kernel's exec stop comes next (PTRACE_O_TRACEEXEC) */
	else if (seized_by_us(task))
		how = stop_seized_thread() ? STOP_PTRACE : STOP_NONE;
	else if (own && !bpf_send_signal(19 /* SIGSTOP */))
		how = STOP_SIGSTOP; /* evmbpf's own child: evmbpf is the parent that sees it */
	report(FOLLOW_STOPPED, tgid, (__u32)bpf_get_current_pid_tgid(), why, how);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(follow_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (follow_node && !bpf_map_lookup_elem(&followed, &tgid)) {
		report(FOLLOW_NODE_EXEC, tgid, (__u32)bpf_get_current_pid_tgid(), 0, 0);
		return 0;
	}
	return stop_here(1);
}

SEC("tp_btf/mark_victim")
int BPF_PROG(follow_oom, struct task_struct *task, uid_t uid)
{
	__u32 tgid = task->tgid;
	/* the recorder: every victim (one it attached a moment ago may not be in `followed`
	 * yet; user space keeps the last few by pid) */
	if (follow_node || bpf_map_lookup_elem(&followed, &tgid))
		report(FOLLOW_OOM, tgid, task->pid, 0, 0);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(follow_entry)
{
	return stop_here(2);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(follow_exit, struct task_struct *p, bool group_dead)
{
	__u32 tgid = p->tgid;
	if (!group_dead || !bpf_map_lookup_elem(&followed, &tgid))
		return 0;
	bpf_map_delete_elem(&followed, &tgid);
	__u32 *uid = bpf_map_lookup_elem(&followed_uid, &tgid);
	if (uid) {
		__u32 *n = bpf_map_lookup_elem(&user_followed, uid);
		if (n && *n)
			__sync_fetch_and_add(n, (__u32)-1);
		bpf_map_delete_elem(&followed_uid, &tgid);
	}
	report(FOLLOW_EXIT, tgid, p->pid, 0, p->exit_code);
	return 0;
}
