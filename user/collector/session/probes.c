/* Loading the BPF programs (the layouts and addresses the target gave them) and placing
 * their probes; taking them away. */
#include "session_state.h"
#include "cudamem_session.h"
#include "cupti_session.h"
#include "objects.h"
#include "probes.h"
#include "uprobes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <bpf/bpf.h>

#include "bound.h"
#include "bound_watch.h"
#include "hwwatch.h"
#include "privileges.h"
#include "samples_watch.h"
#include "procstate.h"
#include "util.h"

int evmbpf_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG && verbose < 2)
		return 0;
	if (level == LIBBPF_INFO && !verbose)
		return 0;
	/* evmbpf says what failed in one line of its own; libbpf's details with -v */
	if (level == LIBBPF_WARN && !verbose)
		return 0;
	return vfprintf(stderr, fmt, args);
}

int session_load(struct session *s)
{
	struct target *t = &s->target;
	s->ring_fd = -1;
	if (s->opts->trace.nrules && !t->runtime) {
		warnx_("--phase rules need the running thread's frames, and %s has no _PyRuntime "
		       "symbol to find them from; use the host's phase() markers", t->py_path);
		return -1;
	}
	if (session_slot_open(s))
		return -1;
	struct evmbpf_bpf *skel = s->skel;
	struct proc_state *ps = s->ps;
	ps->cfg.none_obj = t->none_obj;
	ps->cfg.bool_type = t->bool_type;
	ps->cfg.float_type = t->float_type;
	ps->cfg.object_type = t->object_type;
	ps->cfg.tgid = t->pid;
	ps->cfg.gen_type = t->gen_type;
	ps->cfg.gen_frame_state = t->gen_frame_state;
	ps->cfg.gen_iframe = t->gen_iframe;
	ps->cfg.gen_state_created = t->gen_state_created;
	ps->cfg.rules = s->opts->trace.nrules > 0;
	/* the running thread's frames: --phase rules, and the model when attached mid-forward */
	ps->cfg.runtime = t->runtime;
	ps->hold_next = session_may_hold(s);
	ps->hold_codes = ps->hold_next && s->opts->trace.nrules;
	ps->bound_hold = ps->hold_next;
	/* a bound call's return is seen by hardware watchpoints alone: where they do not
	 * fire, an entry would have no exit, so none is followed (hwwatch.c says so once) */
	ps->bound_off = !hw_watch_works() || bound_jit(t);
	/* live before the first probe: a call seen entering is a call of this process */
	if (session_slot_live(s))
		return -1;
	struct bpf_link *l;
	l = attach_uprobe(skel->progs.call_enter, 0, t->pid, t->py_open, t->slot_tp_call_off,
			  "slot_tp_call");
	if (!l)
		return -1;
	s->links[s->nlinks++] = l;
	l = attach_uprobe(skel->progs.call_exit, 1, t->pid, t->py_open, t->slot_tp_call_off,
			  "slot_tp_call (return)");
	if (!l)
		return -1;
	s->links[s->nlinks++] = l;
	if (t->err_display_off) {
		l = attach_uprobe(skel->progs.exc_display, 0, t->pid, t->py_open, t->err_display_off,
				  "PyErr_Display");
		if (l)
			s->links[s->nlinks++] = l;
	}
	if (!t->gen_type)
		debugx("phase markers are not followed on Python %d.%d", t->major, t->minor);
	samples_attach(s); /* and the phase markers' probe, now or at evalmetry.debug's import */
	return 0;
}

/* In the order they were attached: the entry probe goes first, so that no call is seen
 * to enter whose return can no longer be seen (its frame is `unwound` at the end). */
void session_detach(struct session *s)
{
	for (int i = 0; i < s->nlinks; i++)
		bpf_link__destroy(s->links[i]);
	s->nlinks = 0;
	cudamem_session_detach(s);
	bound_detach(s->target.pid); /* after the entry probe that finds bound calls */
	samples_detach(s);
}

/* --probe-floor: empty programs where call_enter/call_exit go (or the entry's alone, or
 * one at an address of the interpreter); no trace. */
int session_load_floor(struct session *s)
{
	struct target *t = &s->target;
	uint64_t at = t->slot_tp_call_off;
	if (s->opts->probe_floor == FLOOR_AT &&
	    target_file_offset(t, s->opts->probe_floor_at, &at)) {
		warnx_("--probe-floor=at:%#llx: not an address of code in %s in process %d",
		       (unsigned long long)s->opts->probe_floor_at, t->py_path, t->pid);
		return -1;
	}
	s->floor = floor_bpf__open_and_load();
	if (!s->floor) {
		warnx_("cannot load the BPF programs: %s", strerror(errno));
		return -1;
	}
	struct bpf_link *l;
	l = attach_uprobe(s->floor->progs.floor_enter, 0, t->pid, t->py_open, at,
			  s->opts->probe_floor == FLOOR_AT ? "--probe-floor=at:" : "slot_tp_call");
	if (!l)
		return -1;
	s->links[s->nlinks++] = l;
	if (s->opts->probe_floor != FLOOR_PAIR)
		return 0;
	l = attach_uprobe(s->floor->progs.floor_exit, 1, t->pid, t->py_open,
			  t->slot_tp_call_off, "slot_tp_call (return)");
	if (!l)
		return -1;
	s->links[s->nlinks++] = l;
	return 0;
}
