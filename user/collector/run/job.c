/* Several processes at once: every --pid given, and with --follow every Python process
 * the command (or a --pid target) starts, at any depth; for evmbpf record, every Python
 * process of the node (record.c says which, where their traces go, and which ends need
 * one; node.c is the recorder's side of the loop). Each process has its own session
 * (its own programs, filled with its own addresses, its own ring buffer and trace file),
 * so that its trace is exactly what a trace of it alone would be; one loop reads them all
 * (one epoll over every ring buffer). bpf/follow.bpf.c tells it of new processes and holds
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
#include "follow.h"
#include "follow.skel.h"
#include "hold.h"
#include "procstate.h"
#include "job_state.h"
#include "objects.h"
#include "pyre.h"
#include "record.h"
#include "session.h"
#include "util.h"
#include "watchdog.h"

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
		hold_pump(); /* the seized processes' stops, births and exits */
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
				/* what the node told of it before its exit (the OOM killer's choice)
				 * is read before its trace is written */
				if (j->frb)
					ring_buffer__consume(j->frb);
				proc_end(p);
			}
		}
		if (j->child > 0 && !j->child_done) {
			int status;
			if ((hold_leader_exit(j->child, &status) ||
			     (!hold_active(j->child) &&
			      waitpid(j->child, &status, WNOHANG) == j->child)) &&
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
		closer_start(); /* an ended process's links close off the loop */
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
		/* seized before it runs: what it starts is seized at its birth, and every stop
		 * of theirs is a ptrace stop no parent sees (su's, sudo's, a shell's) */
		int seized = !hold_start(j.child, HOLD_CHILDREN | HOLD_EXECS);
		if (!seized)
			warnx_("warning: %s: the command's stops are SIGSTOPs, and what it starts is "
			       "traced unheld", hold_error());
		uint32_t v = FOLLOWED | (seized ? 0 : FOLLOWED_OWN), key = (uint32_t)j.child;
		bpf_map__update_elem(j.fskel->maps.followed, &key, sizeof(key), &v, sizeof(v),
				     BPF_ANY);
		if (!seized && !watchdog_start(j.child))
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
		struct proc *p = j.procs[i];
		int live = p->live;
		proc_end(p); /* what its ring holds first: an exit there ends it */
		detached += live && !p->s.ended && !process_gone(p->s.target.pid);
	}
	hold_release_all(); /* every process followed runs on, untraced */
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
	hold_release_all();
	if (j.node) {
		record_pidfile_remove();
		pyre_free(j.match);
	}
	for (int i = 0; i < j.n; i++)
		proc_free(j.procs[i]);
	free(j.kept);
	closer_wait(); /* no probe is left when evmbpf exits */
	session_objects_release();
	close(j.ep);
	return rc;
}
