#include "trace.h"

#include <errno.h>
#include <fnmatch.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "describe.h"
#include "jsonw.h"
#include "modfilter.h"

#define DEFAULT_PHASE "other"
#define ROOT_NAME "<root>"
#define TRACER_VERSION "0.1"

/* ---------------------------------------------------------------- output */

static void write_line(struct trace *t, struct buf *line)
{
	buf_putc(line, '\n');
	if (t->opts.tail > 0) {
		size_t cap = (size_t)t->opts.tail;
		size_t slot = (t->ring_head + t->ring_count) % cap;
		if (t->ring_count == cap) {
			free(t->ring[t->ring_head]);
			t->ring_head = (t->ring_head + 1) % cap;
			slot = (t->ring_head + t->ring_count - 1) % cap;
		} else {
			t->ring_count++;
		}
		t->ring[slot] = line->data;
		line->data = NULL;
		line->len = line->cap = 0;
		return;
	}
	if (t->write_failed)
		return;
	if (fwrite(line->data, 1, line->len, t->out) != line->len) {
		t->write_failed = errno ? errno : EIO;
	}
}

/* Close an event: the reference's "i", then the extension keys. */
static void finish_event(struct trace *t, struct buf *ev, uint32_t tid, uint64_t ts)
{
	/* per event: no printf (the collector's hottest path) */
	buf_puts(ev, ", \"i\": ");
	jw_int(ev, ++t->seq);
	if (tid) {
		buf_puts(ev, ", \"tid\": ");
		jw_int(ev, tid);
		buf_puts(ev, ", \"ts_ns\": ");
		jw_int(ev, (int64_t)((ts ? ts : t->now_ns) + t->boot_to_realtime_ns));
	}
	buf_putc(ev, '}');
	write_line(t, ev);
	buf_free(ev);
	t->events++;
}

static void write_created(struct buf *b)
{
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	char when[64];
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S+00:00", &tm);
	jw_cstr(b, when);
}

static void write_header(struct trace *t)
{
	if (t->header_written)
		return;
	t->header_written = 1;
	target_find_torch(t->target);
	struct buf b = {0};
	int f = 1;
	buf_putc(&b, '{');
	jw_key(&b, &f, "event"), jw_cstr(&b, "header");
	jw_key(&b, &f, "trace_schema_version"), jw_cstr(&b, "1.1");
	jw_key(&b, &f, "created"), write_created(&b);
	jw_key(&b, &f, "config");
	int c = 1;
	buf_putc(&b, '{');
	jw_key(&b, &c, "enabled"), jw_bool(&b, 1);
	jw_key(&b, &c, "modules"), jw_cstr(&b, t->opts.modules);
	jw_key(&b, &c, "numeric"), jw_bool(&b, 0);
	jw_key(&b, &c, "stop_on_nonfinite"), jw_bool(&b, 0);
	jw_key(&b, &c, "tail");
	if (t->opts.tail > 0)
		jw_int(&b, t->opts.tail);
	else
		jw_null(&b);
	jw_key(&b, &c, "sync"), jw_bool(&b, 0);
	jw_key(&b, &c, "sample_stats"), jw_bool(&b, 0);
	jw_key(&b, &c, "extremes"), jw_int(&b, 0);
	jw_key(&b, &c, "extremes_modules"), jw_null(&b);
	jw_key(&b, &c, "axes"), jw_null(&b);
	jw_key(&b, &c, "axes_modules"), jw_null(&b);
	jw_key(&b, &c, "routing"), jw_null(&b);
	jw_key(&b, &c, "chunk_elements"), jw_null(&b);
	jw_key(&b, &c, "trace_schema_version"), jw_cstr(&b, "1.1");
	buf_putc(&b, '}');
	jw_key(&b, &f, "model_type"), jw_cstr(&b, t->model_type[0] ? t->model_type : NULL);
	jw_key(&b, &f, "torch"), jw_cstr(&b, t->target->torch_version[0] ? t->target->torch_version : NULL);
	jw_key(&b, &f, "cuda"), jw_bool(&b, 0);
	buf_printf(&b, ", \"i\": %lld", (long long)++t->seq);
	/* extension: who wrote this trace, and in which pid namespace its pids and tids are */
	buf_puts(&b, ", \"tracer\": {\"name\": \"evmbpf\", \"version\": \"" TRACER_VERSION "\"");
	buf_printf(&b, ", \"pid\": %d, \"python\": \"%d.%d\", \"probe\": \"slot_tp_call\"", t->target->pid,
		   t->target->major, t->target->minor);
	buf_printf(&b, ", \"pid_namespace\": %llu, \"pids\": \"host\"",
		   (unsigned long long)t->target->pid_ns_inode);
	buf_printf(&b, ", \"target_pid_namespace\": %llu, \"target_pid\": %d}",
		   (unsigned long long)t->target->target_pid_ns_inode, t->target->ns_pid);
	buf_putc(&b, '}');
	write_line(t, &b);
	buf_free(&b);
	t->events++;
}

/* ---------------------------------------------------------------- stacks */

static struct thread_stack *thread_of(struct trace *t, uint32_t tid)
{
	for (size_t i = 0; i < t->nthreads; i++)
		if (t->threads[i].tid == tid)
			return &t->threads[i];
	t->threads = xrealloc(t->threads, (t->nthreads + 1) * sizeof(*t->threads));
	struct thread_stack *s = &t->threads[t->nthreads++];
	memset(s, 0, sizeof(*s));
	s->tid = tid;
	return s;
}

/* The phase a record was made in: the name of the innermost phase marker active on its
 * thread, as the BPF side saw it, or "other". */
static const char *phase_of(struct trace *t, uint64_t marker)
{
	if (!marker)
		return DEFAULT_PHASE;
	for (size_t k = 0, i = (marker >> 4) % MARKER_SLOTS; k < MARKER_SLOTS;
	     k++, i = (i + 1) % MARKER_SLOTS)
		if (t->markers[i].gen == marker)
			return t->markers[i].name;
	return DEFAULT_PHASE;
}

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

/* Does a code object's file name a module matching `glob`? The file's path is read as a
 * dotted name and matched from any of its components on: lm_eval.models.huggingface
 * matches .../site-packages/lm_eval/models/huggingface.py. */
static int module_matches(const char *glob, const char *filename)
{
	char dotted[1024];
	snprintf(dotted, sizeof(dotted), "%s", filename);
	size_t n = strlen(dotted);
	if (n > 3 && !strcmp(dotted + n - 3, ".py"))
		dotted[n -= 3] = 0;
	if (n > 9 && !strcmp(dotted + n - 9, "/__init__"))
		dotted[n -= 9] = 0;
	for (char *p = dotted; *p; p++)
		if (*p == '/')
			*p = '.';
	for (char *p = dotted; p; p = strchr(p + 1, '.')) {
		const char *candidate = *p == '.' ? p + 1 : p;
		if (!fnmatch(glob, candidate, 0))
			return 1;
	}
	return 0;
}

struct code_names {
	uint64_t code;
	char filename[512];
	char qualname[256];
};

/* 3.9/3.10 code objects have no co_qualname. A method's is rebuilt from the frame's
 * first local: the class in type(first).__mro__ whose own __dict__ holds a function of
 * this name with this code names it; any other function is named by co_name alone. */
static void qualname_from_mro(struct trace *t, uint64_t code, uint64_t first, char *dst,
			      size_t cap)
{
	const struct pyreader *r = &t->target->reader;
	const struct py_offsets *o = t->target->off;
	uint64_t type = first ? py_type(r, first) : 0;
	uint64_t mro = type ? pm_u64(r, type + o->tp_mro, NULL) : 0;
	int64_t n = mro ? (int64_t)pm_u64(r, mro + 16 /* ob_size */, NULL) : 0;
	char name[120], cls[120];
	snprintf(name, sizeof(name), "%s", dst);
	for (int64_t i = 0; i < n && i < 64; i++) {
		uint64_t k = pm_u64(r, mro + o->tuple_items + 8 * i, NULL);
		uint64_t dict = k ? pm_u64(r, k + o->tp_dict, NULL) : 0;
		uint64_t fn = dict ? py_dict_get_str(r, dict, name) : 0;
		if (!fn || pm_u64(r, fn + o->func_code, NULL) != code)
			continue;
		if (py_str(r, pm_u64(r, k + o->ht_qualname, NULL), cls, sizeof(cls)) >= 0)
			snprintf(dst, cap, "%s.%s", cls, name);
		return;
	}
}

static const struct code_names *code_names_of(struct trace *t, uint64_t code, uint64_t first)
{
	static struct code_names cache[1024];
	struct code_names *c = &cache[(code >> 4) & 1023];
	if (c->code == code)
		return c;
	const struct pyreader *r = &t->target->reader;
	const struct py_offsets *o = t->target->off;
	int bare = !o->co_qualname;
	c->code = 0;
	if (py_str(r, pm_u64(r, code + o->co_filename, NULL), c->filename, sizeof(c->filename)) < 0 ||
	    py_str(r, pm_u64(r, code + (bare ? o->co_name : o->co_qualname), NULL), c->qualname,
		   sizeof(c->qualname)) < 0)
		return NULL;
	if (bare)
		qualname_from_mro(t, code, first, c->qualname, sizeof(c->qualname));
	c->code = code;
	return c;
}

/* The phase the rules give an outermost call: the innermost frame that matches a rule
 * decides; among the rules matching that frame, the first given wins. */
static const char *rule_phase(struct trace *t, const struct thread_stack *s)
{
	for (uint32_t i = 0; i < s->ncodes; i++) {
		const struct code_names *c = code_names_of(t, s->codes[i], s->firsts[i]);
		if (!c)
			continue;
		for (size_t k = 0; k < t->opts.nrules; k++) {
			const struct phase_rule *rule = &t->opts.rules[k];
			if (!fnmatch(rule->qualname, c->qualname, 0) &&
			    (!rule->module || module_matches(rule->module, c->filename)))
				return rule->name;
		}
	}
	return NULL;
}

static void on_stack(struct trace *t, const struct rec_stack *r)
{
	struct thread_stack *s = thread_of(t, r->hdr.tid);
	s->ncodes = r->n < STACK_FRAMES_MAX ? r->n : STACK_FRAMES_MAX;
	memcpy(s->codes, r->code, s->ncodes * sizeof(s->codes[0]));
	memcpy(s->firsts, r->first, s->ncodes * sizeof(s->firsts[0]));
	/* Name them now, while the target may be held for it (struct rec_stack): the
	 * names are cached, the target may be gone by the rule's turn. */
	for (uint32_t i = 0; i < s->ncodes; i++)
		code_names_of(t, s->codes[i], s->firsts[i]);
}

/* Attached in the middle of a forward, the first call seen is not the model's: the
 * modules already running are on the Python stack, in frames of Module.__call__'s
 * code, with self as their first local. The outermost of them is the model. */
int trace_is_module_call(struct trace *t, uint64_t code, uint64_t first)
{
	static const char *const calls[] = { "Module._call_impl", "Module._wrapped_call_impl" };
	static const char suffix[] = "torch/nn/modules/module.py";
	const struct code_names *c = first ? code_names_of(t, code, first) : NULL;
	size_t n = c ? strlen(c->filename) : 0;
	if (!c || n < sizeof(suffix) - 1 || strcmp(c->filename + n - (sizeof(suffix) - 1), suffix))
		return 0;
	for (size_t k = 0; k < sizeof(calls) / sizeof(calls[0]); k++)
		if (!strcmp(c->qualname, calls[k]))
			return 1;
	return 0;
}

uint64_t trace_first_object(struct trace *t, uint64_t first)
{
	/* 3.11+ turn a local that a closure captures into a cell in its own slot */
	const struct pyreader *r = &t->target->reader;
	char name[16];
	if (first && py_type_name(r, py_type(r, first), name, sizeof(name)) >= 0 &&
	    !strcmp(name, "cell"))
		return pm_u64(r, first + 16 /* PyCellObject.ob_ref */, NULL);
	return first;
}

static uint64_t enclosing_model(struct trace *t, const struct thread_stack *s)
{
	for (uint32_t i = s->ncodes; i-- > 0;)
		if (trace_is_module_call(t, s->codes[i], s->firsts[i]))
			return trace_first_object(t, s->firsts[i]);
	return 0;
}

/* Markers beat rules; rules hold from an outermost call until the next one. */
static const char *phase_at(struct trace *t, const struct thread_stack *s, uint64_t marker)
{
	if (marker)
		return phase_of(t, marker);
	return s->rule_phase ? s->rule_phase : DEFAULT_PHASE;
}

static void on_marker(struct trace *t, const struct rec_marker *r)
{
	size_t i = (r->gen >> 4) % MARKER_SLOTS, k;
	/* a generator address names the newest marker made there */
	for (k = 0; k < MARKER_SLOTS; k++, i = (i + 1) % MARKER_SLOTS)
		if (!t->markers[i].gen || t->markers[i].gen == r->gen)
			break;
	if (k == MARKER_SLOTS) /* full: markers long over hold the slots; start afresh */
		memset(t->markers, 0, sizeof(t->markers));
	t->markers[i].gen = r->gen;
	snprintf(t->markers[i].name, sizeof(t->markers[i].name), "%.*s", MARKER_NAME_MAX - 1,
		 r->name);
}

static void frame_free(struct frame *f)
{
	free(f->phase);
	free(f->args);
}

static void emit_unwound(struct trace *t, struct thread_stack *s, size_t from, const char *reason)
{
	size_t n = s->depth - from;
	for (size_t k = 0; k < n; k++) {
		struct frame *f = &s->frames[from + k];
		struct buf b = {0};
		int first = 1;
		buf_putc(&b, '{');
		jw_key(&b, &first, "event"), jw_cstr(&b, "unwound");
		jw_key(&b, &first, "module"), jw_cstr(&b, f->mod->path);
		jw_key(&b, &first, "type"), jw_cstr(&b, f->mod->type_name);
		/* the reference's depth: len(stack) - len(frames) + position */
		jw_key(&b, &first, "depth"), jw_int(&b, (int64_t)(s->depth - n + k));
		jw_key(&b, &first, "phase"), jw_cstr(&b, f->phase);
		jw_key(&b, &first, "forward"), jw_int(&b, s->forward);
		jw_key(&b, &first, "call"), jw_int(&b, f->call_id);
		jw_key(&b, &first, "args"), buf_puts(&b, f->args);
		jw_key(&b, &first, "deepest"), jw_bool(&b, k == n - 1);
		jw_key(&b, &first, "reason"), jw_cstr(&b, reason);
		finish_event(t, &b, s->tid, 0);
	}
}

static void truncate_stack(struct thread_stack *s, size_t depth)
{
	while (s->depth > depth)
		frame_free(&s->frames[--s->depth]);
}

static void reconcile(struct trace *t, struct thread_stack *s, const char *reason)
{
	if (!s->depth)
		return;
	emit_unwound(t, s, 0, reason);
	truncate_stack(s, 0);
}

/* ---------------------------------------------------------------- types */

static const char *type_name_cb(void *arg, uint64_t type)
{
	struct trace *t = arg;
	/* small direct-mapped cache; names of live types do not change */
	static struct { uint64_t type; char name[128]; } cache[1024];
	size_t i = (type >> 4) & 1023;
	if (cache[i].type == type && type)
		return cache[i].name;
	char name[128] = "?";
	struct type_info info;
	if (type && t->type_map_fd >= 0 && !bpf_map_lookup_elem(t->type_map_fd, &type, &info)) {
		info.name[sizeof(info.name) - 1] = 0;
		const char *dot = info.heap ? NULL : strrchr(info.name, '.');
		cache[i].type = type;
		snprintf(cache[i].name, sizeof(cache[i].name), "%s", dot ? dot + 1 : info.name);
		return cache[i].name;
	}
	if (type && py_type_name(&t->target->reader, type, name, sizeof(name)) == 0) {
		cache[i].type = type;
		snprintf(cache[i].name, sizeof(cache[i].name), "%s", name);
		return cache[i].name;
	}
	return "?";
}

/* ---------------------------------------------------------------- records */

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
	}
	t->root = self;
	if (t->pattern)
		modfilter_apply(t->pattern, t->opts.modules, &t->mods);
	debugx("root module at %#lx: %d modules", (unsigned long)self, n);
	for (size_t i = 0; verbose > 1 && i < t->mods.cap; i++)
		if (t->mods.slots[i].obj)
			debugx("  %#lx %s (%s)", (unsigned long)t->mods.slots[i].obj,
			       t->mods.slots[i].path, t->mods.slots[i].type_name);
	return 0;
}

static void begin_forward(struct trace *t, uint32_t tid, uint64_t ts, const char *phase)
{
	struct buf b = {0};
	int first = 1;
	t->forward_id++;
	buf_putc(&b, '{');
	jw_key(&b, &first, "event"), jw_cstr(&b, "forward");
	jw_key(&b, &first, "forward"), jw_int(&b, t->forward_id);
	jw_key(&b, &first, "phase"), jw_cstr(&b, phase);
	jw_key(&b, &first, "samples"), jw_null(&b);
	jw_key(&b, &first, "batch_rows"), jw_null(&b);
	finish_event(t, &b, tid, ts);
}

static int describe_call(struct trace *t, const struct rec_call *r, size_t size,
			 struct buf *args, struct buf *kwargs)
{
	struct node_cursor c = { (const uint8_t *)(r + 1), (const uint8_t *)r + size };
	int err = describe_args(t->dctx, &c, args);
	if (!err)
		err = describe_kwargs(t->dctx, &c, kwargs);
	return err;
}

static void write_orphan(struct trace *t, const struct rec_orphan *r);

static void on_enter(struct trace *t, const struct rec_call *r, size_t size)
{
	struct thread_stack *s = thread_of(t, r->hdr.tid);
	if (!t->root && s->depth == 0) {
		uint64_t model = s->ncodes ? enclosing_model(t, s) : 0;
		if (model && model != r->self)
			debugx("attached in the middle of a forward: the model is the module at %#lx",
			       (unsigned long)model);
		set_root(t, model ? model : r->self);
	}
	write_header(t); /* once: after the model is known, for its model_type */
	for (size_t i = 0; i < t->nearly; i++)
		write_orphan(t, &t->early[i]);
	t->nearly = 0;
	if (s->depth == 0 && s->ncodes) {
		s->rule_phase = t->opts.nrules ? rule_phase(t, s) : NULL;
		s->ncodes = 0;
	}
	struct mod_entry *mod = modtree_find(&t->mods, r->self);
	if (r->self == t->root) {
		reconcile(t, s, "a new forward began");
		begin_forward(t, r->hdr.tid, r->hdr.ts_ns, phase_at(t, s, r->marker));
		s->forward = t->forward_id;
	}
	if (!mod) {
		if (!t->unknown_modules++ || verbose > 1)
			debugx("a module outside the model was called (%#lx): not traced",
			       (unsigned long)r->self);
		return;
	}
	if (!mod->traced)
		return;

	struct buf args = {0}, kwargs = {0};
	if (describe_call(t, r, size, &args, &kwargs))
		debugx("malformed description in an enter record of %s", mod->path);
	if (!args.data)
		buf_puts(&args, "[]");
	if (!kwargs.data)
		buf_puts(&kwargs, "{}");

	if (s->depth == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 16;
		s->frames = xrealloc(s->frames, s->cap * sizeof(*s->frames));
	}
	struct frame *f = &s->frames[s->depth++];
	f->mod = mod;
	f->raised = 0;
	f->call_id = ++t->call_id;
	f->phase = xstrdup(phase_at(t, s, r->marker));
	f->args = xstrdup(args.data);

	struct buf b = {0};
	int first = 1;
	buf_putc(&b, '{');
	jw_key(&b, &first, "event"), jw_cstr(&b, "enter");
	jw_key(&b, &first, "module"), jw_cstr(&b, mod->path);
	jw_key(&b, &first, "type"), jw_cstr(&b, mod->type_name);
	jw_key(&b, &first, "depth"), jw_int(&b, (int64_t)s->depth - 1);
	jw_key(&b, &first, "phase"), jw_cstr(&b, f->phase);
	jw_key(&b, &first, "forward"), jw_int(&b, s->forward);
	jw_key(&b, &first, "call"), jw_int(&b, f->call_id);
	jw_key(&b, &first, "args"), buf_puts(&b, args.data);
	jw_key(&b, &first, "kwargs"), buf_puts(&b, kwargs.data);
	jw_key(&b, &first, "mem"), jw_null(&b);
	finish_event(t, &b, r->hdr.tid, r->hdr.ts_ns);
	buf_free(&args);
	buf_free(&kwargs);
}

/* The reference's _pop_to: the innermost frame of this path; frames above it never
 * returned (an exception left them and something in between caught it). */
static int pop_to(struct trace *t, struct thread_stack *s, const char *path, struct frame *out)
{
	for (size_t i = s->depth; i-- > 0;) {
		if (strcmp(s->frames[i].mod->path, path))
			continue;
		if (i + 1 < s->depth) {
			emit_unwound(t, s, i + 1, "an inner module did not return");
			truncate_stack(s, i + 1);
		}
		*out = s->frames[--s->depth];
		return 1;
	}
	return 0;
}

/* A module running when evmbpf attached has returned: the exit hook of a tracer
 * registered at the attach would fire for it without a frame, as an `orphan` exit. Its
 * return value was never seen: `output` is null. */
static void write_orphan(struct trace *t, const struct rec_orphan *r)
{
	struct mod_entry *mod = modtree_find(&t->mods, r->self);
	if (!mod || !mod->traced)
		return;
	struct thread_stack *s = thread_of(t, r->hdr.tid);
	struct frame f = {0};
	if (pop_to(t, s, mod->path, &f)) { /* cannot be: it was entered before the attach */
		frame_free(&f);
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
	finish_event(t, &b, r->hdr.tid, r->hdr.ts_ns);
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
		struct thread_stack *s = m ? thread_of(t, r->hdr.tid) : NULL;
		for (size_t i = s ? s->depth : 0; i-- > 0;)
			if (s->frames[i].mod == m && !s->frames[i].raised) {
				s->frames[i].raised = 1;
				break;
			}
		return;
	}
	struct mod_entry *mod = modtree_find(&t->mods, r->self);
	if (!mod || !mod->traced)
		return;
	struct thread_stack *s = thread_of(t, r->hdr.tid);
	struct buf out = {0};
	struct node_cursor c = { (const uint8_t *)(r + 1), (const uint8_t *)r + size };
	if (describe_value(t->dctx, &c, &out))
		debugx("malformed description in an exit record of %s", mod->path);
	struct frame f = {0};
	int found = pop_to(t, s, mod->path, &f);

	struct buf b = {0};
	int first = 1;
	buf_putc(&b, '{');
	jw_key(&b, &first, "event"), jw_cstr(&b, "exit");
	jw_key(&b, &first, "module"), jw_cstr(&b, mod->path);
	jw_key(&b, &first, "type"), found ? jw_cstr(&b, f.mod->type_name) : jw_null(&b);
	jw_key(&b, &first, "depth"), jw_int(&b, (int64_t)s->depth);
	jw_key(&b, &first, "phase"), jw_cstr(&b, phase_at(t, s, r->marker));
	jw_key(&b, &first, "forward"), jw_int(&b, s->forward);
	jw_key(&b, &first, "call"), found ? jw_int(&b, f.call_id) : jw_null(&b);
	jw_key(&b, &first, "output"), buf_puts(&b, out.data ? out.data : "null");
	if (!found)
		jw_key(&b, &first, "orphan"), jw_bool(&b, 1);
	finish_event(t, &b, r->hdr.tid, r->hdr.ts_ns);
	buf_free(&out);
	if (found)
		frame_free(&f);
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

void trace_record(struct trace *t, const void *data, size_t size)
{
	const struct rec_hdr *h = data;
	if (size < sizeof(*h) || h->size > size)
		return;
	t->records++;
	if (h->ts_ns > t->now_ns)
		t->now_ns = h->ts_ns;
	switch (h->kind) {
	case REC_ENTER:
		if (size < sizeof(struct rec_call))
			return;
		on_enter(t, data, size);
		break;
	case REC_EXIT:
		if (size < sizeof(struct rec_call))
			return;
		on_exit_(t, data, size);
		break;
	case REC_EXCEPTION:
		if (size < sizeof(struct rec_exception))
			return;
		if (!t->last_exc)
			t->last_exc = xmalloc(sizeof(*t->last_exc));
		memcpy(t->last_exc, data, sizeof(*t->last_exc));
		break;
	case REC_STACK:
		if (size >= sizeof(struct rec_stack))
			on_stack(t, data);
		break;
	case REC_ORPHAN:
		if (size >= sizeof(struct rec_orphan))
			on_orphan(t, data);
		break;
	case REC_MARKER:
		if (size >= sizeof(struct rec_marker))
			on_marker(t, data);
		break;
	case REC_MODULE_TYPE:
		if (size >= sizeof(struct rec_module_type))
			on_module_type(t, data);
		break;
	}
}

/* ---------------------------------------------------------------- the end */

static void source_line(struct trace *t, const char *file, int lineno, struct buf *out)
{
	if (lineno <= 0 || file[0] != '/' || t->target->root_fd < 0)
		return;
	int fd = openat(t->target->root_fd, file + 1, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	FILE *f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		return;
	}
	char *line = NULL;
	size_t cap = 0;
	int n = 0;
	while (getline(&line, &cap, f) >= 0) {
		if (++n < lineno)
			continue;
		char *p = line, *end = line + strlen(line);
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r' || *p == '\f' || *p == '\v')
			p++;
		while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\n' ||
				   end[-1] == '\r' || end[-1] == '\f' || end[-1] == '\v'))
			*--end = 0;
		if (*p)
			buf_printf(out, "    %s\n", p);
		break;
	}
	free(line);
	fclose(f);
}

/* The exception's message as UTF-8: msg holds msg_len code points of msg_kind bytes
 * (1: Latin-1, which ASCII is part of; 2: UCS-2; 4: UCS-4), or a C string (kind 0). */
static void exc_message_utf8(const struct rec_exception *e, char *dst, size_t cap)
{
	size_t o = 0;
	unsigned kind = e->msg_kind;
	dst[0] = 0;
	if (e->msg_len <= 0)
		return;
	if (kind != 1 && kind != 2 && kind != 4) {
		snprintf(dst, cap, "%.*s", EXC_MSG_MAX, e->msg);
		return;
	}
	const uint8_t *d = (const uint8_t *)e->msg;
	for (size_t i = 0; i < (size_t)e->msg_len && (i + 1) * kind <= EXC_MSG_MAX; i++) {
		uint32_t c = kind == 1 ? d[i] : kind == 2 ? (uint32_t)d[2 * i] | (uint32_t)d[2 * i + 1] << 8
				     : (uint32_t)d[4 * i] | (uint32_t)d[4 * i + 1] << 8 |
				       (uint32_t)d[4 * i + 2] << 16 | (uint32_t)d[4 * i + 3] << 24;
		if (o + 5 >= cap)
			break;
		if (c < 0x80) {
			dst[o++] = (char)c;
		} else if (c < 0x800) {
			dst[o++] = (char)(0xc0 | (c >> 6));
			dst[o++] = (char)(0x80 | (c & 0x3f));
		} else if (c < 0x10000) {
			dst[o++] = (char)(0xe0 | (c >> 12));
			dst[o++] = (char)(0x80 | ((c >> 6) & 0x3f));
			dst[o++] = (char)(0x80 | (c & 0x3f));
		} else {
			dst[o++] = (char)(0xf0 | (c >> 18));
			dst[o++] = (char)(0x80 | ((c >> 12) & 0x3f));
			dst[o++] = (char)(0x80 | ((c >> 6) & 0x3f));
			dst[o++] = (char)(0x80 | (c & 0x3f));
		}
	}
	dst[o] = 0;
}

/* CPython 3.11+ location table (Objects/locations.md): the line of the code unit at
 * byte offset lasti; -1 when unknown. */
static unsigned lt_varint(const uint8_t *lt, size_t n, size_t *i)
{
	unsigned v = 0, shift = 0;
	while (*i < n) {
		uint8_t b = lt[(*i)++];
		v |= (unsigned)(b & 63) << shift;
		shift += 6;
		if (!(b & 64) || shift > 24)
			break;
	}
	return v;
}

static int lt_svarint(const uint8_t *lt, size_t n, size_t *i)
{
	unsigned v = lt_varint(lt, n, i);
	return v & 1 ? -(int)(v >> 1) : (int)(v >> 1);
}

static int line_from_table(const struct tb_entry *tb)
{
	const uint8_t *lt = tb->linetable;
	size_t n = tb->lt_len < EXC_LT_MAX ? tb->lt_len : EXC_LT_MAX, i = 0;
	int line = tb->firstlineno, addr = 0, target = tb->lasti / 2;
	while (i < n) {
		uint8_t b = lt[i++];
		if (!(b & 0x80))
			return -1;
		int code = (b >> 3) & 15, len = (b & 7) + 1, none = 0;
		if (code == 15) {
			none = 1;
		} else if (code == 14) {
			line += lt_svarint(lt, n, &i);
			lt_varint(lt, n, &i);
			lt_varint(lt, n, &i);
			lt_varint(lt, n, &i);
		} else if (code == 13) {
			line += lt_svarint(lt, n, &i);
		} else if (code >= 10) {
			line += code - 10;
			i += 2;
		} else {
			i += 1;
		}
		if (target < addr + len)
			return none ? -1 : line;
		addr += len;
	}
	return -1;
}

static const char *exc_short_name(const char *tp_name)
{
	const char *dot = strrchr(tp_name, '.');
	return dot ? dot + 1 : tp_name;
}

static void write_error(struct trace *t, const char *exc_type, const char *message,
			const struct rec_exception *e, uint32_t tid)
{
	struct thread_stack *s = NULL;
	for (size_t i = 0; i < t->nthreads && !s; i++)
		if (t->threads[i].tid == tid && t->threads[i].depth)
			s = &t->threads[i];
	for (size_t i = 0; i < t->nthreads && !s; i++)
		if (t->threads[i].depth)
			s = &t->threads[i];
	const struct frame *deepest = s ? &s->frames[s->depth - 1] : NULL;

	struct buf b = {0};
	int first = 1;
	buf_putc(&b, '{');
	jw_key(&b, &first, "event"), jw_cstr(&b, "error");
	jw_key(&b, &first, "exc_type"), jw_cstr(&b, exc_type);
	jw_key(&b, &first, "message"), jw_cstr(&b, message);
	jw_key(&b, &first, "phase"), jw_cstr(&b, deepest ? deepest->phase : DEFAULT_PHASE);
	jw_key(&b, &first, "module"), deepest ? jw_cstr(&b, deepest->mod->path) : jw_null(&b);
	jw_key(&b, &first, "inspection"), jw_null(&b);
	jw_key(&b, &first, "detected_at"), jw_null(&b);
	jw_key(&b, &first, "forward"), jw_int(&b, s ? s->forward : t->forward_id);
	jw_key(&b, &first, "samples"), jw_null(&b);
	jw_key(&b, &first, "batch_rows"), jw_null(&b);
	jw_key(&b, &first, "mem"), jw_null(&b);
	jw_key(&b, &first, "traceback");
	buf_putc(&b, '[');
	if (e) {
		/* traceback.format_exception(...)[-12:]: header, one string a frame, the last line */
		size_t total = e->total_frames + 2, skip = total > 12 ? total - 12 : 0, idx = 0;
		int firstline = 1;
		struct buf item = {0};
#define ITEM()                                                       \
	do {                                                         \
		if (idx++ >= skip) {                                 \
			if (!firstline)                              \
				buf_puts(&b, ", ");                  \
			firstline = 0;                               \
			jw_str(&b, item.data ? item.data : "", item.len); \
		}                                                    \
		buf_free(&item);                                     \
	} while (0)
		buf_puts(&item, "Traceback (most recent call last):\n");
		ITEM();
		size_t have = e->nframes, start_frame = e->total_frames - have;
		for (size_t k = 0; k < e->total_frames; k++) {
			if (k < start_frame) {
				idx++;
				continue;
			}
			const struct tb_entry *tb = &e->tb[k % EXC_TB_MAX];
			int lineno = tb->lineno >= 0 ? tb->lineno : line_from_table(tb);
			buf_printf(&item, "  File \"%s\", line %d, in %s\n", tb->filename, lineno,
				   tb->func);
			source_line(t, tb->filename, lineno, &item);
			ITEM();
		}
		if (message[0])
			buf_printf(&item, "%s: %s\n", exc_type, message);
		else
			buf_printf(&item, "%s\n", exc_type);
		ITEM();
#undef ITEM
	}
	buf_putc(&b, ']');
	finish_event(t, &b, tid, 0);
}

static void reconcile_all(struct trace *t, const char *reason)
{
	for (size_t i = 0; i < t->nthreads; i++)
		reconcile(t, &t->threads[i], reason);
}

/* Frames entered and neither returned nor left by an exception: still running. */
static int running_frames(const struct trace *t)
{
	for (size_t i = 0; i < t->nthreads; i++)
		for (size_t k = 0; k < t->threads[i].depth; k++)
			if (!t->threads[i].frames[k].raised)
				return 1;
	return 0;
}

void trace_finish(struct trace *t, int exit_code)
{
	if (t->ended)
		return;
	t->ended = 1;
	/* what follows happened at the target's exit, or now (evmbpf detaches) */
	struct timespec mono;
	clock_gettime(CLOCK_MONOTONIC, &mono);
	uint64_t now = (uint64_t)mono.tv_sec * 1000000000ULL + (uint64_t)mono.tv_nsec;
	t->now_ns = t->end_ns ? t->end_ns : now;
	write_header(t);
	if (exit_code >= 0 && (exit_code & 0x7f) && (exit_code & 0x7f) != 0x7f) {
		int sig = exit_code & 0x7f;
		char name[32], msg[96];
		const char *abbrev = sigabbrev_np(sig);
		snprintf(name, sizeof(name), "SIG%s", abbrev ? abbrev : "?");
		snprintf(msg, sizeof(msg), "the process was killed by signal %d (%s)", sig,
			 strsignal(sig));
		write_error(t, name, msg, NULL, t->target->pid);
		reconcile_all(t, "process exited");
	} else if (t->last_exc && (exit_code < 0 || exit_code != 0)) {
		const struct rec_exception *e = t->last_exc;
		const char *type = exc_short_name(e->type_name);
		t->now_ns = e->hdr.ts_ns; /* when it reached the top */
		char text[EXC_MSG_MAX * 4 + 4];
		exc_message_utf8(e, text, sizeof(text));
		char msg[sizeof(text) + 4];
		if (e->msg_len < 0)
			msg[0] = 0;
		else if (!strcmp(type, "KeyError"))
			snprintf(msg, sizeof(msg), "'%s'", text);
		else
			snprintf(msg, sizeof(msg), "%s", text);
		write_error(t, type, msg, e, e->hdr.tid);
		reconcile_all(t, "session ended");
	} else if (exit_code >= 0 && (exit_code & 0x7f) == 0 && running_frames(t)) {
		/* it exited with modules still running: os._exit(), or exit() in native code */
		char msg[160];
		snprintf(msg, sizeof(msg), "the process exited with status %d while modules were "
			 "running (os._exit() or exit() in native code)", (exit_code >> 8) & 0xff);
		write_error(t, "exit", msg, NULL, t->target->pid);
		reconcile_all(t, "process exited");
	} else {
		reconcile_all(t, "session ended");
	}
}

void trace_set_dropped(struct trace *t, uint64_t dropped)
{
	static int warned; /* called as drops are seen: where they happened, and at the end */
	if (!dropped)
		return;
	if (!warned++)
		warnx_("warning: records were dropped (the ring buffer was full); the trace says "
		       "how many and where in `dropped` events");
	struct buf b = {0};
	buf_printf(&b, "{\"event\": \"dropped\", \"count\": %llu, \"where\": \"ring buffer\"",
		   (unsigned long long)dropped);
	finish_event(t, &b, 0, 0);
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
	if (opts->tail > 0)
		t->ring = xcalloc((size_t)opts->tail, sizeof(*t->ring));
	static struct describe_ctx dctx;
	dctx.type_name = type_name_cb;
	dctx.arg = t;
	dctx.reader = &target->reader;
	t->dctx = &dctx;

	struct timespec rt, mono;
	clock_gettime(CLOCK_REALTIME, &rt);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	t->boot_to_realtime_ns = (rt.tv_sec - mono.tv_sec) * 1000000000ULL + rt.tv_nsec - mono.tv_nsec;

	if (!strcmp(path, "-")) {
		t->out = stdout;
		return 0;
	}
	int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (force ? O_TRUNC : O_EXCL);
	int fd = open(path, flags, 0600);
	if (fd < 0) {
		if (errno == EEXIST)
			warnx_("%s exists; evmbpf does not overwrite a file it did not create "
			       "(remove it, pick another --out, or pass --force)", path);
		else if (errno == ELOOP)
			warnx_("%s is a symbolic link; evmbpf does not follow it (name the real file)",
			       path);
		else
			warnx_("cannot create %s: %s", path, strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		warnx_("%s is not a regular file", path);
		close(fd);
		return -1;
	}
	/* under sudo, the trace belongs to the user who asked for it */
	const char *uid = getenv("SUDO_UID"), *gid = getenv("SUDO_GID");
	if (uid && gid && fchown(fd, (uid_t)atoi(uid), (gid_t)atoi(gid)))
		debugx("cannot give %s to uid %s: %s", path, uid, strerror(errno));
	t->out = fdopen(fd, "w");
	if (!t->out) {
		close(fd);
		return -1;
	}
	/* a streaming trace is written in big pieces: fewer write(2)s for the collector
	 * (the loop flushes every pass anyway) */
	setvbuf(t->out, NULL, _IOFBF, 1 << 20);
	return 0;
}

int trace_close(struct trace *t)
{
	int rc = 0;
	if (t->opts.tail > 0) {
		size_t cap = (size_t)t->opts.tail;
		for (size_t k = 0; k < t->ring_count && !t->write_failed; k++) {
			char *line = t->ring[(t->ring_head + k) % cap];
			size_t n = strlen(line);
			if (fwrite(line, 1, n, t->out) != n)
				t->write_failed = errno ? errno : EIO;
		}
		int64_t dropped = t->seq - (int64_t)t->ring_count;
		if (dropped > 0 && !t->write_failed)
			fprintf(t->out, "{\"event\": \"dropped\", \"count\": %lld, \"i\": %lld}\n",
				(long long)dropped, (long long)t->seq + 1);
		for (size_t k = 0; k < cap; k++)
			free(t->ring[k]);
		free(t->ring);
		t->ring = NULL;
	}
	if (t->out && fflush(t->out))
		t->write_failed = errno ? errno : EIO;
	if (t->write_failed) {
		if (!t->write_reported)
			warnx_("cannot write %s: %s", t->out_path, strerror(t->write_failed));
		rc = -1;
	}
	if (t->out && t->out != stdout)
		fclose(t->out);
	t->out = NULL;
	for (size_t i = 0; i < t->nthreads; i++) {
		truncate_stack(&t->threads[i], 0);
		free(t->threads[i].frames);
	}
	free(t->threads);
	free(t->last_exc);
	modtree_free(&t->mods);
	pyre_free(t->pattern);
	return rc;
}
