/* Several processes at once: every --pid given, and with --follow every Python process
 * the command (or a --pid target) starts, at any depth. Each process has its own session
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
#include <unistd.h>

#include "elfsym.h"
#include "outpattern.h"
#include "follow.h"
#include "follow.skel.h"
#include "hold.h"
#include "procstate.h"
#include "util.h"
#include "watchdog.h"

#define JOB_MAX 256
#define PENDING_MAX 64

struct proc {
	struct session s;
	char out[PATH_MAX];
	int forked;  /* forked without exec: its trace is kept only if it called modules */
	int live;
};

struct job {
	const struct tracer_opts *opts;
	struct proc *procs[JOB_MAX];
	int n, traced, failed;
	int nonfinite;     /* --stop-on-nonfinite stopped one of them: exit status 3 */
	int ep;
	struct follow_bpf *fskel;
	struct ring_buffer *frb;
	struct bpf_link *flinks[3];
	struct {
		pid_t pid;
		struct bpf_link *entry; /* its entry point's probe, between exec and entry */
	} pending[PENDING_MAX];
	pid_t child;       /* launch mode: the command */
	int child_status, child_done;
};

/* ---- one process ---- */

static void proc_abandon(struct proc *p)
{
	session_abandon(&p->s);
	free(p);
}

/* Inspect, open its trace, load and attach; the process stands stopped or is continued
 * by the caller. NULL when it cannot be traced (said in one line). */
static struct proc *proc_start(struct job *j, pid_t pid, int forked)
{
	if (j->n == JOB_MAX) {
		warnx_("more than %d processes: %d is not traced", JOB_MAX, pid);
		return NULL;
	}
	struct proc *p = xcalloc(1, sizeof(*p));
	p->s.opts = j->opts;
	p->s.target.root_fd = -1;
	p->forked = forked;
	int ppid;
	char rank[16];
	proc_identity(pid, &ppid, rank);
	out_expand(j->opts->out ? j->opts->out : "-", pid, rank, p->out, sizeof(p->out));
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
	status_start(&p->s.status, j->opts->quiet, p->out);
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

static void proc_end(struct proc *p)
{
	if (!p->live)
		return;
	p->live = 0;
	int called = p->s.trace.call_id > 0;
	int rc = session_finish(&p->s);
	watchdog_forget(p->s.target.pid);
	if ((p->forked || p->s.execed) && !called && strcmp(p->out, "-")) {
		unlink(p->out); /* a worker, or a program that exec'd, that called no module */
		debugx("%d called no module: no trace", p->s.target.pid);
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
	if (target_is_python(pid)) {
		struct proc *p = proc_start(j, pid, 0);
		if (p)
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
		struct proc *p = proc_start(j, pid, 1);
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
	}
	return 0;
}

static int follow_load(struct job *j)
{
	j->fskel = follow_bpf__open_and_load();
	if (!j->fskel) {
		warnx_("cannot load the BPF programs of --follow: %s (run with -v for details)",
		       strerror(errno));
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
	return 0;
}

static void follow_unload(struct job *j)
{
	for (int i = 0; i < 3; i++)
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
	struct job j = { .opts = opts, .ep = epoll_create1(EPOLL_CLOEXEC) };
	int go_fd = -1, rc = 1;
	if (j.ep < 0) {
		warnx_("epoll_create1: %s", strerror(errno));
		return 1;
	}
	if (opts->follow && follow_load(&j))
		goto out;
	if (opts->command) {
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
			struct proc *p = proc_start(&j, opts->pids[i], 0);
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
	} else {
		rc = j.failed ? 1 : j.nonfinite ? 3 : 0;
	}
out:
	if (j.fskel)
		follow_unload(&j);
	for (int i = 0; i < j.n; i++)
		free(j.procs[i]);
	close(j.ep);
	return rc;
}
