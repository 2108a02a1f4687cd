/* note_samples' watch (the session side of samples.c): a hardware breakpoint on its
 * first code unit, one per thread, with samples.bpf.h's program on it, armed at the attach
 * or when evalmetry.debug's module body has run. See samples.c and docs/design.md,
 * "Documents in flight".
 *
 * The same module body places the phase markers' probe (markers.bpf.h) when the host had
 * not imported evalmetry.debug at the attach: that probe traps at every `with` and, on
 * 3.11-3.13, at every isinstance() against a class with a metaclass (torch.Tensor's):
 * 0.4-0.6 traps a module call in torch's own code, a µs each on a KVM guest and about ten
 * on a PVM guest, for markers that only evalmetry.debug's code makes. The target is held
 * at the module body's return until the probe is in place, so no `with phase()` can come
 * first; where it cannot be held, or the module body cannot be watched, the probe is
 * placed at the attach as before (docs/design.md, "Where a module call's time goes"). */
#include "samples_watch.h"
#include "closer.h"

#include <errno.h>
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/hw_breakpoint.h>

#include "hwwatch.h"
#include "session_state.h"
#include "uprobes.h"
#include "procstate.h"
#include "util.h"

#define WATCH_MAX 1024

struct samples_watch {
	struct probe *exec[2];         /* PyEval_EvalCode entry and return */
	struct bpf_link *watch[WATCH_MAX]; /* one per thread armed at the start */
	int nwatch;
	uint64_t code;                 /* note_samples' code object */
	int watching;                  /* note_samples is watched (breakpoints fire here) */
	int markers_wait;              /* the markers' probe waits for evalmetry.debug's import */
};

/* The phase markers' probe (markers.bpf.h) where a `with` looks up __enter__: the eval
 * loop's calls to _PyObject_LookupSpecial (3.9-3.13, where found), else the function
 * _PyObject_LookupSpecial[Method]; placed at once, or once the host has imported
 * evalmetry.debug (below). */
static void session_attach_markers(struct session *s)
{
	struct target *t = &s->target;
	struct evmbpf_bpf *skel = s->skel;
	if (!t->gen_type || s->nlinks >= SESSION_LINKS)
		return;
	struct bpf_program *marker =
		t->lookup_special_kind == LOOKUP_STACKREF  ? skel->progs.marker_enter_stackref
		: t->lookup_special_kind == LOOKUP_IDENTIFIER ? skel->progs.marker_enter_ident
							      : skel->progs.marker_enter;
	const char *what = t->lookup_special_kind == LOOKUP_STACKREF
				   ? "_PyObject_LookupSpecialMethod" : "_PyObject_LookupSpecial";
	/* at the eval loop's calls to it, where they are known (target.c), else on it: the
	 * arguments are in their registers at the call as at the function's entry */
	struct probe *l = t->nmarker_sites
		? attach_uprobes(marker, 0, t->pid, t->py_open, t->marker_sites, t->nmarker_sites,
				 "the `with` statement's calls in the eval loop")
		: attach_uprobe(marker, 0, t->pid, t->py_open, t->lookup_special_off, what);
	if (l)
		s->links[s->nlinks++] = l;
}

static int armed_said;

static int watch_thread(struct session *s, pid_t tid, uint64_t addr)
{
	struct samples_watch *w = s->samples;
	if (w->nwatch >= WATCH_MAX)
		return -1;
	/* x86 has no read-only breakpoints: fetches are reads; threads this one starts later
	 * are watched too */
	int fd = hw_watch_open(tid, HW_BREAKPOINT_RW, addr, HW_BREAKPOINT_LEN_1,
			       HW_WATCH_SAMPLE | HW_WATCH_INHERIT);
	if (fd < 0)
		return -1;
	struct bpf_link *l = bpf_program__attach_perf_event(s->skel->progs.samples_watch, fd);
	if (!l) {
		close(fd);
		return -1;
	}
	w->watch[w->nwatch++] = l;
	return 0;
}

/* The watch on note_samples' first code unit, on every thread of the target. */
static void arm(struct session *s, uint64_t globals)
{
	struct samples_watch *w = s->samples;
	const struct target *t = &s->target;
	const struct pyreader *r = &t->reader;
	const struct py_offsets *o = t->off;
	if (!w || w->code || !globals)
		return;
	uint64_t fn = py_dict_get_str(r, globals, "note_samples");
	uint64_t code = fn ? pm_u64(r, fn + o->func_code, NULL) : 0;
	if (!code) {
		debugx("evalmetry.debug has no note_samples: documents are not followed");
		return;
	}
	uint64_t addr;
	if (o->version < 311) {
		/* 3.9/3.10: the code units are co_code's bytes (PyCodeObject.co_code at 48 on
		 * both, after seven ints; PyBytesObject.ob_sval at 32) */
		uint64_t bytes = pm_u64(r, code + 48, NULL);
		char tn[16] = "";
		if (!bytes || py_type_name(r, py_type(r, bytes), tn, sizeof(tn)) || strcmp(tn, "bytes"))
			return;
		addr = bytes + 32;
	} else {
		/* code units start right after the code object's fixed part (co_code_adaptive) */
		uint64_t basic = pm_u64(r, py_type(r, code) + o->tp_basicsize, NULL);
		if (!basic || basic > 512)
			return;
		addr = code + basic;
	}
	/* its debug register, on every thread: the bound-call sites have one slot (two
	 * registers) left of the four */
	s->ps->bound_slots = 1;
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", t->pid);
	DIR *d = opendir(dir);
	int armed = 0, failed = 0, err = 0;
	for (struct dirent *e; d && (e = readdir(d));) {
		pid_t tid = (pid_t)atoi(e->d_name);
		if (tid <= 0)
			continue;
		if (watch_thread(s, tid, addr)) {
			failed++;
			err = errno;
		} else {
			armed++;
		}
	}
	if (d)
		closedir(d);
	if (failed && !armed_said++)
		warnx_("note: note_samples() is not watched on %d of the target's %d threads (%s): "
		       "documents it declares there are not in the trace", failed, failed + armed,
		       strerror(err));
	if (!armed) {
		s->ps->bound_slots = 0;
		return;
	}
	w->code = code;
	s->ps->samples_code = code;
	debugx("note_samples watched at %#lx on %d threads", (unsigned long)addr, armed);
}

/* sys.modules["evalmetry.debug"].__dict__ of the target, 0 when it is not imported */
static uint64_t host_globals(const struct target *t)
{
	const struct pyreader *r = &t->reader;
	uint64_t interp = pm_u64(r, t->runtime + t->off->rt_interp_main, NULL);
	uint64_t modules = interp ? pm_u64(r, interp + t->off->interp_modules, NULL) : 0;
	uint64_t mod = modules ? py_dict_get_str(r, modules, "evalmetry.debug") : 0;
	return mod ? pm_u64(r, mod + 16 /* PyModuleObject.md_dict */, NULL) : 0;
}

void samples_attach(struct session *s)
{
	struct target *t = &s->target;
	int exec = t->eval_code_off && t->runtime;
	int watching = exec && hw_watch_works(); /* else not observable, said once (hwwatch.c) */
	int may_hold = session_may_hold(s);
	/* already imported (--pid) */
	uint64_t globals = exec ? host_globals(t) : 0;
	int markers_wait = t->gen_type && exec && may_hold && !globals;
	if (!markers_wait)
		session_attach_markers(s);
	if (!watching && !markers_wait)
		return;
	struct samples_watch *w = s->samples = xmalloc(sizeof(*w));
	memset(w, 0, sizeof(*w));
	w->watching = watching;
	w->markers_wait = markers_wait;
	s->ps->samples_hold = may_hold;
	w->exec[0] = attach_uprobe(s->skel->progs.host_exec_enter, 0, t->pid, t->py_open,
				   t->eval_code_off, "PyEval_EvalCode");
	w->exec[1] = attach_uprobe(s->skel->progs.host_exec_exit, 1, t->pid, t->py_open,
				   t->eval_code_off, "PyEval_EvalCode (return)");
	if (markers_wait && (!w->exec[0] || !w->exec[1])) {
		w->markers_wait = 0; /* the import cannot be seen: placed now */
		session_attach_markers(s);
	}
	if (watching && globals)
		arm(s, globals);
}

void samples_host_record(struct session *s, const struct rec_samples *r)
{
	struct samples_watch *w = s->samples;
	if (!w)
		return;
	if (w->markers_wait) { /* the target is held: no `with phase()` ran yet */
		w->markers_wait = 0;
		session_attach_markers(s);
		debugx("evalmetry.debug imported: phase markers followed from here");
	}
	if (w->watching)
		arm(s, r->obj);
}

void samples_detach(struct session *s)
{
	struct samples_watch *w = s->samples;
	if (!w)
		return;
	for (int i = 0; i < 2; i++)
		closer_put(w->exec[i]);
	for (int i = 0; i < w->nwatch; i++)
		bpf_link__destroy(w->watch[i]); /* closes the event: its inherited copies go too */
	free(w);
	s->samples = NULL;
}
