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

#include "closer.h"
#include "cupti_session.h"
#include "elfsym.h"
#include "follow.h"
#include "follow.skel.h"
#include "hold.h"
#include "job_state.h"
#include "node_share.h"
#include "objects.h"
#include "procstate.h"
#include "pyframes.h"
#include "record.h"
#include "session.h"
#include "uprobes.h"
#include "util.h"
#include "watchdog.h"

int pending_slot(struct job *j, pid_t pid, int add)
{
	for (int i = 0; i < PENDING_MAX; i++)
		if (j->follow->pending[i].pid == pid)
			return i;
	for (int i = 0; add && i < PENDING_MAX; i++)
		if (!j->follow->pending[i].pid) {
			j->follow->pending[i].pid = pid;
			return i;
		}
	return -1;
}

/* pid held where it stands (a ptrace stop), its slot of the pending ones filled: attached
 * in the loop (follow_pending_late), at once; -1 when there is no room. */
static int pending_here(struct job *j, pid_t pid, uid_t uid)
{
	int i = pending_slot(j, pid, 1);
	if (i < 0)
		return -1;
	closer_put(j->follow->pending[i].entry);
	j->follow->pending[i].entry = NULL;
	j->follow->pending[i].how = STOP_PTRACE;
	j->follow->pending[i].uid = uid;
	j->follow->pending[i].since_ns = 0;
	return 0;
}

static void pending_drop(struct job *j, pid_t pid)
{
	int i = pending_slot(j, pid, 0);
	if (i < 0)
		return;
	closer_put(j->follow->pending[i].entry); /* off the loop when the recorder's */
	j->follow->pending[i].entry = NULL;
	j->follow->pending[i].pid = 0;
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
	/* a BPF object is being verified (follow_while_loading): no attach now; held where
	 * it stands, attached in the loop */
	if (j->follow->loading && how == STOP_PTRACE && !tid && !pending_here(j, pid, node_proc_uid(pid)))
		return;
	pending_drop(j, pid);
	struct proc *p = NULL;
	if (j->node ? record_wanted(&j->opts->record, j->node->match, pid) : target_is_python(pid)) {
		if (j->follow->execs_only) {
			/* a launched command's Python: an exec of it ends its trace (the
			 * session's), what it runs then is not traced */
			uint32_t key = (uint32_t)pid;
			bpf_map__delete_elem(j->follow->skel->maps.followed, &key, sizeof(key), 0);
			hold_no_execs(pid);
		}
		p = proc_start(j, pid, 0, "exec");
		if (p && j->opts->cupti)
			cupti_attach_trace(&p->s.trace);
		if (p && proc_numeric(j, p))
			p = NULL; /* --numeric could not hold it: said, not traced */
		else if (p)
			session_announce(&p->s);
		else
			j->failed = 1;
		if (!p && j->follow->execs_only) {
			command_untraceable(j, pid);
			return;
		}
	} else {
		debugx("%d is not Python: %s", pid, j->node ? "let go" : "followed, not traced");
	}
	resume(pid, tid, how);
	if (j->node && !p && !live_proc(j, pid)) {
		/* the recorder held it at its exec (follow_node_exec), and does not trace it:
		 * it runs on unseized and unfollowed, as if the recorder had never seen it */
		uint32_t key = (uint32_t)pid;
		bpf_map__delete_elem(j->follow->skel->maps.followed, &key, sizeof(key), 0);
		hold_release(pid, 0);
	}
}

/* pid, stopped at its exec (how: STOP_*; tid its thread there, or 0): held again at
 * its new image's entry point, where its libraries are mapped; or, where that point
 * cannot be probed, looked at now. uid: its user, for the recorder's shares. */
static void hold_to_entry(struct job *j, pid_t pid, pid_t tid, int how, uid_t uid)
{
	char exe[64];
	uint64_t off;
	snprintf(exe, sizeof(exe), "/proc/%d/exe", pid);
	struct elf_file *f = elf_file_open(exe);
	int i = pending_slot(j, pid, 1);
	if (i < 0 || !f || elf_file_vaddr_to_offset(f, elf_file_entry(f), &off) ||
	    !(j->follow->pending[i].entry = attach_uprobe(j->follow->skel->progs.follow_entry, 0, pid, exe,
						   off, "the entry point"))) {
		elf_file_close(f);
		debugx("cannot probe the entry point of %d; looking at it now", pid);
		follow_look(j, pid, tid, how);
		return;
	}
	elf_file_close(f);
	j->follow->pending[i].how = how;
	j->follow->pending[i].uid = uid;
	j->follow->pending[i].since_ns = mono_ns();
	resume(pid, tid, how);
}

/* Is pid's executable named python* (python3.11, python3.13d, ...)? Where the
 * interpreter is in a libpython the loader has not mapped yet, the name is what there
 * is to go by at the exec; a Python under another name is left to the looks. */
static int python_named(pid_t pid)
{
	char exe[64], path[PATH_MAX];
	snprintf(exe, sizeof(exe), "/proc/%d/exe", pid);
	ssize_t n = readlink(exe, path, sizeof(path) - 1);
	if (n <= 0)
		return 0;
	path[n] = 0;
	const char *base = strrchr(path, '/');
	return !strncmp(base ? base + 1 : path, "python", 6);
}

/* Is pid's Python running: its first thread state bound to a thread of its? Then it has
 * run past its entry point (its image relocated, its libraries mapped), and calls no
 * module before its imports. (A static thread state is there before the loader has run:
 * 3.11's main interpreter and first thread state are in _PyRuntime.) */
static int python_started(pid_t pid)
{
	static struct target probe;
	static struct py_tasks tasks;
	memset(&probe, 0, sizeof(probe));
	probe.root_fd = -1;
	uint64_t ts;
	if (target_inspect_quiet(&probe, pid) || py_threads_first(&probe, &ts) || !ts)
		return 0;
	py_tasks_read(&tasks, pid);
	return py_thread_tid(&probe, &tasks, ts) != 0;
}

int follow_node_exec(struct job *j, pid_t pid, uid_t uid)
{
	if (live_proc(j, pid) || pending_slot(j, pid, 0) >= 0) {
		/* a second record of one process (two execs told before the first was read,
		 * `sh -c 'exec python3 ...'`): it is traced, or held, already */
		debugx("%d exec'd again before its first exec was read: held or traced already",
		       pid);
		return 1;
	}
	if (!record_chosen(&j->opts->record, j->node->match, pid) || !python_named(pid))
		return 0;
	int waiting = 0;
	for (int i = 0; i < PENDING_MAX; i++)
		waiting += j->follow->pending[i].pid && j->follow->pending[i].uid == uid;
	if (waiting >= PENDING_MAX / 2) {
		debugx("user %u has %d execs held at once: %d is left to the looks",
		       (unsigned)uid, waiting, pid);
		return 0;
	}
	char why[256];
	if (hold_refusal(pid, why, sizeof(why)) || hold_start(pid, HOLD_CHILDREN | HOLD_EXECS)) {
		debugx("%d cannot be held at its exec (%s): looked at a moment later", pid,
		       hold_refusal(pid, why, sizeof(why)) ? why : hold_error());
		return 0;
	}
	uint32_t key = (uint32_t)pid, v = FOLLOWED;
	bpf_map__update_elem(j->follow->skel->maps.followed, &key, sizeof(key), &v, sizeof(v), BPF_ANY);
	if (hold_stop_all(pid)) {
		bpf_map__delete_elem(j->follow->skel->maps.followed, &key, sizeof(key), 0);
		hold_release(pid, 0);
		debugx("%d did not stop at its exec: looked at a moment later", pid);
		return 0;
	}
	/* where the recorder came late (a burst), the process has run past its entry
	 * point: out of its loader, or into its Python. A probe placed there now would never
	 * fire; it is attached where it stands, held. Its Python is asked first: a process
	 * whose Python has started may be stopped inside a dlopen, in its loader's code */
	int started = python_started(pid), in_loader = started ? 0 : proc_in_loader(pid);
	if (started || !in_loader) {
		/* attached in the loop (follow_pending_late), the ring's other execs held first */
		debugx("%d exec'd %s: held past its entry point, attached there", pid,
		       started ? "a Python" : "what may be a Python, out of its loader");
		if (pending_here(j, pid, uid))
			follow_look(j, pid, 0, STOP_PTRACE);
	} else {
		debugx("%d exec'd what may be a Python: held until its entry point", pid);
		hold_to_entry(j, pid, 0, STOP_PTRACE, uid);
	}
	return 1;
}

void follow_pending_late(struct job *j)
{
	uint64_t start = mono_ns(), now = start;
	for (int i = 0; i < PENDING_MAX && now - start < LOOKS_ROUND_NS; i++, now = mono_ns()) {
		pid_t pid = j->follow->pending[i].pid;
		if (!pid || now - j->follow->pending[i].since_ns < PENDING_LATE_NS)
			continue;
		if (!j->follow->pending[i].entry) { /* held past its entry point, at its exec */
			follow_look(j, pid, 0, STOP_PTRACE);
			continue;
		}
		/* its entry point has not come: it is still in its loader (a busy node), or ran
		 * past that point before the probe was placed (the recorder came late, between
		 * the entry point and its Python's start): once its Python has started, it is
		 * attached where it stands, long before its imports have let it call a module */
		j->follow->pending[i].since_ns = now;
		if (j->follow->pending[i].how != STOP_PTRACE || !python_started(pid) || hold_stop_all(pid))
			continue;
		debugx("%d: past its entry point before it was probed: attached where it stands",
		       pid);
		follow_look(j, pid, 0, STOP_PTRACE);
	}
}

#define FOLLOW_LATER_MAX 4096

/* While a BPF object is verified, a record that waits for the load (its order kept); -1
 * when FOLLOW_LATER_MAX wait already: it stays in the ring, read after the load. */
static int follow_later(struct job *j, const struct follow_rec *r)
{
	struct job_follow *f = j->follow;
	if (f->nlater >= FOLLOW_LATER_MAX && f->head > 0) { /* those done go */
		memmove(f->later, f->later + f->head, (size_t)(f->nlater - f->head) * sizeof(*r));
		f->nlater -= f->head;
		f->head = 0;
	}
	if (f->nlater >= FOLLOW_LATER_MAX)
		return -1;
	if (!f->later)
		f->later = xcalloc(FOLLOW_LATER_MAX, sizeof(*r));
	f->later[f->nlater++] = *r;
	return 0;
}

/* While a BPF object is verified, which records are read now: the node's execs (held as
 * they come: the load is what kept them waiting, a second or more) and the OOM killer's
 * choices; not an exec whose process has a record waiting (its order), nor one that
 * would need an attach now (no room to hold it). The rest waits. */
static int follow_now(struct job *j, const struct follow_rec *r)
{
	if (r->hdr.kind == FOLLOW_OOM)
		return 1;
	if (r->hdr.kind != FOLLOW_NODE_EXEC || pending_count(j) >= PENDING_MAX - 1)
		return 0;
	for (int i = j->follow->head; i < j->follow->nlater; i++)
		if (j->follow->later[i].hdr.pid == r->hdr.pid)
			return 0;
	return 1;
}

/* One record of the follow programs, read out of the ring (on_follow) */
static void follow_record(struct job *j, const struct follow_rec *r)
{
	pid_t pid = (pid_t)r->hdr.pid;
	if (j->follow->unloading) {
		/* evmbpf stops: a process the programs stopped before they went is let go */
		if (r->hdr.kind == FOLLOW_STOPPED || (r->hdr.kind == FOLLOW_FORK &&
						       (r->why & FORK_HELD))) {
			debugx("%d, stopped as evmbpf stops: let go untraced", pid);
			if (r->hdr.kind == FOLLOW_STOPPED)
				resume(pid, (pid_t)r->hdr.tid, r->exit_code);
			else
				resume(pid, 0, STOP_PTRACE);
		}
		return;
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
				       (unsigned)j->follow->skel->rodata->follow_user_max, pid,
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
		if (old && r->why == 2) {
			/* attached already (follow_pending_late): an entry point is no exec, its
			 * trace goes on */
			pending_drop(j, pid);
			resume(pid, (pid_t)r->hdr.tid, how);
			break;
		}
		if (old) { /* a traced process exec'd: its trace ends */
			session_step(&old->s);
			old->s.ended = old->s.execed = 1;
			old->s.exit_code = -1;
			proc_end(j, old);
		}
		if (r->why == 2 || how == STOP_NONE) {
			/* at its entry point; or not stopped, so already past it: looked at now */
			follow_look(j, pid, (pid_t)r->hdr.tid, how);
			break;
		}
		/* exec'd: stop again at the entry point, where its libraries are mapped */
		hold_to_entry(j, pid, (pid_t)r->hdr.tid, how, NODE_NO_UID);
		break;
	}
	case FOLLOW_EXIT:
		pending_drop(j, pid);
		if (pid == j->cmd.pid)
			debugx("the command %d exited", pid);
		break;
	case FOLLOW_NODE_EXEC:
		/* looked at a moment later, when the loader has mapped its libraries */
		if (j->follow->exec_late_us) /* tests only: a recorder come late, as on a busy node */
			usleep(j->follow->exec_late_us);
		uid_t uid = node_proc_uid(pid);
		if (uid == NODE_NO_UID || follow_node_exec(j, pid, uid) ||
		    node_look_refused(j, pid, uid))
			break; /* gone already, held now, or its user's share of the looks is full */
		for (int i = 0; i < LOOKS_MAX; i++)
			if (!j->node->looks[i].pid || j->node->looks[i].pid == pid) {
				j->node->looks[i].uid = uid;
				j->node->looks[i].pid = pid;
				j->node->looks[i].due_ns = mono_ns() + LOOK_AFTER_NS;
				j->node->looks[i].tries = 0;
				return;
			}
		debugx("more than %d execs at once: %d is not looked at", LOOKS_MAX, pid);
		break;
	case FOLLOW_OOM: {
		struct proc *p = live_proc(j, pid);
		if (p)
			trace_set_oom_killed(&p->s.trace);
		if (j->node) /* and by pid: an end read before this record, or a second attach */
			j->node->oom[j->node->noom++ % OOM_KEPT] = pid;
		debugx("the OOM killer chose %d", pid);
		break;
	}
	}
}

/* The ring's records are copied out as they are read and handled after the read (a
 * record's handling may attach a process, which may wait for a BPF object's verifier
 * and read the ring meanwhile: a read inside a read would see its records again).
 * While an object is verified, the node's execs are handled at once (follow_now). 0, or
 * -1: FOLLOW_LATER_MAX wait already, the record stays in the ring. */
static int on_follow(void *ctx, void *data, size_t size)
{
	struct job *j = ctx;
	const struct follow_rec *r = data;
	if (size < sizeof(*r))
		return 0;
	if (j->follow->loading && follow_now(j, r)) {
		follow_record(j, r);
		return 0;
	}
	return follow_later(j, r);
}

/* The records read and not handled yet, in their order; those that come meanwhile (a
 * verifier's wait) after them. */
static void follow_handle(struct job *j)
{
	struct job_follow *f = j->follow;
	if (f->replaying)
		return;
	f->replaying = 1;
	while (f->head < f->nlater) {
		struct follow_rec r = f->later[f->head++];
		follow_record(j, &r);
	}
	f->head = f->nlater = 0;
	f->replaying = 0;
}

/* The ring, to its end (a few reads when more than FOLLOW_LATER_MAX records wait) */
static void follow_drain(struct job *j)
{
	for (int i = 0; i < 64; i++) {
		int n = ring_buffer__consume(j->follow->rb);
		follow_handle(j);
		if (n >= 0 || j->follow->replaying)
			break;
	}
}

void follow_read(struct job *j)
{
	if (j->follow && j->follow->rb)
		follow_drain(j);
}

void follow_while_loading(void *job)
{
	struct job *j = job;
	if (!j->follow || !j->follow->rb || j->follow->loading) {
		usleep(5000);
		return;
	}
	j->follow->loading = 1;
	ring_buffer__poll(j->follow->rb, 5);
	j->follow->loading = 0;
}

int pending_count(const struct job *j)
{
	int n = 0;
	for (int i = 0; j->follow && i < PENDING_MAX; i++)
		n += j->follow->pending[i].pid != 0;
	return n;
}

int follow_load(struct job *j)
{
	j->follow = xcalloc(1, sizeof(*j->follow));
	/* a launched command alone: its execs are followed to its Python, not its forks */
	j->follow->execs_only = !j->node && !j->opts->follow;
	j->follow->skel = follow_bpf__open();
	if (j->follow->skel) {
		j->follow->skel->rodata->follow_node = j->node != NULL;
		j->follow->skel->rodata->tracer_tgid = (uint32_t)getpid();
		const char *most = getenv("EVMBPF_TEST_FOLLOW_USER_MAX"); /* tests only */
		if (most && atoi(most) > 0)
			j->follow->skel->rodata->follow_user_max = (uint32_t)atoi(most);
		const char *late = getenv("EVMBPF_TEST_EXEC_LATE_US"); /* tests only */
		if (late && atoi(late) > 0 && atoi(late) < 1000000)
			j->follow->exec_late_us = (unsigned)atoi(late);
		bpf_program__set_autoload(j->follow->skel->progs.follow_oom, j->node != NULL);
		bpf_program__set_autoload(j->follow->skel->progs.follow_fork, !j->follow->execs_only);
		uprobes_multi_on(j->follow->skel->obj); /* the entry-point probes close fast too */
	}
	if (!j->follow->skel || follow_bpf__load(j->follow->skel)) {
		warnx_("cannot load the BPF programs%s: %s (the kernel needs BTF, BPF ring buffers "
		       "and uprobes; run with -v for details)",
		       j->follow->execs_only ? " that hold the command at its execs" : " of --follow",
		       strerror(errno));
		follow_bpf__destroy(j->follow->skel);
		j->follow->skel = NULL;
		return -1;
	}
	struct follow_bpf *skel = j->follow->skel;
	struct bpf_program *progs[3] = { skel->progs.follow_exec, skel->progs.follow_exit,
					 skel->progs.follow_fork };
	for (int i = 0; i < 3 - j->follow->execs_only; i++) {
		j->follow->links[i] = bpf_program__attach(progs[i]);
		if (!j->follow->links[i]) {
			warnx_("cannot attach --follow's %s: %s", bpf_program__name(progs[i]),
			       strerror(errno));
			return -1;
		}
	}
	j->follow->rb = ring_buffer__new(bpf_map__fd(j->follow->skel->maps.follow_events), on_follow, j, NULL);
	if (!j->follow->rb) {
		warnx_("cannot open the ring buffer: %s", strerror(errno));
		return -1;
	}
	struct epoll_event ev = { .events = EPOLLIN };
	epoll_ctl(j->ep, EPOLL_CTL_ADD, ring_buffer__epoll_fd(j->follow->rb), &ev);
	if (j->node && !(j->follow->links[3] = bpf_program__attach(j->follow->skel->progs.follow_oom)))
		warnx_("warning: the OOM killer's choice cannot be seen (oom:mark_victim: %s): a "
		       "process it kills is said to be killed by SIGKILL", strerror(errno));
	return 0;
}

static void follow_unload(struct job *j)
{
	if (!j->follow)
		return;
	for (int i = 0; i < 4; i++)
		bpf_link__destroy(j->follow->links[i]);
	/* a process held between its exec and its entry point runs on untraced */
	for (int i = 0; i < PENDING_MAX; i++)
		if (j->follow->pending[i].pid) {
			pid_t pid = j->follow->pending[i].pid;
			int how = j->follow->pending[i].how;
			pending_drop(j, pid);
			if (how == STOP_SIGSTOP) /* a ptrace stop ends with the job's release */
				resume(pid, 0, how);
		}
	/* the programs are gone: a stop they made whose record is still in the ring (an
	 * exec, a fork, an entry point just before) would otherwise stand for good */
	if (j->follow->rb) {
		j->follow->unloading = 1;
		follow_handle(j);
		follow_drain(j);
	}
	ring_buffer__free(j->follow->rb);
	session_objects_wait(NULL, NULL);
	free(j->follow->later);
	if (j->follow->skel && j->follow->skel->bss->follow_dropped)
		warnx_("warning: %llu record(s) of the job's forks, execs and exits were lost (the "
		       "ring buffer was full): processes they name may have run on untraced",
		       (unsigned long long)j->follow->skel->bss->follow_dropped);
	follow_bpf__destroy(j->follow->skel);
	free(j->follow);
	j->follow = NULL;
}

/* evmbpf record loads the programs in its own start (node_start), before its first look */
static int follow_start(struct job *j)
{
	return j->follow ? 0 : follow_load(j);
}

static int follow_done(const struct job *j)
{
	return !pending_count(j);
}

const struct job_source source_follow = {
	.name = "follow", .start = follow_start, .done = follow_done, .stop = follow_unload,
};
