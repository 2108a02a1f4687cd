/* Records to events: the model and its module names at the first call, `forward`,
 * `enter` and `exit` events (orphan exits too) from the BPF side's records, in the
 * order they come from the ring buffer. */
#include "trace.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "bound.h"
#include "cudamem.h"
#include "describe.h"
#include "error.h"
#include "events.h"
#include "gpu_calls.h"
#include "hwwatch.h"
#include "jsonw.h"
#include "modfilter.h"
#include "numeric.h"
#include "phases.h"
#include "prehooks.h"
#include "procmem.h"
#include "pyre.h"
#include "samples.h"
#include "sink.h"
#include "stacks.h"
#include "target.h"
#include "trace_writer.h"
#include "typenames.h"

/* getattr(obj, name) for a str found in the instance's __dict__ or its class's MRO
 * (a transformers config keeps model_type on the class). */
static int str_attr(const struct pyreader *r, const struct py_offsets *o, uint64_t obj,
		    const char *name, char *dst, size_t cap)
{
	uint64_t v = py_instance_attr(r, obj, name);
	if (!v) {
		uint64_t mro = pm_u64(r, py_type(r, obj) + o->tp_mro, NULL);
		int64_t n = mro ? (int64_t)pm_u64(r, mro + 16, NULL) : 0;
		for (int64_t i = 0; i < n && i < 64 && !v; i++) {
			uint64_t type = pm_u64(r, mro + o->tuple_items + 8 * i, NULL);
			v = py_dict_get_str(r, pm_u64(r, type + o->tp_dict, NULL), name);
		}
	}
	return v ? py_str(r, v, dst, cap) : -1;
}

static int set_root(struct trace *t, uint64_t self)
{
	/* the header's model_type: getattr(model.config, "model_type"), as the reference */
	uint64_t config = py_instance_attr(&t->target->reader, self, "config");
	if (config && str_attr(&t->target->reader, t->target->off, config, "model_type",
			       t->model_type, sizeof(t->model_type)) < 0)
		t->model_type[0] = 0;
	int n = modtree_build(&t->mods, &t->target->reader, self);
	if (n < 0) {
		warnx_("warning: cannot read the model's submodules (its _modules dict); "
		       "only the root is named");
	} else if (t->mods.cut) {
		warnx_("warning: %d's module tree was read up to evmbpf's bound (%s): %d modules "
		       "are named, the calls of the others are not traced",
		       t->target->pid, t->mods.cut, n);
	}
	t->root = self;
	if (t->pattern)
		modfilter_apply(t->pattern, t->opts.modules, &t->mods);
	t->root_bypass = bound_classes(&t->target->reader, &t->mods, self);
	prehooks_said(&t->target->reader, &t->mods, self);
	debugx("root module at %#lx: %d modules", (unsigned long)self, n);
	for (size_t i = 0; verbose > 1 && i < t->mods.cap; i++)
		if (t->mods.slots[i].obj)
			debugx("  %#lx %s (%s)", (unsigned long)t->mods.slots[i].obj,
			       t->mods.slots[i].path, t->mods.slots[i].type_name);
	return 0;
}

static void begin_forward(struct trace *t, uint32_t tid, uint64_t ts, const char *phase,
			  uint64_t marker)
{
	struct buf b = {0};
	int first = 1;
	t->forward_id++;
	buf_putc(&b, '{');
	jw_key(&b, &first, "event"), jw_cstr(&b, "forward");
	jw_key(&b, &first, "forward"), jw_int(&b, t->forward_id);
	jw_key(&b, &first, "phase"), jw_cstr(&b, phase);
	samples_put(t, &b, &first, marker);
	trace_emit(t, &b, tid, ts);
}

static int describe_call(struct trace *t, struct node_cursor *c, struct buf *args,
			 struct buf *kwargs)
{
	int err = describe_args(t->dctx, c, args);
	if (!err)
		err = describe_kwargs(t->dctx, c, kwargs);
	return err;
}

static void write_orphan(struct trace *t, const struct rec_orphan *r);

/* --numeric: descriptions from here on carry stats (read only from a held thread) */
static void numeric_describe(struct trace *t, int on)
{
	t->dctx->numeric = on;
	t->dctx->held = t->held;
}

static int enter_module(struct trace *t, const struct rec_call *r, struct node_cursor *c,
			int last);

/* A module call's record; REC_F_BOUND: the bound call announced before it encloses it,
 * and its args and kwargs come first. */
static void on_enter(struct trace *t, const struct rec_call *r, size_t size)
{
	struct node_cursor c = { (const uint8_t *)(r + 1), (const uint8_t *)r + size };
	if (r->flags & REC_F_BOUND_SELF) { /* a bound call's own entry, its args its nodes */
		struct rec_call own = *r;
		own.flags &= ~(REC_F_BOUND | REC_F_BOUND_SELF);
		enter_module(t, &own, &c, 1);
		return;
	}
	if ((r->flags & REC_F_BOUND) && !(t->bound.hdr.tid == r->hdr.tid && t->bound.self)) {
		/* a bound call not traced (its site could not be watched): its nodes skipped */
		struct buf args = {0}, kwargs = {0};
		describe_call(t, &c, &args, &kwargs);
		buf_free(&args);
		buf_free(&kwargs);
	} else if (r->flags & REC_F_BOUND) {
		struct rec_call outer = *r;
		outer.hdr.ts_ns = t->bound.hdr.ts_ns;
		outer.self = t->bound.self;
		outer.marker = t->bound.marker;
		outer.flags = r->flags & ~(REC_F_BOUND | REC_F_HELD);
		t->bound.self = 0;
		if (!enter_module(t, &outer, &c, 0)) { /* not traced: its nodes are skipped */
			struct buf args = {0}, kwargs = {0};
			describe_call(t, &c, &args, &kwargs);
			buf_free(&args);
			buf_free(&kwargs);
		}
	}
	enter_module(t, r, &c, 1);
}

/* 1: its args and kwargs were read from c. last: they are the rest of the record. */
static int enter_module(struct trace *t, const struct rec_call *r, struct node_cursor *c,
			int last)
{
	struct thread_stack *s = stack_of(t, r->hdr.tid);
	if (!t->root && s->depth == 0) {
		uint64_t model = s->ncodes ? phase_enclosing_model(t, s) : 0;
		if (model && model != r->self)
			debugx("attached in the middle of a forward: the model is the module at %#lx",
			       (unsigned long)model);
		set_root(t, model ? model : r->self);
	}
	trace_header(t); /* once: after the model is known, for its model_type */
	for (size_t i = 0; i < t->nearly; i++)
		write_orphan(t, &t->early[i]);
	t->nearly = 0;
	if (s->depth == 0 && s->ncodes) {
		s->rule_phase = t->opts.nrules ? phase_from_rules(t, s) : NULL;
		s->ncodes = 0;
	}
	struct mod_entry *mod = modtree_find(&t->mods, r->self);
	if (r->self == t->root && !t->root_bypass) {
		stack_reconcile(t, s, "a new forward began");
		begin_forward(t, r->hdr.tid, r->hdr.ts_ns, phase_at(t, s, r->marker), r->marker);
		s->forward = t->forward_id;
	}
	if (!mod) {
		if (!t->unknown_modules++ || verbose > 1)
			debugx("a module outside the model was called (%#lx): not traced",
			       (unsigned long)r->self);
		return 0;
	}
	if (!mod->traced)
		return 0;

	if (s->depth == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 16;
		s->frames = xrealloc(s->frames, s->cap * sizeof(*s->frames));
	}
	struct frame *f = &s->frames[s->depth++];
	memset(f, 0, sizeof(*f));
	f->mod = mod;
	f->call_id = ++t->call_id;
	f->phase = xstrdup(phase_at(t, s, r->marker));
	if (strncmp(t->last_phase, f->phase, sizeof(t->last_phase) - 1))
		snprintf(t->last_phase, sizeof(t->last_phase), "%s", f->phase);

	struct call_event ev = {
		.kind = CALL_ENTER, .tid = r->hdr.tid, .ts_ns = r->hdr.ts_ns,
		.depth = (int64_t)s->depth - 1, .forward = s->forward, .call = f->call_id,
		.mod = mod, .phase = f->phase,
	};
	ev.mem_valid = (uint8_t)cudamem_take(t->cuda, r->hdr.tid, ev.mem);
	struct buf args = {0}, kwargs = {0}, nargs = {0}, nkwargs = {0};
	if (last && !t->opts.numeric) {
		/* the rest of the record is this call's: kept as it is, described when its
		 * line is written (the frame's `unwound` too) */
		ev.nodes = f->nodes = rawnodes_new(c->p, (size_t)(c->end - c->p));
		c->p = c->end;
	} else {
		struct node_cursor c0 = *c; /* --numeric describes the same nodes again */
		if (describe_call(t, c, &args, &kwargs))
			debugx("malformed description in an enter record of %s", mod->path);
		if (!args.data)
			buf_puts(&args, "[]");
		if (!kwargs.data)
			buf_puts(&kwargs, "{}");
		if (t->opts.numeric) {
			/* the same values with their stats: input_numeric's, and the frame's (the
			 * reference's list gains them in place, so `unwound` and, in tail mode,
			 * the buffered `enter` carry them; a streamed `enter` was written before) */
			numeric_describe(t, 1);
			describe_call(t, &c0, &nargs, &nkwargs);
			numeric_describe(t, 0);
			if (!nargs.data)
				buf_puts(&nargs, "[]");
			if (!nkwargs.data)
				buf_puts(&nkwargs, "{}");
		}
		int stats_in_enter = t->opts.numeric && t->opts.tail > 0;
		f->args = xstrdup(t->opts.numeric ? nargs.data : args.data);
		ev.args = stats_in_enter ? nargs.data : args.data;
		ev.kwargs = stats_in_enter ? nkwargs.data : kwargs.data;
	}
	events_put(t, &ev);
	if (t->gpu)
		gpu_calls_enter(t->gpu, r->hdr.tid, f->call_id, mod->path, r->hdr.ts_ns);
	if (t->opts.numeric) {
		struct buf n = {0};
		int first = 1;
		buf_putc(&n, '{');
		jw_key(&n, &first, "event"), jw_cstr(&n, "input_numeric");
		jw_key(&n, &first, "module"), jw_cstr(&n, mod->path);
		jw_key(&n, &first, "forward"), jw_int(&n, s->forward);
		jw_key(&n, &first, "call"), jw_int(&n, f->call_id);
		jw_key(&n, &first, "args"), buf_puts(&n, nargs.data);
		jw_key(&n, &first, "kwargs"), buf_puts(&n, nkwargs.data);
		trace_emit(t, &n, r->hdr.tid, r->hdr.ts_ns);
	}
	buf_free(&args);
	buf_free(&kwargs);
	buf_free(&nargs);
	buf_free(&nkwargs);
	return 1;
}

/* A module running when evmbpf attached has returned: the exit hook of a tracer
 * registered at the attach would fire for it without a frame, as an `orphan` exit. Its
 * return value was never seen: `output` is null. */
static void write_orphan(struct trace *t, const struct rec_orphan *r)
{
	struct mod_entry *mod = modtree_find(&t->mods, r->self);
	if (!mod || !mod->traced)
		return;
	struct thread_stack *s = stack_of(t, r->hdr.tid);
	struct frame f = {0};
	if (stack_pop_to(t, s, mod->path, &f)) { /* cannot be: it was entered before the attach */
		stack_frame_free(&f);
		return;
	}
	struct buf b = {0};
	int first = 1;
	buf_putc(&b, '{');
	jw_key(&b, &first, "event"), jw_cstr(&b, "exit");
	jw_key(&b, &first, "module"), jw_cstr(&b, mod->path);
	jw_key(&b, &first, "type"), jw_null(&b);
	jw_key(&b, &first, "depth"), jw_int(&b, (int64_t)s->depth);
	jw_key(&b, &first, "phase"), jw_cstr(&b, phase_at(t, s, r->marker));
	jw_key(&b, &first, "forward"), jw_int(&b, s->forward);
	jw_key(&b, &first, "call"), jw_null(&b);
	jw_key(&b, &first, "output"), jw_null(&b);
	jw_key(&b, &first, "orphan"), jw_bool(&b, 1);
	trace_emit(t, &b, r->hdr.tid, r->hdr.ts_ns);
}

/* Orphans seen before the first module call (the model, and so the names, are known
 * from it on) wait for it. */
static void on_orphan(struct trace *t, const struct rec_orphan *r)
{
	if (t->root) {
		write_orphan(t, r);
	} else if (t->nearly < sizeof(t->early) / sizeof(t->early[0])) {
		t->early[t->nearly++] = *r;
	}
}

static void on_exit_(struct trace *t, const struct rec_call *r, size_t size)
{
	if (r->flags & REC_F_EXCEPTION) {
		/* no exit hook fires: the frame stays on the stack, no longer running */
		struct mod_entry *m = modtree_find(&t->mods, r->self);
		struct thread_stack *s = m ? stack_of(t, r->hdr.tid) : NULL;
		for (size_t i = s ? s->depth : 0; i-- > 0;)
			if (s->frames[i].mod == m && !s->frames[i].raised) {
				s->frames[i].raised = 1;
				/* its GPU work ends here: what its caller launches next is the
				 * caller's, not the raised frame's until the caller returns */
				if (t->gpu)
					gpu_calls_exit(t->gpu, r->hdr.tid, s->frames[i].call_id,
						       r->hdr.ts_ns);
				break;
			}
		return;
	}
	struct mod_entry *mod = modtree_find(&t->mods, r->self);
	if (!mod || !mod->traced)
		return;
	struct thread_stack *s = stack_of(t, r->hdr.tid);
	struct node_cursor c = { (const uint8_t *)(r + 1), (const uint8_t *)r + size };
	struct buf out = {0};
	struct call_event ev = {
		.kind = CALL_EXIT, .tid = r->hdr.tid, .ts_ns = r->hdr.ts_ns, .mod = mod,
	};
	if (events_defer(t)) {
		/* described when its line is written, if ever */
		ev.nodes = rawnodes_new(c.p, (size_t)(c.end - c.p));
	} else {
		numeric_describe(t, t->opts.numeric);
		t->dctx->nonfinite = 0;
		if (describe_value(t->dctx, &c, &out))
			debugx("malformed description in an exit record of %s", mod->path);
		numeric_describe(t, 0);
		ev.args = out.data ? out.data : "null";
	}
	struct frame f = {0};
	int found = stack_pop_to(t, s, mod->path, &f);
	ev.found = (uint8_t)found;
	ev.depth = (int64_t)s->depth;
	ev.phase = phase_at(t, s, r->marker);
	ev.forward = s->forward;
	ev.call = found ? f.call_id : 0;
	events_put(t, &ev);
	rawnodes_unref(ev.nodes);
	buf_free(&out);
	if (t->gpu && found)
		gpu_calls_exit(t->gpu, r->hdr.tid, f.call_id, r->hdr.ts_ns);
	if (found)
		stack_frame_free(&f);
	if (t->opts.stop_on_nonfinite && t->dctx->nonfinite) {
		/* the reference's _check_finite, raised after this exit was written */
		struct describe_ctx *d = t->dctx;
		struct buf m = {0};
		buf_printf(&m, "%s produced a non-finite output: %lld NaN, %lld +Inf, %lld -Inf in "
			   "a %s %s tensor", mod->path, d->nf_nan, d->nf_posinf, d->nf_neginf,
			   d->nf_shape.data ? d->nf_shape.data : "[]", dtype_name(d->nf_dtype));
		trace_finish_nonfinite(t, r->hdr.tid, mod->path, m.data);
		buf_free(&m);
	}
}

static void on_module_type(struct trace *t, const struct rec_module_type *r)
{
	const struct pyreader *pr = &t->target->reader;
	uint64_t dict = pm_u64(pr, r->module_type + t->target->off->tp_dict, NULL);
	uint64_t mod = py_dict_get_str(pr, dict, "__module__");
	char name[128] = "";
	if (mod)
		py_str(pr, mod, name, sizeof(name));
	if (strcmp(name, "torch.nn.modules.module"))
		debugx("a class named Module from %s is taken for torch.nn.Module",
		       name[0] ? name : "an unknown module");
}

void trace_record(struct trace *t, const void *data, size_t size, int held)
{
	const struct rec_hdr *h = data;
	t->held = held;
	if (size < sizeof(*h) || h->size > size || t->nonfinite)
		return;
	t->records++;
	t->record_bytes += h->size;
	if (h->ts_ns > t->now_ns)
		t->now_ns = h->ts_ns;
	t->dctx->rec_tid = h->tid, t->dctx->rec_ts = h->ts_ns;
	t->dctx->rec_exit = h->kind == REC_EXIT;
	switch (h->kind) {
	case REC_ENTER:
		if (size < sizeof(struct rec_call))
			return;
		on_enter(t, data, size);
		numeric_bytes_done(t->dctx, h->tid, h->ts_ns);
		stack_event_seen(t, h->tid, h->ts_ns);
		break;
	case REC_EXIT:
		if (size < sizeof(struct rec_call))
			return;
		on_exit_(t, data, size);
		numeric_bytes_done(t->dctx, h->tid, h->ts_ns);
		stack_event_seen(t, h->tid, h->ts_ns);
		break;
	case REC_TENSOR_BYTES:
		numeric_bytes_add(t->dctx, data, size);
		break;
	case REC_EXCEPTION:
		if (size < sizeof(struct rec_exception))
			return;
		if (!t->last_exc)
			t->last_exc = xmalloc(sizeof(*t->last_exc));
		memcpy(t->last_exc, data, sizeof(*t->last_exc));
		if (!t->last_exc->type_name[0] && t->target && t->last_exc->value) {
			/* the probe could not read it: a builtin's name lies in the interpreter's
			 * file-backed pages, which a forked child has not faulted in yet (fork
			 * copies no page table entries of those); read here, where a read
			 * faults them in */
			const struct pyreader *r = &t->target->reader;
			struct rec_exception *e = t->last_exc;
			if (py_type_name(r, py_type(r, e->value), e->type_name, sizeof(e->type_name)))
				e->type_name[0] = 0;
		}
		break;
	case REC_BOUND_ENTER:
		if (size >= sizeof(struct rec_bound_enter))
			memcpy(&t->bound, data, sizeof(t->bound));
		break;
	case REC_STACK:
		if (size >= sizeof(struct rec_stack))
			phase_stack_record(t, data);
		break;
	case REC_ORPHAN:
		if (size >= sizeof(struct rec_orphan))
			on_orphan(t, data);
		break;
	case REC_MARKER:
		if (size >= sizeof(struct rec_marker))
			phase_marker_record(t, data);
		break;
	case REC_MODULE_TYPE:
		if (size >= sizeof(struct rec_module_type))
			on_module_type(t, data);
		break;
	case REC_SAMPLES:
		if (size >= sizeof(struct rec_samples))
			samples_record(t, data);
		break;
	}
}

/* ------------------------------------------------------------------ a trace's life */

int phase_rule_parse(const char *text, struct phase_rule *out)
{
	const char *eq = strchr(text, '=');
	if (!eq || eq == text || !eq[1])
		return -1;
	const char *pattern = eq + 1, *colon = strchr(pattern, ':');
	if (colon && (colon == pattern || !colon[1]))
		return -1;
	out->name = strndup(text, eq - text);
	out->module = colon ? strndup(pattern, colon - pattern) : NULL;
	out->qualname = xstrdup(colon ? colon + 1 : pattern);
	return 0;
}

int trace_open(struct trace *t, struct target *target, const char *path, int force,
	       const struct trace_opts *opts)
{
	memset(t, 0, sizeof(*t));
	t->type_map_fd = -1;
	t->target = target;
	t->opts = *opts;
	t->out_path = path;
	if (opts->modules) {
		char why[512];
		if (!(t->pattern = pyre_compile(opts->modules, why, sizeof(why)))) {
			warnx_("--modules %s", why);
			return -1;
		}
		debugx("--modules runs as the PCRE2 pattern %s", pyre_pcre2(t->pattern));
	}
	/* one per trace: several processes are traced at once, each with its own memory */
	t->dctx = xcalloc(1, sizeof(*t->dctx));
	t->dctx->type_name = trace_type_name;
	t->dctx->arg = t;
	t->dctx->reader = &target->reader;
	if (opts->numeric)
		t->dctx->tensor_stats = numeric_stats;

	struct timespec rt, mono;
	clock_gettime(CLOCK_REALTIME, &rt);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	t->boot_to_realtime_ns = (rt.tv_sec - mono.tv_sec) * 1000000000ULL + rt.tv_nsec - mono.tv_nsec;

	t->file = opts->deferred_file ? sink_file_deferred(path, force) : sink_file_open(path, force);
	if (!t->file)
		return -1;
	if (opts->tail > 0)
		t->tail = sink_tail_new(t->file, (size_t)opts->tail);
	t->sink = t->tail ? t->tail : t->file;
	return 0;
}

int trace_tail_bound(struct trace *t, size_t max_bytes)
{
	return t->tail ? sink_tail_bound(t->tail, max_bytes) : 0;
}

size_t trace_tail_bytes(const struct trace *t)
{
	return t->tail ? sink_tail_bytes(t->tail) : t->kept_len;
}

void trace_set_recorded_who(struct trace *t, char *who)
{
	free(t->recorded_who);
	t->recorded_who = who;
}

int trace_hung_thread(struct trace *t, uint64_t before_ns, uint32_t *tid, const char **module,
		      uint64_t *since_ns)
{
	for (size_t i = 0; i < t->nthreads; i++) {
		struct thread_stack *s = &t->threads[i];
		if (s->hang_said || !s->last_ns || s->last_ns >= before_ns)
			continue;
		/* the innermost frame still running (one an exception left is not) */
		size_t d = s->depth;
		while (d && s->frames[d - 1].raised)
			d--;
		if (!d || !s->frames[d - 1].mod)
			continue;
		s->hang_said = 1;
		*tid = s->tid;
		*module = s->frames[d - 1].mod->path;
		*since_ns = s->last_ns;
		return 1;
	}
	return 0;
}

void trace_set_recorded_threads(struct trace *t, char *threads_json)
{
	free(t->recorded_threads);
	t->recorded_threads = threads_json;
}

size_t trace_model_bytes(const struct trace *t)
{
	return t->mods.bytes;
}

/* The tail written to path as a file of its own, numbered on from the trace's lines, the
 * trace left as it was: open_frames, the frames still open `unwound` ("session ended");
 * then the closing marks. 0, or the errno of the creation or write that failed (said,
 * the file removed). */
static int write_tail_copy_to(struct trace *t, struct sink *file, const char *path,
			      int open_frames, const char *why, const char *threads_json);

static int write_tail_copy(struct trace *t, const char *path, int open_frames, const char *why,
			   const char *threads_json)
{
	struct sink *file = sink_file_open(path, 0);
	if (!file)
		return errno ? errno : EIO;
	return write_tail_copy_to(t, file, path, open_frames, why, threads_json);
}

/* The tail's copy into file (freed here); path: the file's, removed when it fails (NULL:
 * memory). 0, or the errno of the failure. */
static int write_tail_copy_to(struct trace *t, struct sink *file, const char *path,
			      int open_frames, const char *why, const char *threads_json)
{
	struct sink *tail = sink_tail_new(file, (size_t)t->opts.tail);
	sink_tail_copy(t->tail, tail);
	struct sink *live = t->sink;
	int64_t seq = t->seq;
	uint64_t events = t->events;
	t->sink = tail;
	if (open_frames)
		stacks_write_open(t, "session ended");
	int64_t next_i = t->seq + 1;
	sink_finish(tail, &next_i);
	if (!hw_watch_works())
		trace_write_unobservable(t, next_i++);
	if (t->mods.cut)
		trace_write_model_cut(t, next_i++);
	if (why)
		trace_write_recorded(t, next_i++, why, threads_json);
	int err = sink_flush(tail);
	sink_free(tail);
	if (err && path) {
		warnx_("cannot write %s: %s", path, strerror(err));
		unlink(path);
	}
	t->sink = live;
	t->seq = seq;
	t->events = events;
	return err;
}

int trace_snapshot(struct trace *t, const char *path, const char *threads_json,
		   const char *why)
{
	/* no event yet (attached mid-hang: the modules running never return): the file is
	 * then the closing mark alone, what each thread runs now in its "threads" */
	if (!t->tail || (!t->events && !threads_json))
		return 1;
	return write_tail_copy(t, path, 1, why ? why : "flush: the process runs on", threads_json)
		       ? -1 : 0;
}

void trace_target_gone(struct trace *t)
{
	t->type_map_fd = -1;
	t->target_gone = 1;
	if (t->dctx)
		t->dctx->reader = NULL;
}

int trace_is_open(const struct trace *t)
{
	return t->file != NULL;
}

int trace_out_fd(const struct trace *t)
{
	return t->file ? sink_file_fd(t->file) : -1;
}

int trace_flush(struct trace *t)
{
	return t->sink ? sink_flush(t->sink) : 0;
}

/* What the records built, freed (the sinks apart). */
static void free_state(struct trace *t)
{
	free(t->recorded_who);
	t->recorded_who = NULL;
	free(t->recorded_threads);
	t->recorded_threads = NULL;
	free(t->kept_data);
	t->kept_data = NULL;
	t->kept_len = 0;
	stacks_free(t);
	free(t->last_exc);
	t->last_exc = NULL;
	numeric_bytes_free(t->dctx);
	free(t->dctx);
	t->dctx = NULL;
	modtree_free(&t->mods);
	typenames_free(&t->typenames);
	pyre_free(t->pattern);
	t->pattern = NULL;
}

/* A full disk: the file's bytes made now, once, in memory (t->kept_data), and all the
 * rest freed (its tail's raw events, its module tree, its type names): what waits for
 * room is the file alone, and each try writes it as it is. 0, or -1 (no memory: the
 * trace is lost, said). */
static int keep_image(struct trace *t)
{
	char *data = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&data, &len);
	if (!m) {
		warnx_("%s: the disk is full and its trace cannot be kept: %s", t->out_path,
		       strerror(errno));
		return -1;
	}
	int err = write_tail_copy_to(t, sink_file_stream(m), NULL, 0, t->recorded_why[0] ?
				     t->recorded_why : NULL, t->recorded_threads);
	if (err) {
		free(data);
		warnx_("%s: the disk is full and its trace cannot be kept: %s", t->out_path,
		       strerror(err));
		return -1;
	}
	sink_free(t->sink);
	t->sink = t->file = t->tail = NULL;
	free_state(t);
	t->kept_data = data;
	t->kept_len = len;
	return 0;
}

int trace_take_kept(struct trace *t, char **data, size_t *len)
{
	if (!t->kept_data)
		return -1;
	*data = t->kept_data;
	*len = t->kept_len;
	t->kept_data = NULL;
	t->kept_len = 0;
	return 0;
}

int trace_write_kept(const char *path, const char *data, size_t len)
{
	/* no room yet: not tried (a try costs a file's worth of writes) */
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	struct statvfs vfs;
	if (!statvfs(slash ? (dir[0] ? dir : "/") : ".", &vfs) &&
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < (uint64_t)len)
		return TRACE_KEPT;
	int quiet = warn_silent;
	warn_silent = 1; /* the first try said why */
	struct sink *file = sink_file_open(path, 0);
	warn_silent = quiet;
	if (!file)
		return errno == ENOSPC || errno == EDQUOT ? TRACE_KEPT : -1;
	struct buf b = { 0 };
	buf_put(&b, data, len);
	sink_put(file, &b);
	buf_free(&b);
	int err = sink_flush(file);
	sink_free(file);
	if (!err)
		return 0;
	unlink(path);
	if (err == ENOSPC || err == EDQUOT)
		return TRACE_KEPT;
	warnx_("cannot write %s: %s", path, strerror(err));
	return -1;
}

int trace_close(struct trace *t)
{
	if (!t->sink) {
		free_state(t);
		return 0;
	}
	if (t->opts.deferred_file && t->tail && (t->events || t->recorded_threads)) {
		/* evmbpf record: written from a copy, so that a full disk leaves the tail as it
		 * was, for another try (said the first time only) */
		int quiet = warn_silent;
		warn_silent = quiet || t->write_tries++;
		int err = write_tail_copy(t, t->out_path, 0, t->recorded_why[0] ? t->recorded_why :
					  NULL, t->recorded_threads);
		warn_silent = quiet;
		if ((err == ENOSPC || err == EDQUOT) && !keep_image(t))
			return TRACE_KEPT;
		sink_free(t->sink);
		t->sink = t->file = t->tail = NULL;
		free_state(t);
		return err ? -1 : 0;
	}
	int64_t next_i = t->seq + 1; /* of a line written here */
	sink_finish(t->sink, &next_i);
	if (!sink_file_error(t->file) && t->events && !hw_watch_works())
		trace_write_unobservable(t, next_i++);
	if (!sink_file_error(t->file) && t->events && t->mods.cut)
		trace_write_model_cut(t, next_i++);
	if (!sink_file_error(t->file) && t->events && t->recorded_why[0])
		trace_write_recorded(t, next_i++, t->recorded_why, NULL);
	int err = sink_flush(t->sink);
	if (err && !t->write_reported)
		warnx_("cannot write %s: %s", t->out_path, strerror(err));
	sink_free(t->sink);
	t->sink = t->file = t->tail = NULL;
	free_state(t);
	return err ? -1 : 0;
}

void trace_abandon(struct trace *t)
{
	while (t->sink && t->sink != t->file) {
		struct sink *next = t->sink->next;
		t->sink->ops->free(t->sink);
		t->sink = next;
	}
	if (t->file)
		sink_file_discard(t->file, t->out_path);
	t->sink = t->file = t->tail = NULL;
	free_state(t);
}
