/* One process of a job (job.c): its session started with its own trace options and
 * file, and ended (evmbpf record: a trace only for an end that needs one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/stat.h>

#include "follow.h"
#include "follow.skel.h"
#include "job_state.h"
#include "node_share.h"
#include "numeric_session.h"
#include "outpattern.h"
#include "policy.h"
#include "procstate.h"
#include "record.h"
#include "record_who.h"
#include "retention.h"
#include "session.h"
#include "util.h"
#include "watchdog.h"

void proc_free(struct proc *p)
{
	if (p) {
		free(p->who);
		free(p->hung);
	}
	free(p);
}

void proc_abandon(struct proc *p)
{
	session_abandon(&p->s);
	proc_free(p);
}

/* The slot of a process that has ended, for a new one (evmbpf record runs for ever). */
static int free_slot(struct job *j)
{
	for (int i = 0; i < j->n; i++)
		if (!j->procs[i]->live && !j->procs[i]->kept) {
			proc_free(j->procs[i]);
			j->procs[i] = j->procs[--j->n];
			return 1;
		}
	return 0;
}

/* Inspect, open its trace, load and attach; the process stands stopped or is continued
 * by the caller. NULL when it cannot be traced (said in one line). `recorded`: evmbpf
 * record's word for when it attached ("running", "exec", "fork"). */
struct proc *proc_start(struct job *j, pid_t pid, int forked, const char *recorded)
{
	j->room.unreadable = 0;
	j->room.full = j->n == JOB_MAX && !free_slot(j);
	if (j->room.full) {
		/* said once, when the room runs out, and how many went untraced once it is back */
		if (!j->room.untraced++)
			warnx_("more than %d processes at once: %d is not traced, nor any other "
			       "until one ends", JOB_MAX, pid);
		else
			debugx("more than %d processes at once: %d is not traced", JOB_MAX, pid);
		return NULL;
	}
	if (j->room.untraced) {
		warnx_("%d process%s not traced while %d were", j->room.untraced,
		       j->room.untraced == 1 ? " was" : "es were", JOB_MAX);
		j->room.untraced = 0;
	}
	if (live_proc(j, pid)) {
		/* one session a process, whatever path found it: a second would probe it twice */
		warnx_("%d is traced already: not attached a second time", pid);
		return NULL;
	}
	uid_t uid = j->node ? node_proc_uid(pid) : 0;
	if (j->node && node_slot_refused(j, pid, uid))
		return NULL;
	struct proc *p = xcalloc(1, sizeof(*p));
	p->uid = uid;
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
		if (record_path(&j->opts->record, pid, p->rank, p->out, sizeof(p->out))) {
			free(p);
			return NULL;
		}
	} else {
		out_expand(j->opts->out ? j->opts->out : "-", pid, p->rank, p->out, sizeof(p->out));
	}
	p->s.out = p->out;
	if (session_prepare(&p->s, pid)) {
		j->room.unreadable = p->s.unreadable;
		proc_abandon(p);
		return NULL;
	}
	if (p->s.rb) {
		struct epoll_event ev = { .events = EPOLLIN };
		epoll_ctl(j->ep, EPOLL_CTL_ADD, ring_buffer__epoll_fd(p->s.rb), &ev);
	}
	if (j->node)
		p->who = record_who(&p->s.target, uid, p->rank);
	/* a summary line a process at its end; no live line where there may be several (they
	 * would fight over it) */
	status_start(&p->s.status, j->opts->quiet || j->node || p->s.floor, p->out);
	if (!j->one)
		p->s.status.live = 0;
	p->live = 1;
	j->procs[j->n++] = p;
	j->traced++;
	if (j->follow && !j->follow->execs_only) {
		uint32_t v = FOLLOWED | FOLLOWED_PYTHON, key = (uint32_t)pid;
		bpf_map__update_elem(j->follow->skel->maps.followed, &key, sizeof(key), &v, sizeof(v),
				     BPF_ANY);
		/* gone meanwhile: its exit was not followed, so its entry would outlive it, and
		 * the next process given its pid would be stopped at its exec as if followed */
		if (process_gone(pid))
			bpf_map__delete_elem(j->follow->skel->maps.followed, &key, sizeof(key), 0);
	}
	return p;
}

/* evmbpf record: how a process ended, for its line on stderr */
static void end_words(const struct session *s, char *out, size_t cap)
{
	int code = s->exit_code;
	if (trace_nonfinite(&s->trace))
		snprintf(out, cap, "a non-finite output in %s", trace_nonfinite(&s->trace));
	else if (!s->ended || code < 0)
		snprintf(out, cap, "still running");
	else if ((code & 0x7f) && (code & 0x7f) != 0x7f)
		snprintf(out, cap, "killed by signal %d%s", code & 0x7f,
			 trace_oom_killed(&s->trace) ? ", the OOM killer's choice" : "");
	else
		snprintf(out, cap, "exit status %d", (code >> 8) & 0xff);
}

void proc_end(struct job *j, struct proc *p)
{
	if (!p->live)
		return;
	p->live = 0;
	int called = trace_called(&p->s.trace);
	if (!called && p->hung && p->s.ps && p->s.ps->orphans_pending) {
		/* attached while modules ran, and none of them has returned (a hang begun
		 * before the recorder): its file is the mark, with what they were */
		called = 1;
		trace_set_recorded_threads(&p->s.trace, p->hung);
		p->hung = NULL;
	}
	char how[160] = "";
	if (j->node && p->s.ended && oom_chose(j, p->s.target.pid))
		trace_set_oom_killed(&p->s.trace);
	if (p->opts.trace.recorded) {
		/* evmbpf record: a trace only for an end that needs one */
		p->s.discard = !policy_keep(&p->opts.record, p, called);
		end_words(&p->s, how, sizeof(how));
		trace_set_recorded_why(&p->s.trace, how);
		trace_set_recorded_who(&p->s.trace, record_who_end(p->who, p->s.target.torch_version));
		p->who = NULL;
		if (!p->s.discard && called &&
		    node_disk_refused(&p->opts.record, p->s.target.pid, p->uid, p->out))
			p->s.discard = 1; /* its user's traces reached their share of --max-disk */
		/* its room made in DIR first: the oldest files go (said); none: not written */
		else if (!p->s.discard && called &&
			 retention_room(p->opts.record.dir, p->s.target.pid, "trace", p->out,
					trace_tail_bytes(&p->s.trace), 0))
			p->s.discard = 1;
	}
	int rc = session_finish(&p->s);
	watchdog_forget(p->s.target.pid);
	if (rc && rc != TRACE_KEPT)
		j->failed = 1; /* said */
	if (j->one) {
		/* the tracer's one process: its summary line says where its trace went */
		if (p->s.execed && !stop_signal)
			fprintf(stderr, "%d exec'd another program: the trace ends here, the new "
				"program is not traced\n", p->s.target.pid);
		return;
	}
	if (p->s.discard && !called && policy_keep(&p->opts.record, p, 1) &&
	    (p->s.target.torch_version[0] || (p->s.ps && p->s.ps->torch_loaded))) {
		/* an end the policies keep, with torch imported, is never lost without a word */
		warnx_("%d ended (%s) with torch imported and no module call traced: no trace",
		       p->s.target.pid, how);
	} else if (p->s.discard) {
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
		struct stat st;
		if (p->opts.trace.recorded && !stat(p->out, &st))
			node_disk_add(p->uid, (uint64_t)st.st_size);
		fprintf(stderr, "%d: trace in %s (%s)\n", p->s.target.pid, p->out, how);
	} else if (!rc) {
		fprintf(stderr, "%d: trace in %s\n", p->s.target.pid, p->out);
	}
	if (p->s.execed)
		debugx("%d exec'd another program: its trace ends there", p->s.target.pid);
}

/* --numeric: the process's threads held at its probes (hold.c keeps each process's
 * apart); 0, or -1 with the reason said, and the process is then not traced. */
int proc_numeric(struct job *j, struct proc *p)
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
void proc_nonfinite(struct job *j, struct proc *p)
{
	p->live = 0;
	if (j->node) {
		char how[160];
		snprintf(how, sizeof(how), "a non-finite output in %s", trace_nonfinite(&p->s.trace));
		trace_set_recorded_why(&p->s.trace, how);
		/* its room made in DIR first (none: not written, said; the process is stopped) */
		p->s.discard = retention_room(p->opts.record.dir, p->s.target.pid, "trace", p->out,
					      trace_tail_bytes(&p->s.trace), 0) != RETENTION_ROOM;
	}
	if (session_stop_nonfinite(&p->s, 0) == 1)
		j->failed = 1; /* its trace could not be written: said */
	watchdog_forget(p->s.target.pid);
	if (!p->s.discard && !j->one)
		fprintf(stderr, "%d: trace in %s\n", p->s.target.pid, p->out);
	/* evmbpf's own child: waited for, so that it is not left in an orphaned process
	 * group (which the kernel would send SIGHUP) */
	if (!j->nonfinite && j->cmd.pid > 0 && !j->cmd.done)
		fprintf(stderr, "evmbpf waits for %d to end\n", j->cmd.pid);
	j->nonfinite = 1;
}

int oom_chose(struct job *j, pid_t pid)
{
	for (int i = 0; j->node && i < OOM_KEPT && i < j->node->noom; i++)
		if (j->node->oom[i] == pid) {
			j->node->oom[i] = 0; /* told once: the pid may come round */
			return 1;
		}
	return 0;
}

struct proc *live_proc(struct job *j, pid_t pid)
{
	for (int i = 0; i < j->n; i++)
		if (j->procs[i]->live && j->procs[i]->s.target.pid == pid)
			return j->procs[i];
	return NULL;
}
