/* Several processes at once: every --pid given, and with --follow every Python process
 * the command (or a --pid target) starts, at any depth; for evmbpf record, every Python
 * process of the node (record.c says which, where their traces go, and which ends need
 * one). Each process has its own session
 * (its own programs, filled with its own addresses, its own ring buffer and trace file),
 * so that its trace is exactly what a trace of it alone would be; one loop reads them all
 * (one epoll over every ring buffer). bpf/follow.bpf.c tells it of new processes and holds
 * them until their probes are placed. */
#include "session.h"
#include "drivers.h"
#include "numeric_session.h"
#include "uprobes.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dump.h"
#include "dump_print.h"
#include "elfsym.h"
#include "outpattern.h"
#include "follow.h"
#include "follow.skel.h"
#include "hold.h"
#include "objects.h"
#include "procstate.h"
#include "pyre.h"
#include "record.h"
#include "util.h"
#include "watchdog.h"

#define JOB_MAX 256
#define PENDING_MAX 64
#define LOOKS_MAX 256
/* evmbpf record: how long after its exec a process is looked at (its libraries mapped) */
#define LOOK_AFTER_NS (100ull * 1000000ull)
/* evmbpf record: how often a trace kept by a full disk is tried again */
#define KEPT_RETRY_NS (2000ull * 1000000ull)

struct proc {
	struct session s;
	char out[PATH_MAX];
	int forked;  /* forked without exec: its trace is kept only if it called modules */
	int live;
	struct tracer_opts opts;   /* evmbpf record: the job's, with this trace's own */
	char rank[16];
	int flushes;               /* evmbpf record: live tails written on request */
	int kept;                  /* evmbpf record: its trace waits for room on the disk */
	char how[160];             /* evmbpf record: how it ended, for the kept trace's line */
};

struct job {
	const struct tracer_opts *opts;
	struct proc *procs[JOB_MAX];
	int n, traced, failed;
	int nonfinite;     /* --stop-on-nonfinite stopped one of them: exit status 3 */
	int ep;
	struct follow_bpf *fskel;
	struct ring_buffer *frb;
	struct bpf_link *flinks[4];
	struct {
		pid_t pid;
		struct bpf_link *entry; /* its entry point's probe, between exec and entry */
	} pending[PENDING_MAX];
	pid_t child;       /* launch mode: the command */
	int child_status, child_done;
	/* evmbpf record: the node's execs, looked at LOOK_AFTER_NS later */
	int node;
	struct pyre *match;
	struct {
		pid_t pid;
		uint64_t due_ns;
		int tries;   /* looks put off: the process stood stopped */
	} looks[LOOKS_MAX];
	uint64_t bound_ns;  /* when the tails' shares of --max-memory were last set */
	int full;           /* the last proc_start found no room */
	int untraced;       /* processes not traced for want of room since the last said */
};


/* ---- one process ---- */

static void proc_abandon(struct proc *p)
{
	session_abandon(&p->s);
	free(p);
}

/* The slot of a process that has ended, for a new one (evmbpf record runs for ever). */
static int free_slot(struct job *j)
{
	for (int i = 0; i < j->n; i++)
		if (!j->procs[i]->live && !j->procs[i]->kept) {
			free(j->procs[i]);
			j->procs[i] = j->procs[--j->n];
			return 1;
		}
	return 0;
}

/* Inspect, open its trace, load and attach; the process stands stopped or is continued
 * by the caller. NULL when it cannot be traced (said in one line). `recorded`: evmbpf
 * record's word for when it attached ("running", "exec", "fork"). */
static struct proc *proc_start(struct job *j, pid_t pid, int forked, const char *recorded)
{
	j->full = j->n == JOB_MAX && !free_slot(j);
	if (j->full) {
		/* said once, when the room runs out, and how many went untraced once it is back */
		if (!j->untraced++)
			warnx_("more than %d processes at once: %d is not traced, nor any other "
			       "until one ends", JOB_MAX, pid);
		else
			debugx("more than %d processes at once: %d is not traced", JOB_MAX, pid);
		return NULL;
	}
	if (j->untraced) {
		warnx_("%d process%s not traced while %d were", j->untraced,
		       j->untraced == 1 ? " was" : "es were", JOB_MAX);
		j->untraced = 0;
	}
	struct proc *p = xcalloc(1, sizeof(*p));
	p->s.opts = j->opts;
	p->s.target.root_fd = -1;
	p->forked = forked;
	int ppid;
	proc_identity(pid, &ppid, p->rank);
	if (j->node) {
		/* its own trace options: the file made only when it is written */
		p->opts = *j->opts;
		p->opts.trace.deferred_file = 1;
		p->opts.trace.recorded = recorded;
		p->s.opts = &p->opts;
		if (record_path(&j->opts->record, pid, p->rank, "", p->out, sizeof(p->out))) {
			free(p);
			return NULL;
		}
	} else {
		out_expand(j->opts->out ? j->opts->out : "-", pid, p->rank, p->out, sizeof(p->out));
	}
	p->s.out = p->out;
	if (session_prepare(&p->s, pid)) {
		proc_abandon(p);
		return NULL;
	}
	if (p->s.rb) {
		struct epoll_event ev = { .events = EPOLLIN };
		epoll_ctl(j->ep, EPOLL_CTL_ADD, ring_buffer__epoll_fd(p->s.rb), &ev);
	}
	/* a summary line a process at its end; no live line (several would fight over it) */
	status_start(&p->s.status, j->opts->quiet || j->node, p->out);
	p->s.status.live = 0;
	p->live = 1;
	j->procs[j->n++] = p;
	j->traced++;
	if (j->fskel) {
		uint32_t v = FOLLOWED | FOLLOWED_PYTHON, key = (uint32_t)pid;
		bpf_map__update_elem(j->fskel->maps.followed, &key, sizeof(key), &v, sizeof(v),
				     BPF_ANY);
	}
	return p;
}

/* evmbpf record: how a process ended, for its line on stderr */
static void end_words(const struct session *s, char *out, size_t cap)
{
	int code = s->exit_code;
	if (s->trace.nonfinite)
		snprintf(out, cap, "a non-finite output in %s", s->trace.nonfinite);
	else if (!s->ended || code < 0)
		snprintf(out, cap, "still running");
	else if ((code & 0x7f) && (code & 0x7f) != 0x7f)
		snprintf(out, cap, "killed by signal %d%s", code & 0x7f,
			 s->trace.oom_killed ? ", the OOM killer's choice" : "");
	else
		snprintf(out, cap, "exit status %d", (code >> 8) & 0xff);
}

static void proc_end(struct proc *p)
{
	if (!p->live)
		return;
	p->live = 0;
	int called = p->s.trace.call_id > 0;
	char how[160] = "";
	if (p->opts.trace.recorded) {
		/* evmbpf record: a trace only for an end that needs one */
		p->s.discard = !record_keep(&p->opts.record, p->s.ended, p->s.exit_code,
					    p->s.trace.nonfinite != NULL, called);
		end_words(&p->s, how, sizeof(how));
		snprintf(p->s.trace.recorded_why, sizeof(p->s.trace.recorded_why), "%s", how);
	}
	int rc = session_finish(&p->s);
	watchdog_forget(p->s.target.pid);
	if (p->s.discard) {
		debugx("%d ended (%s): no trace needed", p->s.target.pid, how[0] ? how : "-");
	} else if ((p->forked || p->s.execed) && !called && strcmp(p->out, "-")) {
		unlink(p->out); /* a worker, or a program that exec'd, that called no module */
		debugx("%d called no module: no trace", p->s.target.pid);
	} else if (rc == TRACE_KEPT) {
		p->kept = 1;
		snprintf(p->how, sizeof(p->how), "%s", how);
		fprintf(stderr, "%d: its trace (%s) is kept in memory, %zu bytes, and written to %s "
			"once there is room\n", p->s.target.pid, how[0] ? how : "-",
			trace_tail_bytes(&p->s.trace), p->out);
	} else if (!rc && how[0]) {
		fprintf(stderr, "%d: trace in %s (%s)\n", p->s.target.pid, p->out, how);
	} else if (!rc) {
		fprintf(stderr, "%d: trace in %s\n", p->s.target.pid, p->out);
	}
	if (p->s.execed)
		debugx("%d exec'd another program: its trace ends there", p->s.target.pid);
}

/* --numeric: the process's threads held at its probes (hold.c keeps each process's
 * apart); 0, or -1 with the reason said, and the process is then not traced. */
static int proc_numeric(struct job *j, struct proc *p)
{
	if (!j->opts->trace.numeric || !session_numeric_start(&p->s))
		return 0;
	p->live = 0;
	session_finish(&p->s);
	if (strcmp(p->out, "-"))
		unlink(p->out);
	j->failed = 1;
	return -1;
}

/* --stop-on-nonfinite: this process's trace ends at its culprit, the process stopped */
static void proc_nonfinite(struct job *j, struct proc *p)
{
	p->live = 0;
	if (j->node)
		snprintf(p->s.trace.recorded_why, sizeof(p->s.trace.recorded_why),
			 "a non-finite output in %s", p->s.trace.nonfinite);
	session_stop_nonfinite(&p->s, 0);
	watchdog_forget(p->s.target.pid);
	fprintf(stderr, "%d: trace in %s\n", p->s.target.pid, p->out);
	j->nonfinite = 1;
}

static struct proc *live_proc(struct job *j, pid_t pid)
{
	for (int i = 0; i < j->n; i++)
		if (j->procs[i]->live && j->procs[i]->s.target.pid == pid)
			return j->procs[i];
	return NULL;
}

/* ---- --follow ---- */

static int pending_slot(struct job *j, pid_t pid, int add)
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

static void resume(pid_t pid)
{
	kill(pid, SIGCONT);
	watchdog_hold(pid, 0);
}

/* A followed process at its new image's entry point (or exec'd, where that point could
 * not be probed): a Python gets its session, anything else runs on, still followed. */
static void follow_look(struct job *j, pid_t pid)
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
	resume(pid);
}

static int on_follow(void *ctx, void *data, size_t size)
{
	struct job *j = ctx;
	const struct follow_rec *r = data;
	if (size < sizeof(*r))
		return 0;
	pid_t pid = (pid_t)r->hdr.pid;
	switch (r->hdr.kind) {
	case FOLLOW_FORK:
		debugx("%d forked %d%s", (int)r->hdr.tid, pid, r->why ? " (held for its probes)" : "");
		if (!r->why)
			break;
		watchdog_start(pid);
		watchdog_hold(pid, 1);
		/* the fork of a traced Python: the same interpreter at the same addresses */
		struct proc *p = proc_start(j, pid, 1, "fork");
		if (p)
			debugx("tracing %d, forked by %d", pid, (int)r->hdr.tid);
		resume(pid);
		break;
	case FOLLOW_STOPPED: {
		watchdog_start(pid);
		watchdog_hold(pid, 1);
		struct proc *old = live_proc(j, pid);
		if (old) { /* a traced process exec'd: its trace ends */
			session_step(&old->s, 0, 0);
			old->s.ended = old->s.execed = 1;
			old->s.exit_code = -1;
			proc_end(old);
		}
		if (r->why == 2) {
			follow_look(j, pid);
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
			follow_look(j, pid);
			break;
		}
		elf_file_close(f);
		resume(pid);
		break;
	}
	case FOLLOW_EXIT:
		pending_drop(j, pid);
		if (pid == j->child)
			debugx("the command %d exited", pid);
		break;
	case FOLLOW_NODE_EXEC:
		/* looked at a moment later, when the loader has mapped its libraries */
		for (int i = 0; i < LOOKS_MAX; i++)
			if (!j->looks[i].pid || j->looks[i].pid == pid) {
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

static int follow_load(struct job *j)
{
	j->fskel = follow_bpf__open();
	if (j->fskel) {
		j->fskel->rodata->follow_node = j->node;
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

static void follow_unload(struct job *j)
{
	for (int i = 0; i < 4; i++)
		bpf_link__destroy(j->flinks[i]);
	/* a process held between its exec and its entry point runs on untraced */
	for (int i = 0; i < PENDING_MAX; i++)
		if (j->pending[i].pid) {
			pid_t pid = j->pending[i].pid;
			pending_drop(j, pid);
			resume(pid);
		}
	ring_buffer__free(j->frb);
	if (j->fskel && j->fskel->bss->follow_dropped)
		warnx_("warning: %llu record(s) of the job's forks, execs and exits were lost (the "
		       "ring buffer was full): processes they name may have run on untraced",
		       (unsigned long long)j->fskel->bss->follow_dropped);
	follow_bpf__destroy(j->fskel);
}

/* ---- evmbpf record ---- */

/* The node's execs whose moment has come: a Python that record.c takes is traced. */
/* Look at an exec again in 500 ms, unless it has been put off `most` times: 1 put off. */
static int look_again(struct job *j, int i, uint64_t now, int most)
{
	if (j->looks[i].tries >= most)
		return 0;
	j->looks[i].tries++;
	j->looks[i].due_ns = now + 500ull * 1000000ull;
	return 1;
}

static void node_looks(struct job *j)
{
	uint64_t now = mono_ns();
	for (int i = 0; i < LOOKS_MAX; i++) {
		pid_t pid = j->looks[i].pid;
		if (!pid || j->looks[i].due_ns > now)
			continue;
		if (live_proc(j, pid) || pending_slot(j, pid, 0) >= 0) {
			j->looks[i].pid = 0;
			continue; /* already traced (a traced process's exec is --follow's) */
		}
		/* stopped (another tracer holds it at its exec, before the loader has relocated
		 * its image, or its user stopped it): looked at again later, at most a minute,
		 * not judged now (an image not yet relocated is no Python evmbpf can read) */
		char stat[64];
		snprintf(stat, sizeof(stat), "/proc/%d/stat", pid);
		char state = stat_state(stat);
		if ((state == 'T' || state == 't') && look_again(j, i, now, 120))
			continue;
		if (!record_wanted(&j->opts->record, j->match, pid)) {
			j->looks[i].pid = 0;
			continue;
		}
		if (record_exe_refused(pid)) {
			j->looks[i].pid = 0;
			debugx("%d: its Python could not be traced before: skipped", pid);
			continue;
		}
		/* not readable yet (still in the loader: its image not relocated, its libpython
		 * not mapped): looked at again in a moment, at most ten seconds, before its
		 * attach says why and its executable is named as one evmbpf cannot read */
		static struct target probe;
		memset(&probe, 0, sizeof(probe));
		probe.root_fd = -1;
		if (target_inspect_quiet(&probe, pid) && !process_gone(pid) &&
		    look_again(j, i, now, 20))
			continue;
		j->looks[i].pid = 0;
		debugx("%d exec'd a Python %s ago: looked at (state %c)", pid,
		       j->looks[i].tries ? "a while" : "a moment", state ? state : '?');
		struct proc *p = proc_start(j, pid, 0, "exec");
		if (p && !proc_numeric(j, p))
			session_announce(&p->s);
		else if (!p && !j->full && !process_gone(pid))
			record_exe_refuse(pid); /* said once; its like skipped from now on */
	}
}

/* SIGUSR1, or evmbpf record --flush: the live tails written now. */
static void node_flush(struct job *j, pid_t asked)
{
	int written = 0;
	for (int i = 0; i < j->n; i++) {
		struct proc *p = j->procs[i];
		pid_t pid = p->s.target.pid;
		if (!p->live || (asked > 0 && pid != asked))
			continue;
		char path[PATH_MAX], suffix[32];
		snprintf(suffix, sizeof(suffix), ".flush-%d", p->flushes + 1);
		if (record_path(&j->opts->record, pid, p->rank, suffix, path, sizeof(path)))
			continue;
		session_step(&p->s, 0, 0); /* what the ring buffer holds first */
		/* what each thread runs now, read while it runs on (as evmbpf dump does where it
		 * may not stop the process): until two reads agree */
		struct dump_snapshot snap = {0};
		struct dump_result res = { .how = "running" };
		struct buf threads = {0};
		uint64_t t0 = mono_ns();
		int unread = dump_read_running(&p->s.target, &snap, &res.reads, &res.consistent);
		res.read_ms = (double)(mono_ns() - t0) / 1e6;
		if (!unread) {
			dump_json(&p->s.target, &snap, &res, &threads);
			while (threads.len && threads.data[threads.len - 1] == '\n')
				threads.data[--threads.len] = 0;
		}
		dump_snapshot_free(&snap);
		int rc = trace_snapshot(&p->s.trace, path, threads.data);
		buf_free(&threads);
		if (!rc) {
			p->flushes++;
			written++;
			fprintf(stderr, "%d: live tail in %s\n", pid, path);
		} else if (rc > 0) {
			debugx("%d: no event yet: no live tail to write", pid);
		}
	}
	if (asked > 0 && !live_proc(j, asked))
		warnx_("flush: %d is not traced by this recorder", asked);
	else if (!written)
		fprintf(stderr, "flush: no live tail had an event to write\n");
}

/* Each live process's share of --max-memory for its tail, set again as they come and go. */
static void node_bound(struct job *j)
{
	uint64_t now = mono_ns();
	if (now - j->bound_ns < 1000000000ull)
		return;
	j->bound_ns = now;
	int live = 0;
	uint64_t kept = 0; /* the tails a full disk kept take their part first */
	for (int i = 0; i < j->n; i++) {
		live += j->procs[i]->live;
		if (j->procs[i]->kept)
			kept += trace_tail_bytes(&j->procs[i]->s.trace);
	}
	if (!live)
		return;
	uint64_t max = j->opts->record.max_memory;
	size_t share = (size_t)((max > 2 * kept ? max - kept : max / 2) / (uint64_t)live);
	for (int i = 0; i < j->n; i++) {
		struct proc *p = j->procs[i];
		if (p->live && trace_tail_bound(&p->s.trace, share))
			warnx_("%d: its tail reached its share of --max-memory (%zu bytes, %d processes "
			       "live): the oldest events go first, counted as dropped",
			       p->s.target.pid, share, live);
	}
}

/* The traces a full disk kept: tried again every few seconds; `last`: the recorder
 * stops, what still cannot be written is lost (said). */
static void node_write_kept(struct job *j, int last)
{
	static uint64_t tried_ns;
	uint64_t now = mono_ns();
	if (!last && now - tried_ns < KEPT_RETRY_NS)
		return;
	tried_ns = now;
	for (int i = 0; i < j->n; i++) {
		struct proc *p = j->procs[i];
		if (!p->kept)
			continue;
		int rc = session_write_kept(&p->s);
		if (rc == TRACE_KEPT && !last)
			continue;
		p->kept = 0;
		if (!rc)
			fprintf(stderr, "%d: trace in %s (%s), written once there was room\n",
				p->s.target.pid, p->out, p->how[0] ? p->how : "-");
		else if (rc == TRACE_KEPT)
			warnx_("%d: its trace is lost: %s still cannot be written (the disk is full)",
			       p->s.target.pid, p->out), session_drop_kept(&p->s);
	}
}

static void node_step(struct job *j)
{
	/* the recorder runs for ever: what an ended process left goes now */
	for (int i = 0; i < j->n;)
		if (!j->procs[i]->live && !j->procs[i]->kept) {
			free(j->procs[i]);
			j->procs[i] = j->procs[--j->n];
		} else {
			i++;
		}
	node_write_kept(j, 0);
	node_looks(j);
	pid_t asked = record_flush_asked();
	if (asked)
		node_flush(j, asked);
	node_bound(j);
}

/* The Python processes running at the start: traced from now on. */
static int node_start(struct job *j)
{
	const struct record_opts *o = &j->opts->record;
	if (record_match_compile(o, &j->match) || record_pidfile_write())
		return -1;
	record_flush_catch();
	record_fd_limit();
	if (follow_load(j))
		return -1;
	pid_t pids[JOB_MAX];
	int n = record_scan(o, j->match, pids, JOB_MAX), traced = 0;
	for (int i = 0; i < n; i++) {
		if (record_exe_refused(pids[i]))
			continue;
		struct proc *p = proc_start(j, pids[i], 0, "running");
		if (!p) {
			if (!j->full && !process_gone(pids[i]))
				record_exe_refuse(pids[i]);
			continue;
		}
		watch_running_modules(&p->s);
		if (proc_numeric(j, p))
			continue;
		session_announce(&p->s);
		traced++;
	}
	j->failed = 0; /* a process that cannot be traced is said, and the recorder goes on */
	fprintf(stderr, "recording: %d Python process%s running (traced from now on), and every "
		"new one; the traces of those that end badly go to %s\n", traced,
		traced == 1 ? "" : "es", o->dir);
	return 0;
}

/* ---- the loop ---- */

static int live_count(struct job *j)
{
	int n = 0;
	for (int i = 0; i < j->n; i++)
		n += j->procs[i]->live;
	return n;
}

static int pending_count(struct job *j)
{
	int n = 0;
	for (int i = 0; i < PENDING_MAX; i++)
		n += j->pending[i].pid != 0;
	return n;
}

static void job_loop(struct job *j)
{
	struct epoll_event evs[16];
	while (!stop_signal) {
		epoll_wait(j->ep, evs, 16, 100);
		if (j->frb)
			ring_buffer__consume(j->frb);
		if (j->node)
			node_step(j);
		for (int i = 0; i < j->n; i++) {
			struct proc *p = j->procs[i];
			if (!p->live)
				continue;
			if (session_step(&p->s, 0, 0)) {
				j->failed = 1;
				proc_end(p);
			} else if (p->s.trace.nonfinite) {
				proc_nonfinite(j, p);
			} else if (p->s.ended) {
				proc_end(p);
			}
		}
		if (j->child > 0 && !j->child_done) {
			int status;
			if ((hold_leader_exit(j->child, &status) ||
			     waitpid(j->child, &status, WNOHANG) == j->child) &&
			    (WIFEXITED(status) || WIFSIGNALED(status))) {
				j->child_done = 1;
				j->child_status = status;
			}
		}
		if (j->node)
			continue; /* the recorder runs until it is stopped */
		if ((j->child <= 0 || j->child_done) && !live_count(j) && !pending_count(j)) {
			if (j->frb)
				ring_buffer__consume(j->frb);
			if (!live_count(j) && !pending_count(j))
				break;
		}
	}
}

int run_job(const struct tracer_opts *opts)
{
	struct job j = { .opts = opts, .ep = epoll_create1(EPOLL_CLOEXEC),
			 .node = opts->mode == TRACE_NODE };
	int go_fd = -1, rc = 1;
	if (j.ep < 0) {
		warnx_("epoll_create1: %s", strerror(errno));
		return 1;
	}
	if (j.node) {
		/* the recorder runs for ever, its processes come and go: the next process of a
		 * Python build finds that build's object loaded, verified once */
		session_objects_keep(1);
		if (node_start(&j))
			goto out;
	} else if (opts->follow && follow_load(&j)) {
		goto out;
	}
	if (j.node) {
		/* the processes come from the node (node_start, node_looks) */
	} else if (opts->command) {
		j.child = spawn_held(opts->command, &go_fd);
		if (j.child < 0) {
			warnx_("cannot start %s: %s", opts->command[0], strerror(errno));
			goto out;
		}
		uint32_t v = FOLLOWED, key = (uint32_t)j.child;
		bpf_map__update_elem(j.fskel->maps.followed, &key, sizeof(key), &v, sizeof(v),
				     BPF_ANY);
		if (!watchdog_start(j.child))
			watchdog_hold(j.child, 1);
		if (write(go_fd, "g", 1) != 1) {
			warnx_("cannot start %s", opts->command[0]);
			goto out;
		}
		close(go_fd);
	} else {
		for (int i = 0; i < opts->npids; i++) {
			struct proc *p = proc_start(&j, opts->pids[i], 0, NULL);
			if (!p) {
				for (int k = 0; k < j.n; k++)
					j.procs[k]->live = 0, proc_abandon(j.procs[k]);
				j.n = 0;
				goto out;
			}
			watch_running_modules(&p->s);
			if (proc_numeric(&j, p))
				continue;
			session_announce(&p->s);
		}
	}
	job_loop(&j);
	if (j.fskel)
		follow_unload(&j), j.fskel = NULL;
	int detached = 0;
	for (int i = 0; i < j.n; i++) {
		detached += j.procs[i]->live;
		proc_end(j.procs[i]);
	}
	if (j.node)
		node_write_kept(&j, 1);
	if (stop_signal && detached)
		fprintf(stderr, "detached from %d process%s; they run on\n", detached,
			detached > 1 ? "es" : "");
	if (opts->command) {
		if (!j.child_done && hold_leader_exit(j.child, &j.child_status))
			j.child_done = 1;
		if (!j.child_done && !stop_signal) {
			if (j.nonfinite)
				fprintf(stderr, "evmbpf waits for %d to end\n", j.child);
			while (waitpid(j.child, &j.child_status, 0) < 0 && errno == EINTR && !stop_signal)
				;
			j.child_done = !stop_signal;
		}
		if (!j.traced && j.child_done)
			warnx_("%s exited (status %d) and started no Python; nothing traced",
			       opts->command[0], exit_code_of(j.child_status));
		rc = stop_signal ? 0 : j.failed ? 1 : j.nonfinite ? 3 : exit_code_of(j.child_status);
	} else if (j.node) {
		rc = 0; /* stopped (SIGTERM, SIGINT): what it had to write is written */
	} else {
		rc = j.failed ? 1 : j.nonfinite ? 3 : 0;
	}
out:
	if (j.fskel)
		follow_unload(&j);
	if (j.node) {
		record_pidfile_remove();
		pyre_free(j.match);
	}
	for (int i = 0; i < j.n; i++)
		free(j.procs[i]);
	session_objects_release();
	close(j.ep);
	return rc;
}
