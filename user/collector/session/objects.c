/* One loaded evmbpf object for every traced process of the same Python build (its
 * py_offsets and its phase-marker probe: what the programs' read-only data holds) in
 * this session; each process is a slot of it (include/procslot.h): its state in the
 * object's `procs` array (in its mapped .bss), its own ring buffer in `rings`, its tgid
 * in `proc_slot`. The verifier checks an object once; a process that matches one gets links
 * (its own uprobes, with its pid, on the same programs) and a slot, nothing verified.
 * Freed when the process's session ends: what the programs kept for it under its tag (the
 * maps keyed by the target's addresses) goes with it, so a later process on the same
 * slot starts from nothing. The object goes with its last process, unless objects are
 * kept (evmbpf record: session_objects_keep): then one object of each build stays loaded
 * with no process, so that the next process of that build is served without the
 * verifier; at most IDLE_MAX of them, the one idle longest freed first. */
#include "session_state.h"
#include "objects.h"
#include "uprobes.h"
#include "cupti_session.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>

#include "preempt.h"
#include "util.h"

struct evm_object {
	struct evmbpf_bpf *skel;
	struct py_offsets pyo;
	int marker_kind;           /* lookup_special_kind, or -1: no marker probe */
	int refs;
	int verifying;             /* being loaded: no process may have it yet */
	unsigned id;
	uint64_t idle_since;       /* kept with no process: when its last one went (0: has one) */
	struct bpf_link *links[3]; /* sched_process_exit, _exec and _fork: one each for all */
	uint8_t used[PROC_SLOTS];
	struct evm_object *next;
};

static struct evm_object *objects;
static unsigned objects_loaded;
static int keep_idle;     /* an object outlives its last process (session_objects_keep) */
/* Objects kept with no process, of different builds: a node runs a few Python builds; an
 * idle object holds its maps' memory and runs its two tracepoints at every exit and exec
 * of the node (a hash lookup that finds no process). */
#define IDLE_MAX 8
/* What the loop does while a new object is verified off it (session_objects_wait) */
static void (*load_wait)(void *);
static void *load_wait_arg;

static int marker_kind_of(const struct target *t)
{
	return t->gen_type ? (int)t->lookup_special_kind : -1;
}

/* The object's first free slot, or 0 (slot 0 is no process's): it is full. */
static int free_slot(const struct evm_object *o)
{
	for (int i = 1; i < PROC_SLOTS; i++)
		if (!o->used[i])
			return i;
	return 0;
}

static struct evm_object *object_find(const struct target *t)
{
	for (struct evm_object *o = objects; o; o = o->next)
		if (!o->verifying && !memcmp(&o->pyo, t->off, sizeof(o->pyo)) &&
		    o->marker_kind == marker_kind_of(t) && free_slot(o))
			return o;
	return NULL;
}

uint64_t session_object_preempted(const struct session *s)
{
	return s->obj && s->obj->skel->bss ? s->obj->skel->bss->preempted_records : 0;
}

void session_objects_wait(void (*wait)(void *arg), void *arg)
{
	load_wait = wait;
	load_wait_arg = arg;
}

struct object_load {
	struct evmbpf_bpf *skel;
	int err;
	int done;
};

static int object_load_now(struct evmbpf_bpf *skel)
{
	int err = evmbpf_bpf__load(skel);
	/* tests only: a verifier as slow as a loaded node's (the execs that come meanwhile) */
	const char *slow = getenv("EVMBPF_TEST_VERIFY_SLOW_MS");
	if (slow && atoi(slow) > 0 && atoi(slow) < 60000)
		usleep((useconds_t)atoi(slow) * 1000);
	return err;
}

static void *object_load_main(void *arg)
{
	struct object_load *l = arg;
	l->err = object_load_now(l->skel);
	__atomic_store_n(&l->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* The verifier: a second or more of CPU for a new build (docs/record.md). Where the loop
 * has something to do meanwhile (session_objects_wait: evmbpf record holds the node's
 * execs as they come), the load runs on a thread of its own, every signal blocked there,
 * and the loop's wait is called until it is done; else here. The object is touched by
 * that thread alone until it is done. */
static int object_verify(struct evmbpf_bpf *skel)
{
	if (!load_wait)
		return object_load_now(skel);
	struct object_load l = { .skel = skel };
	sigset_t all, old;
	pthread_t t;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&t, NULL, object_load_main, &l);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc)
		return object_load_now(skel);
	while (!__atomic_load_n(&l.done, __ATOMIC_ACQUIRE))
		load_wait(load_wait_arg);
	pthread_join(t, NULL);
	return l.err;
}

/* What is the same for every process of the object, and the load (the verifier). */
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
static int object_load_new(struct session *s, struct evmbpf_bpf *skel)
{
	struct target *t = &s->target;
	skel->rodata->pyo = *t->off;
	skel->rodata->tracer_tgid = (uint32_t)getpid(); /* the holds: threads evmbpf seized */
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
#if defined(EVMBPF_ABLATE) && EVMBPF_ABLATE
	/* bpf/ablate.bpf.h: a build for measuring, never for tracing */
	warnx_("this is a profiling build that leaves a stage of each module call out "
	       "(ABLATE=%d): its traces are incomplete; build without ABLATE to trace",
	       EVMBPF_ABLATE);
#endif
	skel->rodata->numeric = s->opts->trace.numeric; /* where tensor values are, too */
	numeric_probe_setup(skel, s->opts->trace.numeric);
	skel->rodata->tensor_bytes_hold_exits = s->opts->trace.stop_on_nonfinite;
	skel->rodata->numeric_cuda = s->opts->trace.numeric && cupti_prepared();
	/* each process's ring is made with its slot (objects.c, --ringbuf-mb); the kernel
	 * compares no ring's size with the template's */
	/* module records wake the collector only when a quarter of the ring is waiting;
	 * the job's loop reads it every 100 ms whatever happens */
	skel->rodata->wakeup_bytes = (uint64_t)s->opts->ringbuf_mb << 18;
	/* one record a leaf call (bpf/state.bpf.h, session/defer.c) on request alone,
	 * EVMBPF_LEAF_PAIRS=1: on a KVM guest it cost 93-125 ns a call more than the second
	 * record it saves (the enter's and the exit's extra copies, four locked operations),
	 * and on a PVM guest it saved less than that guest's noise (docs/design.md) */
	const char *pairs = getenv("EVMBPF_LEAF_PAIRS");
	skel->rodata->defer_calls = pairs && *pairs && strcmp(pairs, "0");
	/* a kernel that preempts its own code: each record checked (bpf/state.bpf.h) */
	skel->rodata->preempt_guard = preempt_guard_wanted();
	/* only the marker probe this Python's `with` takes is loaded (each is verified) */
	bpf_program__set_autoload(skel->progs.marker_enter,
				  t->gen_type && t->lookup_special_kind == LOOKUP_STR);
	bpf_program__set_autoload(skel->progs.marker_enter_ident,
				  t->gen_type && t->lookup_special_kind == LOOKUP_IDENTIFIER);
	bpf_program__set_autoload(skel->progs.marker_enter_stackref,
				  t->gen_type && t->lookup_special_kind == LOOKUP_STACKREF);
	uprobes_multi_on(skel->obj);
	int err = object_verify(skel);
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

static void object_free(struct evm_object *o)
{
	for (size_t i = 0; i < sizeof(o->links) / sizeof(o->links[0]); i++)
		bpf_link__destroy(o->links[i]);
	evmbpf_bpf__destroy(o->skel);
	for (struct evm_object **p = &objects; *p; p = &(*p)->next)
		if (*p == o) {
			*p = o->next;
			break;
		}
	free(o);
}

static struct evm_object *object_open(struct session *s)
{
	struct evmbpf_bpf *skel = evmbpf_bpf__open();
	if (!skel) {
		warnx_("cannot open the BPF programs: %s", strerror(errno));
		return NULL;
	}
	struct evm_object *o = xcalloc(1, sizeof(*o));
	o->skel = skel;
	o->pyo = *s->target.off;
	o->marker_kind = marker_kind_of(&s->target);
	o->next = objects;
	objects = o;
	o->verifying = 1;
	int err = object_load_new(s, skel);
	o->verifying = 0;
	if (err) {
		object_free(o);
		return NULL;
	}
	struct bpf_program *progs[3] = { skel->progs.task_exit, skel->progs.task_exec,
					 skel->progs.task_fork };
	static const char *const tps[3] = { "sched_process_exit", "sched_process_exec",
					    "sched_process_fork" };
	for (int i = 0; i < 3; i++) {
		o->links[i] = bpf_program__attach(progs[i]);
		if (!o->links[i]) {
			warnx_("cannot attach to %s: %s", tps[i], strerror(errno));
			object_free(o);
			return NULL;
		}
	}
	o->id = ++objects_loaded;
	return o;
}

/* The maps keyed by the target's addresses: every key under this tag goes. */
static void purge_tag(int fd, uint64_t tag)
{
	uint64_t key, next, gone[512];
	for (;;) {
		int n = 0;
		void *prev = NULL;
		while (n < 512 && !bpf_map_get_next_key(fd, prev, &next)) {
			key = next;
			prev = &key;
			if ((key & ~((1ULL << PROC_TAG_SHIFT) - 1)) == tag)
				gone[n++] = key;
		}
		for (int i = 0; i < n; i++)
			bpf_map_delete_elem(fd, &gone[i]);
		if (n < 512)
			return;
	}
}

int session_slot_open(struct session *s)
{
	struct evm_object *o = object_find(&s->target);
	int shared = o != NULL;
	if (!o && !(o = object_open(s)))
		return -1;
	int slot = free_slot(o); /* a new object's first, or the one object_find saw */
	if (shared && !o->refs)
		debugx("%d: BPF object %u, kept loaded with no process, serves it: slot %d, nothing "
		       "verified", s->target.pid, o->id, slot);
	else if (shared)
		debugx("%d shares BPF object %u, slot %d (%d processes): nothing verified",
		       s->target.pid, o->id, slot, o->refs + 1);
	else
		debugx("%d: BPF object %u loaded, slot %d", s->target.pid, o->id, slot);
	o->used[slot] = 1;
	o->refs++;
	o->idle_since = 0;
	s->obj = o;
	s->skel = o->skel;
	s->slot = (uint32_t)slot;
	s->ps = &o->skel->bss->procs[slot];
	memset(s->ps, 0, sizeof(*s->ps));
	s->ps->slot = (uint32_t)slot;
	s->ps->tag = (uint64_t)slot << PROC_TAG_SHIFT;
	trace_set_types(&s->trace, bpf_map__fd(o->skel->maps.type_kinds), s->ps->tag);
	/* its own ring buffer */
	LIBBPF_OPTS(bpf_map_create_opts, mo);
	s->ring_fd = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "evmbpf_events", 0, 0,
				    (uint32_t)s->opts->ringbuf_mb << 20, &mo);
	uint32_t key = (uint32_t)slot;
	if (s->ring_fd < 0 ||
	    bpf_map_update_elem(bpf_map__fd(o->skel->maps.rings), &key, &s->ring_fd, BPF_ANY)) {
		warnx_("cannot make the ring buffer of %d: %s", s->target.pid, strerror(errno));
		return -1;
	}
	return 0;
}

/* The slot is filled: the programs see the process from now on. */
int session_slot_live(struct session *s)
{
	uint32_t tgid = (uint32_t)s->target.pid;
	__atomic_store_n(&s->ps->tgid, tgid, __ATOMIC_RELEASE);
	if (bpf_map_update_elem(bpf_map__fd(s->skel->maps.proc_slot), &tgid, &s->slot, BPF_ANY)) {
		warnx_("cannot give %d its slot in the BPF programs: %s", s->target.pid,
		       strerror(errno));
		return -1;
	}
	return 0;
}

void session_slot_hide(struct session *s)
{
	if (!s->ps || !s->skel)
		return;
	uint32_t tgid = (uint32_t)s->target.pid;
	/* out of the map first, then the slot's tgid (ps_slot's per-CPU shortcut checks it) */
	bpf_map_delete_elem(bpf_map__fd(s->skel->maps.proc_slot), &tgid);
	__atomic_store_n(&s->ps->tgid, 0, __ATOMIC_RELEASE);
}

void session_objects_keep(int keep)
{
	keep_idle = keep;
}

static int same_build(const struct evm_object *a, const struct evm_object *b)
{
	return !memcmp(&a->pyo, &b->pyo, sizeof(a->pyo)) && a->marker_kind == b->marker_kind;
}

/* The last process of o went: kept loaded (session_objects_keep) when no other object of
 * its build is, within IDLE_MAX; else freed. */
static void object_idle(struct evm_object *o)
{
	struct evm_object *oldest = NULL;
	int idle = 0;
	for (struct evm_object *x = objects; keep_idle && x; x = x->next) {
		if (x == o || x->refs || x->verifying)
			continue;
		if (same_build(x, o)) {
			debugx("BPF object %u freed: object %u of the same Python is kept", o->id, x->id);
			object_free(o);
			return;
		}
		idle++;
		if (!oldest || x->idle_since < oldest->idle_since)
			oldest = x;
	}
	if (!keep_idle) {
		object_free(o);
		return;
	}
	if (idle >= IDLE_MAX) {
		debugx("BPF object %u freed: %d objects of other Pythons kept with no process",
		       oldest->id, idle);
		object_free(oldest);
	}
	o->idle_since = mono_ns();
	debugx("BPF object %u kept loaded with no process: the next process of its Python is "
	       "served without the verifier", o->id);
}

void session_objects_release(void)
{
	for (struct evm_object *o = objects, *next; o; o = next) {
		next = o->next;
		if (!o->refs && !o->verifying)
			object_free(o);
	}
}

/* A one-entry per-CPU array's value zeroed on every CPU (a cache of what the programs
 * learnt of a process, keyed by its tag, which the next process in its slot reuses) */
static void percpu_zero(struct bpf_map *map)
{
	int cpus = libbpf_num_possible_cpus();
	size_t vs = bpf_map__value_size(map);
	void *zero = cpus > 0 ? calloc((size_t)cpus, (vs + 7) & ~(size_t)7) : NULL;
	uint32_t k0 = 0;
	if (zero)
		bpf_map_update_elem(bpf_map__fd(map), &k0, zero, BPF_ANY);
	free(zero);
}

void session_unload(struct session *s)
{
	struct evm_object *o = s->obj;
	if (!o)
		return;
	struct evmbpf_bpf *skel = o->skel;
	uint32_t tgid = (uint32_t)s->target.pid, key = s->slot;
	uint64_t tag = s->ps->tag;
	/* the programs no longer find it, then its ring and what they kept for it go */
	bpf_map_delete_elem(bpf_map__fd(skel->maps.proc_slot), &tgid);
	bpf_map_delete_elem(bpf_map__fd(skel->maps.rings), &key);
	if (s->ring_fd >= 0)
		close(s->ring_fd);
	s->ring_fd = -1;
	if (o->refs > 1 || keep_idle) {
		/* the thread that exec'd out of the process keeps its id (the pid), and the
		 * programs, which no longer find its process, do not see it exit: what they kept
		 * by thread id for it goes here (the others' went at their exits) */
		uint32_t tid = tgid;
		bpf_map_delete_elem(bpf_map__fd(skel->maps.bound_threads), &tid);
		bpf_map_delete_elem(bpf_map__fd(skel->maps.markers), &tid);
		bpf_map_delete_elem(bpf_map__fd(skel->maps.call_depth), &tid);
		bpf_map_delete_elem(bpf_map__fd(skel->maps.host_exec), &tid);
		purge_tag(bpf_map__fd(skel->maps.type_kinds), tag);
		purge_tag(bpf_map__fd(skel->maps.call_codes), tag);
		purge_tag(bpf_map__fd(skel->maps.marker_codes), tag);
		purge_tag(bpf_map__fd(skel->maps.known_codes), tag);
		purge_tag(bpf_map__fd(skel->maps.orphans), tag);
		/* the per-CPU copies of type and code verdicts: emptied on every CPU */
		percpu_zero(skel->maps.type_cache);
		percpu_zero(skel->maps.code_cache);
	}
	memset(s->ps, 0, sizeof(*s->ps));
	o->used[s->slot] = 0;
	s->ps = NULL;
	s->obj = NULL;
	s->skel = NULL;
	if (--o->refs == 0)
		object_idle(o);
}
