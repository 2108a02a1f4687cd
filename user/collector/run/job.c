/* Every run of the tracer is a job: one loop over its processes' ring buffers (one epoll
 * over them all), fed by its sources (job_state.h): the --pid list, a launched command,
 * the processes these start (--follow), every Python process of the node (evmbpf record:
 * record.c says which, where their traces go, and which ends need one; node.c is the
 * recorder's side). Each process has its own session (its own programs, filled with its
 * own addresses, its own ring buffer and trace file), so that its trace is exactly what a
 * trace of it alone would be. bpf/follow.bpf.c tells the job of new processes and holds
 * them until their probes are placed. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "closer.h"
#include "drivers.h"
#include "hold.h"
#include "procstate.h"
#include "job_state.h"
#include "objects.h"
#include "session.h"
#include "util.h"

/* ---- the loop ---- */

static int live_count(const struct job *j)
{
	int n = 0;
	for (int i = 0; i < j->n; i++)
		n += j->procs[i]->live;
	return n;
}

/* Every source done: nothing more will come (the recorder's node never is). */
static int sources_done(const struct job *j)
{
	for (int i = 0; i < j->nsources; i++)
		if (!j->sources[i]->done || !j->sources[i]->done(j))
			return 0;
	return 1;
}

static void job_loop(struct job *j)
{
	struct epoll_event evs[16];
	while (!stop_signal) {
		epoll_wait(j->ep, evs, 16, 100);
		follow_read(j);
		hold_pump(); /* the seized processes' stops, births and exits */
		for (int i = 0; i < j->nsources; i++)
			if (j->sources[i]->step)
				j->sources[i]->step(j);
		for (int i = 0; i < j->n; i++) {
			struct proc *p = j->procs[i];
			if (!p->live)
				continue;
			if (session_step(&p->s)) {
				j->failed = 1;
				proc_end(j, p);
			} else if (trace_nonfinite(&p->s.trace)) {
				proc_nonfinite(j, p);
			} else if (p->s.ended) {
				/* what the node told of it before its exit (the OOM killer's choice)
				 * is read before its trace is written */
				follow_read(j);
				proc_end(j, p);
			}
		}
		if (sources_done(j) && !live_count(j)) {
			follow_read(j); /* a last birth or exec, told just now */
			if (sources_done(j) && !live_count(j))
				break;
		}
	}
}

/* The sources the options name, in the order they start. */
static void job_sources(struct job *j)
{
	const struct tracer_opts *o = j->opts;
	if (o->mode == TRACE_NODE) {
		j->sources[j->nsources++] = &source_node; /* it loads the follow programs */
		j->sources[j->nsources++] = &source_follow;
		return;
	}
	if (o->follow || o->command)
		j->sources[j->nsources++] = &source_follow;
	j->sources[j->nsources++] = o->command ? &source_command : &source_pids;
}

/* What the job returns: the command's status where there is one. */
static int job_status(const struct job *j)
{
	if (j->node || stop_signal)
		return 0; /* stopped (SIGTERM, SIGINT): what it had to write is written */
	if (j->failed)
		return 1;
	if (j->nonfinite)
		return 3;
	return j->cmd.pid > 0 ? exit_code_of(j->cmd.status) : 0;
}

int run_job(const struct tracer_opts *opts)
{
	struct job j = { .opts = opts, .ep = epoll_create1(EPOLL_CLOEXEC) };
	int rc = 1, started = 0;
	if (j.ep < 0) {
		warnx_("epoll_create1: %s", strerror(errno));
		return 1;
	}
	j.one = !opts->follow && opts->mode != TRACE_NODE && (opts->command || opts->npids <= 1);
	job_sources(&j);
	for (; started < j.nsources; started++)
		if (j.sources[started]->start && j.sources[started]->start(&j)) {
			started++; /* what it started before it failed is let go too */
			goto out;
		}
	job_loop(&j);
	for (int i = j.nsources; i-- > 0;)
		if (j.sources[i]->stop)
			j.sources[i]->stop(&j);
	int detached = 0;
	pid_t last = 0;
	for (int i = 0; i < j.n; i++) {
		struct proc *p = j.procs[i];
		int live = p->live && !p->s.ended && !process_gone(p->s.target.pid);
		/* gone before the loop read its end: read now (its exit record, else the BPF
		 * side's status), so that its end is kept as it asks, not taken for a detach */
		if (p->live && !p->s.ended && !live)
			session_step(&p->s);
		proc_end(&j, p); /* what its ring holds first: an exit there ends it */
		if (live)
			detached++, last = p->s.target.pid;
	}
	hold_release_all(); /* every process followed runs on, untraced */
	for (int i = j.nsources; i-- > 0;)
		if (j.sources[i]->end)
			j.sources[i]->end(&j);
	if (stop_signal && detached == 1)
		fprintf(stderr, "detached from %d; it runs on\n", last);
	else if (stop_signal && detached)
		fprintf(stderr, "detached from %d processes; they run on\n", detached);
	rc = job_status(&j);
	started = 0; /* each has stopped and ended */
out:
	for (int i = started; i-- > 0;)
		if (j.sources[i]->stop)
			j.sources[i]->stop(&j);
	hold_release_all();
	for (int i = started; i-- > 0;)
		if (j.sources[i]->end)
			j.sources[i]->end(&j);
	for (int i = 0; i < j.n; i++)
		proc_free(j.procs[i]);
	closer_wait(); /* no probe is left when evmbpf exits */
	session_objects_release();
	close(j.ep);
	return rc;
}
