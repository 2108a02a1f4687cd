/* evmbpf record's side of a job (job.c): the node's Python processes taken as they
 * exec (record.c says which), a flush of the live tails, each tail's share of
 * --max-memory, the traces a full disk kept, and the processes running at the start. */

#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "drivers.h"
#include "dump.h"
#include "dump_print.h"
#include "job_state.h"
#include "procstate.h"
#include "record.h"
#include "session.h"
#include "util.h"

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
		else if (!p && !j->full && j->unreadable && !process_gone(pid))
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
		char path[PATH_MAX];
		if (record_flush_path(p->out, p->flushes + 1, path, sizeof(path)))
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
void node_write_kept(struct job *j, int last)
{
	uint64_t now = mono_ns();
	if (!last && now - j->kept_ns < KEPT_RETRY_NS)
		return;
	j->kept_ns = now;
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

void node_step(struct job *j)
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
int node_start(struct job *j)
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
			if (!j->full && j->unreadable && !process_gone(pids[i]))
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
