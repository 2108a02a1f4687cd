/* --follow, and evmbpf record's execs: bpf/follow.bpf.c tells of the processes a job's
 * processes start (and, for the recorder, of every exec on the node), and holds a new
 * Python at its entry point until its probes are placed. The followed processes are
 * seized (hold.c: the job's command before it runs, a traced Python at its attach, their
 * children at their birth), so each of those holds is a ptrace stop that no parent
 * sees; only evmbpf's own child, where it could not be seized, is stopped by SIGSTOP. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "elfsym.h"
#include "follow.h"
#include "follow.skel.h"
#include "hold.h"
#include "job_state.h"
#include "node_share.h"
#include "record.h"
#include "session.h"
#include "uprobes.h"
#include "util.h"
#include "watchdog.h"

int pending_slot(struct job *j, pid_t pid, int add)
{
	for (int i = 0; i < PENDING_MAX; i++)
		if (j->pending[i].pid == pid)
			return i;
	for (int i = 0; add && i < PENDING_MAX; i++)
		if (!j->pending[i].pid) {
			j->pending[i].pid = pid;
			return i;
		}
	return -1;
}

static void pending_drop(struct job *j, pid_t pid)
{
	int i = pending_slot(j, pid, 0);
	if (i < 0)
		return;
	bpf_link__destroy(j->pending[i].entry);
	j->pending[i].entry = NULL;
	j->pending[i].pid = 0;
}

/* A followed process runs on from a stop bpf/follow.bpf.c made (how: STOP_*; tid: the
 * thread a ptrace stop holds, once it is there, or 0: its first stop, when it comes). */
static void resume(pid_t pid, pid_t tid, int how)
{
	if (how == STOP_PTRACE) {
		if (tid)
			hold_wait(tid);
		hold_resume(pid);
	} else if (how == STOP_SIGSTOP) {
		kill(pid, SIGCONT);
		watchdog_hold(pid, 0);
	}
}

/* A followed process at its new image's entry point (or exec'd, where that point could
 * not be probed): a Python gets its session, anything else runs on, still followed. */
static void follow_look(struct job *j, pid_t pid, pid_t tid, int how)
{
	pending_drop(j, pid);
	if (j->node ? record_wanted(&j->opts->record, j->match, pid) : target_is_python(pid)) {
		struct proc *p = proc_start(j, pid, 0, "exec");
		if (p && j->node && proc_numeric(j, p))
			; /* --numeric could not hold it: said, not traced */
		else if (p)
			session_announce(&p->s);
		else
			j->failed = 1;
	} else {
		debugx("%d is not Python: followed, not traced", pid);
	}
	resume(pid, tid, how);
}

static int on_follow(void *ctx, void *data, size_t size)
{
	struct job *j = ctx;
	const struct follow_rec *r = data;
	if (size < sizeof(*r))
		return 0;
	pid_t pid = (pid_t)r->hdr.pid;
	if (j->unloading) {
		/* evmbpf stops: a process the programs stopped before they went is let go */
		if (r->hdr.kind == FOLLOW_STOPPED || (r->hdr.kind == FOLLOW_FORK &&
						       (r->why & FORK_HELD))) {
			debugx("%d, stopped as evmbpf stops: let go untraced", pid);
			if (r->hdr.kind == FOLLOW_STOPPED)
				resume(pid, (pid_t)r->hdr.tid, r->exit_code);
			else
				resume(pid, 0, STOP_PTRACE);
		}
		return 0;
	}
	switch (r->hdr.kind) {
	case FOLLOW_FORK:
		debugx("%d forked %d%s", (int)r->hdr.tid, pid,
		       (r->why & FORK_HELD) ? " (held from its birth)" : "");
		if (r->why & FORK_UNFOLLOWED) {
			/* its user's share of the followed processes is taken: let go, unseized */
			static uint64_t said;
			if (!said++)
				warnx_("a user has %u processes followed through their forks, its "
				       "share (or all users' fill the table): %d, forked by %d, is "
				       "not followed, nor the next ones past it (said once)",
				       (unsigned)j->fskel->rodata->follow_user_max, pid,
				       (int)r->hdr.tid);
			else
				debugx("%d is not followed: its user's share is taken", pid);
			if (r->why & FORK_HELD)
				hold_release(pid, 0);
			break;
		}
		if (!(r->why & FORK_HELD))
			break; /* not seized: followed, its stops made by no one */
		if (r->why & FORK_OF_PYTHON) {
			/* the fork of a traced Python: the same interpreter at the same addresses */
			struct proc *p = proc_start(j, pid, 1, "fork");
			if (p)
				debugx("tracing %d, forked by %d", pid, (int)r->hdr.tid);
		}
		resume(pid, 0, STOP_PTRACE);
		break;
	case FOLLOW_STOPPED: {
		int how = r->exit_code;
		debugx("%d (thread %d) %s, %s", pid, (int)r->hdr.tid,
		       r->why == 2 ? "at its entry point" : "exec'd",
		       how == STOP_PTRACE ? "held" : how == STOP_SIGSTOP ? "stopped (SIGSTOP)"
					     : "not stopped");
		if (how == STOP_SIGSTOP) {
			watchdog_start(pid);
			watchdog_hold(pid, 1);
		}
		struct proc *old = live_proc(j, pid);
		if (old) { /* a traced process exec'd: its trace ends */
			session_step(&old->s, 0, 0);
			old->s.ended = old->s.execed = 1;
			old->s.exit_code = -1;
			proc_end(old);
		}
		if (r->why == 2 || how == STOP_NONE) {
			/* at its entry point; or not stopped, so already past it: looked at now */
			follow_look(j, pid, (pid_t)r->hdr.tid, how);
			break;
		}
		/* exec'd: stop again at the entry point, where its libraries are mapped */
		char exe[64];
		uint64_t off;
		snprintf(exe, sizeof(exe), "/proc/%d/exe", pid);
		struct elf_file *f = elf_file_open(exe);
		int i = pending_slot(j, pid, 1);
		if (i < 0 || !f || elf_file_vaddr_to_offset(f, elf_file_entry(f), &off) ||
		    !(j->pending[i].entry = attach_uprobe(j->fskel->progs.follow_entry, 0, pid, exe,
							   off, "the entry point"))) {
			elf_file_close(f);
			debugx("cannot probe the entry point of %d; looking at it now", pid);
			follow_look(j, pid, (pid_t)r->hdr.tid, how);
			break;
		}
		elf_file_close(f);
		j->pending[i].how = how;
		resume(pid, (pid_t)r->hdr.tid, how);
		break;
	}
	case FOLLOW_EXIT:
		pending_drop(j, pid);
		if (pid == j->child)
			debugx("the command %d exited", pid);
		break;
	case FOLLOW_NODE_EXEC:
		/* looked at a moment later, when the loader has mapped its libraries */
		uid_t uid = node_proc_uid(pid);
		if (uid == NODE_NO_UID || node_look_refused(j, pid, uid))
			break; /* gone already, or its user's share of the looks is full */
		for (int i = 0; i < LOOKS_MAX; i++)
			if (!j->looks[i].pid || j->looks[i].pid == pid) {
				j->looks[i].uid = uid;
				j->looks[i].pid = pid;
				j->looks[i].due_ns = mono_ns() + LOOK_AFTER_NS;
				j->looks[i].tries = 0;
				return 0;
			}
		debugx("more than %d execs at once: %d is not looked at", LOOKS_MAX, pid);
		break;
	case FOLLOW_OOM: {
		struct proc *p = live_proc(j, pid);
		if (p)
			p->s.trace.oom_killed = 1;
		debugx("the OOM killer chose %d", pid);
		break;
	}
	}
	return 0;
}

int follow_load(struct job *j)
{
	j->fskel = follow_bpf__open();
	if (j->fskel) {
		j->fskel->rodata->follow_node = j->node;
		j->fskel->rodata->tracer_tgid = (uint32_t)getpid();
		const char *most = getenv("EVMBPF_TEST_FOLLOW_USER_MAX"); /* tests only */
		if (most && atoi(most) > 0)
			j->fskel->rodata->follow_user_max = (uint32_t)atoi(most);
		bpf_program__set_autoload(j->fskel->progs.follow_oom, j->node);
	}
	if (!j->fskel || follow_bpf__load(j->fskel)) {
		warnx_("cannot load the BPF programs of --follow: %s (run with -v for details)",
		       strerror(errno));
		follow_bpf__destroy(j->fskel);
		j->fskel = NULL;
		return -1;
	}
	struct bpf_program *progs[3] = { j->fskel->progs.follow_fork, j->fskel->progs.follow_exec,
					 j->fskel->progs.follow_exit };
	for (int i = 0; i < 3; i++) {
		j->flinks[i] = bpf_program__attach(progs[i]);
		if (!j->flinks[i]) {
			warnx_("cannot attach --follow's %s: %s", bpf_program__name(progs[i]),
			       strerror(errno));
			return -1;
		}
	}
	j->frb = ring_buffer__new(bpf_map__fd(j->fskel->maps.follow_events), on_follow, j, NULL);
	if (!j->frb) {
		warnx_("cannot open the ring buffer: %s", strerror(errno));
		return -1;
	}
	struct epoll_event ev = { .events = EPOLLIN };
	epoll_ctl(j->ep, EPOLL_CTL_ADD, ring_buffer__epoll_fd(j->frb), &ev);
	if (j->node && !(j->flinks[3] = bpf_program__attach(j->fskel->progs.follow_oom)))
		warnx_("warning: the OOM killer's choice cannot be seen (oom:mark_victim: %s): a "
		       "process it kills is said to be killed by SIGKILL", strerror(errno));
	return 0;
}

void follow_unload(struct job *j)
{
	for (int i = 0; i < 4; i++)
		bpf_link__destroy(j->flinks[i]);
	/* a process held between its exec and its entry point runs on untraced */
	for (int i = 0; i < PENDING_MAX; i++)
		if (j->pending[i].pid) {
			pid_t pid = j->pending[i].pid;
			int how = j->pending[i].how;
			pending_drop(j, pid);
			if (how == STOP_SIGSTOP) /* a ptrace stop ends with the job's release */
				resume(pid, 0, how);
		}
	/* the programs are gone: a stop they made whose record is still in the ring (an
	 * exec, a fork, an entry point just before) would otherwise stand for good */
	if (j->frb) {
		j->unloading = 1;
		ring_buffer__consume(j->frb);
	}
	ring_buffer__free(j->frb);
	if (j->fskel && j->fskel->bss->follow_dropped)
		warnx_("warning: %llu record(s) of the job's forks, execs and exits were lost (the "
		       "ring buffer was full): processes they name may have run on untraced",
		       (unsigned long long)j->fskel->bss->follow_dropped);
	follow_bpf__destroy(j->fskel);
}
