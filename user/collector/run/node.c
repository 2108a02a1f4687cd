/* evmbpf record's side of a job (job.c): the node's Python processes taken as they
 * exec (record.c says which), a flush of the live tails, each tail's share of
 * --max-memory, the traces a full disk kept, and the processes running at the start. */

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "closer.h"
#include "drivers.h"
#include "dump.h"
#include "dump_print.h"
#include "job_state.h"
#include "node_share.h"
#include "objects.h"
#include "policy.h"
#include "procstate.h"
#include "pyre.h"
#include "record.h"
#include "retention.h"
#include "session.h"
#include "trace.h"
#include "util.h"

/* The node's execs whose moment has come: a Python that record.c takes is traced. */
/* Look at an exec again in 500 ms, unless it has been put off `most` times: 1 put off. */
static int look_again(struct job *j, int i, uint64_t now, int most)
{
	if (j->node->looks[i].tries >= most)
		return 0;
	j->node->looks[i].tries++;
	j->node->looks[i].due_ns = now + 500ull * 1000000ull;
	return 1;
}

/* The exec waiting in looks[i], looked at now: traced, put off, or dropped. */
static void node_look(struct job *j, int i, uint64_t now)
{
	pid_t pid = j->node->looks[i].pid;
	if (live_proc(j, pid) || pending_slot(j, pid, 0) >= 0) {
		j->node->looks[i].pid = 0;
		return; /* already traced (a traced process's exec is --follow's) */
	}
	/* stopped (another tracer holds it at its exec, before the loader has relocated
	 * its image, or its user stopped it): looked at again later, at most a minute,
	 * not judged now (an image not yet relocated is no Python evmbpf can read) */
	char stat[64];
	snprintf(stat, sizeof(stat), "/proc/%d/stat", pid);
	char state = stat_state(stat);
	if ((state == 'T' || state == 't') && look_again(j, i, now, 120))
		return;
	if (!record_wanted(&j->opts->record, j->node->match, pid)) {
		j->node->looks[i].pid = 0;
		return;
	}
	if (record_exe_refused(pid)) {
		j->node->looks[i].pid = 0;
		debugx("%d: its Python could not be traced before: skipped", pid);
		return;
	}
	/* not readable yet (still in the loader: its image not relocated, its libpython
	 * not mapped): looked at again in a moment, at most ten seconds, before its
	 * attach says why and its executable is named as one evmbpf cannot read */
	static struct target probe;
	memset(&probe, 0, sizeof(probe));
	probe.root_fd = -1;
	if (target_inspect_quiet(&probe, pid) && !process_gone(pid) &&
	    look_again(j, i, now, 20))
		return;
	j->node->looks[i].pid = 0;
	if (process_gone(pid)) {
		/* ended within a moment of its exec (`python3 -c ...`, no torch): said with -v;
		 * one that waited for a busy recorder: said, its death not lost without a word */
		uint64_t late_ns = now > j->node->looks[i].due_ns ? now - j->node->looks[i].due_ns : 0;
		if (j->node->looks[i].tries || late_ns > 1000000000ull)
			warnx_("%d ended before the recorder attached to it (it waited %.1f s for a "
			       "busy recorder): nothing recorded", pid, (double)late_ns / 1e9);
		else
			debugx("%d ended before the recorder looked at it", pid);
		return;
	}
	debugx("%d exec'd a Python %s ago: looked at (state %c)", pid,
	       j->node->looks[i].tries ? "a while" : "a moment", state ? state : '?');
	struct proc *p = proc_start(j, pid, 0, "exec");
	if (p && !proc_numeric(j, p))
		session_announce(&p->s);
	else if (!p && !j->room.full && j->room.unreadable && !process_gone(pid))
		record_exe_refuse(pid); /* said once; its like skipped from now on */
}

/* The execs whose moment has come, user by user (the one served longest ago first), for
 * at most LOOKS_ROUND_NS of the loop: a stream of one user's processes cannot keep
 * another's from being looked at, nor the rings from being read. */
static void node_looks(struct job *j)
{
	uint64_t start = mono_ns(), now = start;
	int i;
	while (now - start < LOOKS_ROUND_NS && (i = node_next_look(j, now)) >= 0) {
		uid_t uid = j->node->looks[i].uid;
		node_look(j, i, now);
		node_served(uid);
		now = mono_ns();
	}
}

/* What each thread of the process runs now, as `evmbpf dump --json` has it (read while
 * it runs on, as dump does where it may not stop the process: until two reads agree),
 * into out without its newline; 0, or -1 (not read: out left empty). */
static int threads_now(struct session *s, struct buf *out)
{
	struct dump_snapshot snap = {0};
	struct dump_result res = { .how = "running" };
	uint64_t t0 = mono_ns();
	int unread = dump_read_running(&s->target, &snap, &res.reads, &res.consistent);
	res.read_ms = (double)(mono_ns() - t0) / 1e6;
	if (!unread) {
		dump_json(&s->target, &snap, &res, out);
		while (out->len && out->data[out->len - 1] == '\n')
			out->data[--out->len] = 0;
	}
	dump_snapshot_free(&snap);
	return unread ? -1 : 0;
}

/* Attached while modules ran (a hang begun before the recorder): what each thread ran,
 * kept for the file of a death before any of them returns (proc_end). */
static void node_running_at_attach(struct proc *p)
{
	struct buf threads = {0};
	if (!p->s.ps || !p->s.ps->orphans_pending || threads_now(&p->s, &threads))
		return;
	free(p->hung);
	p->hung = threads.data; /* the proc takes it */
	p->attached_ns = mono_ns();
}

/* The live tail of p written now, the mark's why `why` (NULL: a flush's): its path in
 * path; 0 written, 1 nothing to write (no event, no thread dump: said with -v), -1 not
 * (no room: said). */
static int flush_one(struct job *j, struct proc *p, const char *why, char *path, size_t cap)
{
	pid_t pid = p->s.target.pid;
	if (record_flush_path(p->out, p->flushes + 1, path, cap))
		return -1;
	session_step(&p->s); /* what the ring buffer holds first */
	session_take_deferred(&p->s, 1); /* and a leaf call's enter the probes kept back */
	struct buf threads = {0};
	threads_now(&p->s, &threads);
	/* its room made first, when there is a file to write (said when there is none) */
	if ((trace_events(&p->s.trace) || threads.data) &&
	    retention_room(j->opts->record.dir, pid, "live tail", path,
			   trace_tail_bytes(&p->s.trace) + threads.len, 0)) {
		buf_free(&threads);
		return -1;
	}
	int rc = trace_snapshot(&p->s.trace, path, threads.data, why);
	buf_free(&threads);
	if (!rc)
		p->flushes++;
	else if (rc > 0)
		debugx("%d: no event yet: no live tail to write", pid);
	return rc;
}

/* SIGUSR1, or evmbpf record --flush: the live tails written now. */
static void node_flush(struct job *j, pid_t asked)
{
	int written = 0;
	for (int i = 0; i < j->n; i++) {
		struct proc *p = j->procs[i];
		pid_t pid = p->s.target.pid;
		char path[PATH_MAX];
		if (!p->live || (asked > 0 && pid != asked))
			continue;
		if (!flush_one(j, p, NULL, path, sizeof(path))) {
			written++;
			fprintf(stderr, "%d: live tail in %s\n", pid, path);
		}
	}
	if (asked > 0 && !live_proc(j, asked))
		warnx_("flush: %d is not traced by this recorder", asked);
	else if (!written)
		fprintf(stderr, "flush: no live tail had an event to write\n");
}

/* The policies' watches (policy.c: --hang-after), once a second: a live tail written
 * for each process one of them names, the process running on. */
static void node_watch(struct job *j)
{
	static uint64_t last;
	uint64_t now = mono_ns();
	if (now - last < 1000000000ull)
		return;
	last = now;
	for (int i = 0; i < j->n; i++) {
		struct proc *p = j->procs[i];
		char why[256], path[PATH_MAX];
		if (p->live && policy_watch(&j->opts->record, p, now, why, sizeof(why)) &&
		    !flush_one(j, p, why, path, sizeof(path)))
			fprintf(stderr, "%d: %s: live tail in %s\n", p->s.target.pid, why, path);
	}
}

/* Each live process's share of --max-memory, set again as they come and go (node_shares:
 * split between the users first): its module tree's bytes count in it, its tail has the
 * rest. */
static void node_bound(struct job *j)
{
	uint64_t now = mono_ns();
	if (now - j->node->bound_ns < 1000000000ull)
		return;
	j->node->bound_ns = now;
	uint64_t kept = 0; /* the traces a full disk kept take their part first */
	for (int i = 0; i < j->node->nkept; i++)
		kept += j->node->kept[i].len;
	uint64_t max = j->opts->record.max_memory;
	node_shares(j, max > 2 * kept ? max - kept : max / 2);
	for (int i = 0; i < j->n; i++) {
		struct proc *p = j->procs[i];
		if (!p->live)
			continue;
		size_t model = trace_model_bytes(&p->s.trace), floor = 64u << 10;
		size_t tail = p->share > model + floor ? p->share - model : floor;
		if (trace_tail_bound(&p->s.trace, tail))
			warnx_("%d: its tail reached its share of --max-memory (%zu bytes, %zu of "
			       "them its module tree's; user %u's processes share %u's part): the "
			       "oldest events go first, counted as dropped", p->s.target.pid,
			       p->share, model, (unsigned)p->uid, (unsigned)p->uid);
	}
}

/* An ended process whose trace a full disk kept: its file's bytes wait in j->node->kept, the
 * process's slot and everything else are freed. */
static void node_keep(struct job *j, struct proc *p)
{
	struct kept_trace k = { .pid = p->s.target.pid, .uid = p->uid };
	if (!p->kept || trace_take_kept(&p->s.trace, &k.data, &k.len))
		return;
	p->kept = 0;
	snprintf(k.path, sizeof(k.path), "%s", p->out);
	snprintf(k.how, sizeof(k.how), "%s", p->how);
	k.due_ns = mono_ns() + KEPT_RETRY_NS;
	j->node->kept = xrealloc(j->node->kept, (size_t)(j->node->nkept + 1) * sizeof(*j->node->kept));
	j->node->kept[j->node->nkept++] = k;
}

/* The traces a full disk kept: tried again, each at its time (2 s, doubled at each try
 * up to 64 s; a try is a statvfs while the file system lacks room for it); `last`: the
 * recorder stops, what still cannot be written is lost (said). */
static void node_write_kept(struct job *j, int last)
{
	uint64_t now = mono_ns();
	for (int i = 0; i < j->n; i++)
		if (!j->procs[i]->live)
			node_keep(j, j->procs[i]);
	for (int i = 0; i < j->node->nkept;) {
		struct kept_trace *k = &j->node->kept[i];
		if (!last && now < k->due_ns) {
			i++;
			continue;
		}
		/* its room made first: none under --keep-free is as a full disk (it waits; with -v
		 * only, said at the last try); none under --max-dir-size never comes (lost, said) */
		int room = retention_room(j->opts->record.dir, k->pid, "trace", k->path, k->len,
					  !last);
		int rc = room == RETENTION_OVER_FREE ? TRACE_KEPT : room ? -1
			: trace_write_kept(k->path, k->data, k->len);
		if (room == RETENTION_OVER_DIR)
			warnx_("%d: its trace is lost: %s (%zu bytes) alone passes --max-dir-size",
			       k->pid, k->path, k->len);
		if (rc == TRACE_KEPT && !last) {
			uint64_t wait = KEPT_RETRY_NS << (k->tries < 5 ? ++k->tries : 5);
			k->due_ns = now + (wait < KEPT_RETRY_MAX_NS ? wait : KEPT_RETRY_MAX_NS);
			i++;
			continue;
		}
		if (!rc) {
			node_disk_add(k->uid, k->len);
			fprintf(stderr, "%d: trace in %s (%s), written once there was room\n", k->pid,
				k->path, k->how[0] ? k->how : "-");
		} else if (rc == TRACE_KEPT) {
			warnx_("%d: its trace is lost: %s still cannot be written (the disk is full, "
			       "or --keep-free leaves no room)", k->pid, k->path);
		}
		free(k->data);
		j->node->kept[i] = j->node->kept[--j->node->nkept];
	}
}

static void node_step(struct job *j)
{
	/* the recorder runs for ever: what an ended process left goes now */
	for (int i = 0; i < j->n;)
		if (!j->procs[i]->live) {
			node_keep(j, j->procs[i]);
			proc_free(j->procs[i]);
			j->procs[i] = j->procs[--j->n];
		} else {
			i++;
		}
	node_write_kept(j, 0);
	follow_pending_late(j);
	node_watch(j);
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
	j->node = xcalloc(1, sizeof(*j->node));
	/* the recorder runs for ever, its processes come and go: the next process of a
	 * Python build finds that build's object loaded, verified once */
	session_objects_keep(1);
	closer_start(); /* an ended process's links close off the loop */
	if (record_match_compile(o, &j->node->match) || record_pidfile_write() ||
	    retention_start(o->dir))
		return -1;
	record_flush_catch();
	record_fd_limit();
	if (follow_load(j))
		return -1;
	/* a new Python build's verifier (a second or more) runs off the loop: the node's
	 * execs meanwhile are held as they come, not once it is done */
	session_objects_wait(follow_while_loading, j);
	pid_t pids[JOB_MAX];
	int n = record_scan(o, j->node->match, pids, JOB_MAX), traced = 0;
	for (int i = 0; i < n; i++) {
		if (record_exe_refused(pids[i]))
			continue;
		struct proc *p = proc_start(j, pids[i], 0, "running");
		if (!p) {
			if (!j->room.full && j->room.unreadable && !process_gone(pids[i]))
				record_exe_refuse(pids[i]);
			continue;
		}
		watch_running_modules(&p->s);
		node_running_at_attach(p);
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

/* The recorder stops: the traces a full disk kept are tried a last time. */
static void node_end(struct job *j)
{
	if (!j->node)
		return;
	node_write_kept(j, 1);
	record_pidfile_remove();
	pyre_free(j->node->match);
	for (int i = 0; i < j->node->nkept; i++)
		free(j->node->kept[i].data);
	free(j->node->kept);
	free(j->node);
	j->node = NULL;
}

const struct job_source source_node = {
	.name = "node", .start = node_start, .step = node_step, .end = node_end,
};
