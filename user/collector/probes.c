/* Loading the BPF programs (the layouts and addresses the target gave them) and placing
 * their probes; taking them away. */
#include "session.h"
#include "uprobes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <bpf/bpf.h>

#include "bound.h"
#include "hwwatch.h"
#include "privileges.h"
#include "samples.h"
#include "procstate.h"
#include "util.h"
#include "watchdog.h"

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

/* Known TensorImpl layouts (DESIGN.md); the BPF side picks per tensor the one whose
 * pointer back to the Python object matches, user space checks sizes against numel. */
const struct tensor_layout tensor_layouts[TENSOR_LAYOUTS] = {
	/* torch 1.13 (2.0 - 2.2 likely) */
	{ .impl_off = 24, .backptr_off = 64, .sizes_off = 72, .numel_off = 168,
	  .dtype_off = 176, .device_off = 178, .device_order = 0, .storage_off = 24,
	  .sdata_off = 24 },
	/* torch 2.3 - 2.6 */
	{ .impl_off = 24, .backptr_off = 56, .sizes_off = 64, .numel_off = 160,
	  .dtype_off = 168, .device_off = 170, .device_order = 1, .storage_off = 16,
	  .sdata_off = 16 },
	/* torch 2.13 / 2.14 */
	{ .impl_off = 16, .backptr_off = 48, .sizes_off = 56, .numel_off = 152,
	  .dtype_off = 160, .device_off = 162, .device_order = 1, .storage_off = 16,
	  .sdata_off = 16 },
	/* torch 1.7 (Debian bullseye): SmallVector sizes_, TypeMeta a TypeMetaData*, measured
	 * on a [3, 4, 7] float16 view with storage offset 7; storage_ at +24 and the
	 * StorageImpl's DataPtr at +24 (its Device at +48, size_bytes_ at +56), measured
	 * from tensor._cdata on a float32 slice */
	{ .impl_off = 16, .backptr_off = 56, .sizes_off = 64, .numel_off = 200,
	  .dtype_off = 208, .device_off = 216, .device_order = 2, .sizes_kind = 1,
	  .dtype_kind = 1, .storage_off = 24, .sdata_off = 24 },
};

/* --numeric: tensors spanning at most this many bytes are read by the probe itself
 * (bpf/tensor_bytes.bpf.h), one staging entry per CPU; EVMBPF_NUMERIC_PROBE_BYTES
 * lowers it (0: every tensor read from a held thread; the benchmark compares both). */
static void numeric_probe_setup(struct evmbpf_bpf *skel, int numeric)
{
	unsigned max = numeric ? TENSOR_BYTES_MAX : 0;
	const char *env = getenv("EVMBPF_NUMERIC_PROBE_BYTES");
	if (numeric && env && *env) {
		unsigned long v = strtoul(env, NULL, 10);
		max = v < TENSOR_BYTES_MAX ? (unsigned)v : TENSOR_BYTES_MAX;
	}
	skel->rodata->tensor_bytes_max = max;
	int cpus = libbpf_num_possible_cpus();
	bpf_map__set_max_entries(skel->maps.tensor_bytes_map, max && cpus > 0 ? (uint32_t)cpus : 1);
}

/* -v: the instructions the verifier went through for each program loaded (call_enter's
 * against its limit of 1M), and their sum: most of the attach's CPU time. */
static void verified_report(struct bpf_object *obj)
{
	char line[1024];
	int len = 0;
	unsigned long total = 0;
	struct bpf_program *p;
	bpf_object__for_each_program(p, obj) {
		struct bpf_prog_info info = {0};
		uint32_t ilen = sizeof(info);
		int fd = bpf_program__fd(p);
		if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &ilen))
			continue;
		if (!strcmp(bpf_program__name(p), "call_enter"))
			debugx("call_enter: %u instructions verified", info.verified_insns);
		total += info.verified_insns;
		if (len < (int)sizeof(line))
			len += snprintf(line + len, sizeof(line) - len, " %s %u", bpf_program__name(p),
					info.verified_insns);
	}
	debugx("instructions verified: %lu in all:%s", total, line);
}

/* What every process of the object shares (include/procslot.h): the Python build's
 * layouts, the tensor layouts, the options; then the verifier (object_open, objects.c). */
int object_load_new(struct session *s, struct evmbpf_bpf *skel)
{
	struct target *t = &s->target;
	skel->rodata->pyo = *t->off;
	skel->rodata->phase_rules = s->opts->trace.nrules > 0;
	memcpy((void *)skel->rodata->layouts, tensor_layouts, sizeof(tensor_layouts));
	if (getenv("EVMBPF_TEST_WRONG_LAYOUTS")) {
		/* Test only (tests/test_matrix.py): every offset of every known layout 8 bytes
		 * off, to check that a table that does not fit gives {"type": "Tensor"} and one
		 * warning, never shapes. */
		struct tensor_layout *w = (void *)skel->rodata->layouts;
		for (int i = 0; i < TENSOR_LAYOUTS; i++) {
			w[i].backptr_off += 8;
			w[i].sizes_off += 8;
			w[i].numel_off += 8;
			w[i].dtype_off += 8;
			w[i].device_off += 8;
		}
	}
	skel->rodata->n_layouts = TENSOR_LAYOUTS;
	skel->rodata->numeric = s->opts->trace.numeric; /* where tensor values are, too */
	numeric_probe_setup(skel, s->opts->trace.numeric);
	skel->rodata->tensor_bytes_hold_exits = s->opts->trace.stop_on_nonfinite;
	skel->rodata->numeric_cuda = s->opts->trace.numeric && cupti_prepared();
	/* each process's ring is made with its slot (objects.c, --ringbuf-mb); the kernel
	 * compares no ring's size with the template's */
	/* module records wake the collector only when a quarter of the ring is waiting;
	 * session_collect() reads it every 100 ms whatever happens */
	skel->rodata->wakeup_bytes = (uint64_t)s->opts->ringbuf_mb << 18;
	/* only the marker probe this Python's `with` takes is loaded (each is verified) */
	bpf_program__set_autoload(skel->progs.marker_enter,
				  t->gen_type && t->lookup_special_kind == LOOKUP_STR);
	bpf_program__set_autoload(skel->progs.marker_enter_ident,
				  t->gen_type && t->lookup_special_kind == LOOKUP_IDENTIFIER);
	bpf_program__set_autoload(skel->progs.marker_enter_stackref,
				  t->gen_type && t->lookup_special_kind == LOOKUP_STACKREF);
	int err = evmbpf_bpf__load(skel);
	if (err) {
		warnx_("cannot load the BPF programs: %s (the kernel needs BTF, BPF ring buffers, "
		       "bpf_loop and uprobes: Linux 5.17 or later; run with -v for the verifier's log)",
		       strerror(-err));
		return -1;
	}
	if (verbose)
		verified_report(skel->obj);
	return 0;
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
	if (ps->hold_next && !watchdog_start(t->pid))
		watchdog_hold(t->pid, 1);
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
	if (t->gen_type) {
		struct bpf_program *marker =
			t->lookup_special_kind == LOOKUP_STACKREF  ? skel->progs.marker_enter_stackref
			: t->lookup_special_kind == LOOKUP_IDENTIFIER ? skel->progs.marker_enter_ident
								      : skel->progs.marker_enter;
		l = attach_uprobe(marker, 0, t->pid, t->py_open, t->lookup_special_off,
				  t->lookup_special_kind == LOOKUP_STACKREF
					  ? "_PyObject_LookupSpecialMethod" : "_PyObject_LookupSpecial");
		if (l)
			s->links[s->nlinks++] = l;
	} else {
		debugx("phase markers are not followed on Python %d.%d", t->major, t->minor);
	}
	samples_attach(s);
	s->rb = ring_buffer__new(s->ring_fd, session_record, s, NULL);
	if (!s->rb) {
		warnx_("cannot open the ring buffer: %s", strerror(errno));
		return -1;
	}
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
