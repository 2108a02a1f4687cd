/* --pid: the processes given, attached where they stand (the modules already running
 * are watched for their orphan exits). */
#include "session.h"
#include "phases.h"
#include "drivers.h"
#include "numeric_session.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "hold.h"
#include "job_state.h"
#include "procstate.h"
#include "pyframes.h"
#include "util.h"

/* --pid: the modules running on each thread when the probes went live. A uretprobe arms
 * at a call's entry, so their returns are not seen that way: the BPF side watches their
 * frames instead (struct orphan_list) and says when they are gone, as the exit hooks of
 * a tracer registered at this moment would fire without an entry (`orphan` exits).
 * Read with every thread of the target in a ptrace stop (hold_stop_all), where it is
 * seized: no one else sees that stop. */
void watch_running_modules(struct session *s)
{
	struct target *t = &s->target;
	if (!s->ps || !t->runtime || !s->ps->hold_next)
		return;
	if (hold_stop_all(t->pid))
		debugx("%d did not stop within 500 ms; reading its frames anyway", t->pid);
	uint64_t ts = 0;
	py_threads_first(t, &ts);
	unsigned threads = 0, modules = 0;
	/* pyframes.c's walk (the one the tracebacks and evmbpf dump use): a frame the C
	 * stack owns (3.12+) is passed over, and a code object is one by its type */
	for (int n = 0; ts && n < 1024; n++, ts = py_thread_next(t, ts)) {
		uint64_t frames[64], firsts[64], selves[64], prev = 0;
		unsigned k = 0;
		uint64_t f = py_thread_frame(t, ts);
		for (int depth = 0; f && depth < 256 && k < 64; depth++, f = py_frame_back(t, f)) {
			uint64_t code = py_frame_code(t, f);
			uint64_t first = code ? py_frame_first_local(t, f) : 0;
			if (!code || !trace_is_module_call(&s->trace, code, first))
				continue;
			uint64_t self = trace_first_object(&s->trace, first);
			if (verbose > 1)
				debugx("thread state %#lx: a module call in frame %#lx, self %#lx",
				       (unsigned long)ts, (unsigned long)f, (unsigned long)self);
			if (self == prev) { /* torch 2: _wrapped_call_impl around _call_impl */
				frames[k - 1] = f;
				firsts[k - 1] = first;
				continue;
			}
			frames[k] = f;
			firsts[k] = first;
			selves[k++] = prev = self;
		}
		if (!k)
			continue;
		/* innermost first; deeper than ORPHANS_MAX, the outermost (the model) are kept */
		struct orphan_list l = { .n = k < ORPHANS_MAX ? k : ORPHANS_MAX };
		memcpy(l.frame, frames + (k - l.n), l.n * sizeof(l.frame[0]));
		memcpy(l.first, firsts + (k - l.n), l.n * sizeof(l.first[0]));
		memcpy(l.self, selves + (k - l.n), l.n * sizeof(l.self[0]));
		uint64_t key = ts | s->ps->tag; /* the process's tag (procslot.h) */
		if (!bpf_map__update_elem(s->skel->maps.orphans, &key, sizeof(key), &l, sizeof(l),
					  BPF_ANY)) {
			threads++;
			modules += l.n;
		}
	}
	s->ps->orphans_pending = threads;
	hold_continue(t->pid);
	if (threads)
		debugx("%u modules were running on %u threads at the attach", modules, threads);
}

/* The --pid list, a source of the job: each attached where it stands. Where one cannot
 * be, none is (said): the job does not run. */
static int pids_start(struct job *j)
{
	const struct tracer_opts *o = j->opts;
	for (int i = 0; o->trace.numeric && i < o->npids; i++)
		if (hold_check(o->pids[i]))
			return -1; /* a debugger holds it: said before anything is loaded */
	for (int i = 0; i < o->npids; i++) {
		struct proc *p = proc_start(j, o->pids[i], 0, NULL);
		if (!p) {
			for (int k = 0; k < j->n; k++)
				j->procs[k]->live = 0, proc_abandon(j->procs[k]);
			j->n = 0;
			return -1;
		}
		watch_running_modules(&p->s);
		if (proc_numeric(j, p))
			continue;
		session_announce(&p->s);
	}
	return 0;
}

static int pids_done(const struct job *j)
{
	(void)j;
	return 1; /* they are the job's from its start */
}

const struct job_source source_pids = { .name = "pids", .start = pids_start, .done = pids_done };
