/* Loading the BPF programs (the layouts and addresses the target gave them) and placing
 * their probes; taking them away. */
#include "session_state.h"
#include "cudamem_session.h"
#include "cupti_session.h"
#include "objects.h"
#include "probes.h"
#include "uprobes.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <bpf/bpf.h>

#include "bound.h"
#include "hold.h"
#include "ldso.h"
#include "bound_watch.h"
#include "closer.h"
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

/* The call probes: slot_tp_call's entry and return (every module call), PyErr_Display,
 * and the phase markers' and documents' (samples_watch.c). 0, or -1 said. */
static int place_calls(struct session *s)
{
	struct target *t = &s->target;
	struct evmbpf_bpf *skel = s->skel;
	struct probe *l;
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

/* evmbpf record: a Python that has not mapped torch yet gets no call probe (every
 * __call__ of a Python class would trap, in every Python of the node: +2 us a call);
 * the dynamic loader's _dl_debug_state() is probed instead, and the dlopen that maps
 * libc10.so holds its thread (before any of torch's code runs, so before any module
 * call) while the call probes go in (session_torch_loaded). Only where the thread may be
 * held: elsewhere the call probes go in now. EVMBPF_NO_DEFER=1 places them now too (to
 * measure what the wait saves). 1: deferred; 0: place them now. */
static int defer_calls(struct session *s)
{
	struct target *t = &s->target;
	static char open_path[PATH_MAX];
	char name[PATH_MAX];
	uint64_t off, r_debug, start;
	const char *no = getenv("EVMBPF_NO_DEFER");
	if (s->opts->mode != TRACE_NODE || !session_may_hold(s) || (no && *no == '1'))
		return 0;
	if (maps_find_object(t->pid, "libc10.so", name, open_path, sizeof(open_path), &start) != 0)
		return 0; /* torch is there already (or the maps cannot be read) */
	if (ldso_debug_find(t->pid, open_path, sizeof(open_path), &off, &r_debug))
		return 0;
	__atomic_store_n(&s->ps->torch_ld_debug, r_debug, __ATOMIC_RELEASE);
	s->torch_link = attach_uprobe(s->skel->progs.torch_dlopen_probe, 0, t->pid, open_path, off,
				      "_dl_debug_state");
	if (!s->torch_link) {
		s->ps->torch_ld_debug = 0;
		return 0;
	}
	/* mapped between the look above and the probe: placed now */
	if (maps_find_object(t->pid, "libc10.so", name, open_path, sizeof(open_path), &start) == 1) {
		s->ps->torch_ld_debug = 0;
		closer_put(s->torch_link);
		s->torch_link = NULL;
		return 0;
	}
	debugx("%d: no torch mapped yet: its call probes wait for libc10.so", t->pid);
	return 1;
}

int session_torch_loaded(struct session *s, const struct rec_loaded *r)
{
	int held = r && (r->flags & REC_F_PTRACE) && !hold_wait((pid_t)r->hdr.tid);
	int rc = 0;
	if (s->torch_link) {
		s->ps->torch_ld_debug = 0;
		closer_put(s->torch_link);
		s->torch_link = NULL;
		rc = place_calls(s);
		if (rc)
			warnx_("%d mapped torch, and its call probes could not be placed: it is not "
			       "traced", s->target.pid);
		else
			debugx("%d mapped torch: its call probes are placed%s", s->target.pid,
			       held ? ", its thread held at the dlopen" : r ? "" : " (its record was lost)");
	}
	if (held)
		hold_continue_thread((pid_t)r->hdr.tid);
	return rc;
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
	ps->first_call = 1;
	ps->hold_next = session_may_hold(s);
	ps->hold_codes = ps->hold_next && s->opts->trace.nrules;
	ps->bound_hold = ps->hold_next;
	/* a bound call's return is seen by hardware watchpoints alone: where they do not
	 * fire, an entry would have no exit, so none is followed (hwwatch.c says so once) */
	ps->bound_off = !hw_watch_works() || bound_jit(t);
	/* live before the first probe: a call seen entering is a call of this process */
	if (session_slot_live(s))
		return -1;
	if (defer_calls(s))
		return 0;
	return place_calls(s);
}

/* In the order they were attached: the entry probe goes first, so that no call is seen
 * to enter whose return can no longer be seen (its frame is `unwound` at the end). */
void session_detach(struct session *s)
{
	/* evmbpf record: the programs stop seeing the process first, so the links may close
	 * in any order, off the loop (closer.c) */
	if (closer_on())
		session_slot_hide(s);
	probe_close_test_kill();
	closer_put(s->torch_link);
	s->torch_link = NULL;
	for (int i = 0; i < s->nlinks; i++)
		closer_put(s->links[i]);
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
	s->floor = floor_bpf__open();
	if (s->floor)
		uprobes_multi_on(s->floor->obj); /* the probes as the tracer's are */
	if (s->floor && floor_bpf__load(s->floor)) {
		floor_bpf__destroy(s->floor);
		s->floor = NULL;
	}
	if (!s->floor) {
		warnx_("cannot load the BPF programs: %s", strerror(errno));
		return -1;
	}
	struct probe *l;
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
