/* evmbpf dump: what every thread of a running PyTorch process is doing right now, in
 * modules. No probe is attached: the interpreter's thread list and each thread's frames
 * are read from the target's memory (process_vm_readv; pyframes.c), as the attach reads
 * the modules running at a --pid attach. The frames of Module.__call__ (_call_impl /
 * _wrapped_call_impl) hold the module as their first local and what it was called with
 * as the next two (*args, **kwargs: dump_values.c); phase() markers are found as the
 * __exit__ of a `with` statement on a frame's value stack (dump_markers.c). This file:
 * the snapshot, each thread's modules and their paths. Printed by dump_print.c, driven
 * by dump_cli.c. */
#include "dump.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "phases.h"
#include "dump_markers.h"
#include "pyframes.h"

/* ---------------------------------------------------------------- module paths */

/* Where `want` is under `from` in the _modules tree: its path relative to `from`
 * ("a.b"), breadth first and reading only the _modules dicts on the way (a forward's
 * next module is usually a child or grandchild of the one that called it; a 32-layer
 * model's whole tree is 50,000 reads). A module registered under two names gets the
 * shorter, where named_modules() gives the first in its pre-order. */
struct bfs_node {
	uint64_t obj;
	char *path;
};

struct bfs {
	struct dump_reading *g;
	struct bfs_node *q;
	size_t n, cap;
	const char *prefix;
	uint64_t want;
	char *found;
};

static int bfs_child(void *arg, uint64_t key, uint64_t value)
{
	struct bfs *b = arg;
	char name[256];
	if (!value || value == b->g->t->none_obj || py_str(b->g->r, key, name, sizeof(name)) < 0)
		return 0;
	struct buf path = {0};
	buf_printf(&path, "%s%s%s", b->prefix, b->prefix[0] ? "." : "", name);
	if (value == b->want) {
		b->found = path.data;
		return 1;
	}
	if (b->n == b->cap) {
		b->cap = b->cap ? 2 * b->cap : 64;
		b->q = xrealloc(b->q, b->cap * sizeof(*b->q));
	}
	b->q[b->n++] = (struct bfs_node){ value, path.data };
	return 0;
}

static char *path_under(struct dump_reading *g, uint64_t from, uint64_t want, size_t limit)
{
	struct bfs b = { .g = g, .want = want };
	b.q = xmalloc(64 * sizeof(*b.q));
	b.cap = 64;
	b.q[b.n++] = (struct bfs_node){ from, xstrdup("") };
	for (size_t i = 0; i < b.n && i < limit && !b.found; i++) {
		uint64_t modules = py_instance_attr(g->r, b.q[i].obj, "_modules");
		b.prefix = b.q[i].path;
		if (modules)
			py_dict_items(g->r, modules, bfs_child, &b);
	}
	for (size_t i = 0; i < b.n; i++)
		free(b.q[i].path);
	free(b.q);
	return b.found;
}

static void set_path(struct dump_module *m, const char *base, const char *rel)
{
	if (!rel)
		snprintf(m->path, sizeof(m->path), "?");
	else if (!strcmp(base, "<root>"))
		snprintf(m->path, sizeof(m->path), "%s", rel);
	else
		snprintf(m->path, sizeof(m->path), "%s.%s", base, rel);
}

/* The running modules' paths, each found under the one that called it (else under the
 * thread's outermost module). */
static void name_modules(struct dump_reading *g, struct dump_thread *th)
{
	for (int k = 0; k < th->nmods; k++) {
		struct dump_module *m = &th->mods[k];
		if (!k) {
			snprintf(m->path, sizeof(m->path), "<root>");
			continue;
		}
		char *rel = path_under(g, th->mods[k - 1].self, m->self, 4096);
		if (rel) {
			set_path(m, th->mods[k - 1].path, rel);
		} else {
			rel = path_under(g, th->mods[0].self, m->self, 1 << 16);
			set_path(m, "<root>", rel);
		}
		free(rel);
	}
}

/* ---------------------------------------------------------------- threads */

struct raw_frame {
	uint64_t f, code, first;
	int module;           /* a Module.__call__ frame */
	char marker[MARKER_NAME_MAX];
};

static void read_thread(struct dump_reading *g, uint64_t ts, struct dump_thread *th)
{
	const struct pyreader *r = g->r;
	const struct py_offsets *o = g->o;
	static struct raw_frame fr[PY_FRAMES_MAX];
	int n = 0;
	uint64_t sig = 1469598103934665603ULL, inner = 0;
	th->tstate = ts;
	th->tid = py_thread_tid(g->t, &g->tasks, ts);
	th->line = -1;
	if (th->tid) {
		char path[96];
		snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", g->t->pid, th->tid);
		FILE *c = fopen(path, "re");
		if (c) {
			if (fgets(th->name, sizeof(th->name), c))
				th->name[strcspn(th->name, "\n")] = 0;
			fclose(c);
		}
	}
	uint64_t f = py_thread_frame(g->t, ts);
	for (int depth = 0; f && depth < 4 * PY_FRAMES_MAX && n < PY_FRAMES_MAX;
	     depth++, inner = f, f = py_frame_back(g->t, f)) {
		uint64_t code = py_frame_code(g->t, f);
		if (!code)
			continue;
		struct raw_frame *x = &fr[n++];
		x->f = f;
		x->code = code;
		x->first = pm_u64(r, f + o->iframe_localsplus, NULL) & ~7ULL;
		x->module = trace_is_module_call(&g->tr, code, x->first);
		x->marker[0] = 0;
		uint64_t pos = pm_u64(r, f + o->frame_instr, NULL);
		sig = (sig ^ f ^ (pos << 1) ^ code) * 1099511628211ULL;
		if (g->t->gen_type) {
			uint64_t from = f + o->iframe_localsplus;
			size_t words = 64;
			if (o->version <= 310) /* the frame object's extras: locals, cells, stack */
				words = (size_t)pm_u64(r, f + 16, NULL);
			else if (inner > from && inner - from <= 4096)
				words = (size_t)(inner - from) / 8;
			dump_frame_marker(g, from, words, x->marker, sizeof(x->marker));
		}
	}
	th->signature = sig;
	/* the top frame */
	if (n) {
		const struct raw_frame *x = &fr[0];
		th->has_frame = 1;
		py_code_names(g->t, x->code, 1, th->file, sizeof(th->file), th->func,
			      sizeof(th->func));
		th->line = py_frame_line(g->t, x->f, x->code);
	}
	/* the thread's phase: the innermost marker */
	for (int i = 0; i < n; i++)
		if (fr[i].marker[0]) {
			snprintf(th->phase, sizeof(th->phase), "%s", fr[i].marker);
			break;
		}
	/* modules, outermost first; torch 2's _wrapped_call_impl around _call_impl is one */
	uint64_t prev = 0;
	const char *outer_marker = "";
	for (int i = n; i-- > 0;) {
		if (fr[i].marker[0])
			outer_marker = fr[i].marker;
		if (!fr[i].module)
			continue;
		uint64_t self = trace_first_object(&g->tr, fr[i].first);
		if (self == prev || th->nmods == DUMP_MODULES_MAX)
			continue;
		prev = self;
		struct dump_module *m = &th->mods[th->nmods++];
		m->self = self;
		if (py_type_name(r, py_type(r, self), m->type, sizeof(m->type)))
			snprintf(m->type, sizeof(m->type), "?");
		snprintf(m->phase, sizeof(m->phase), "%s", outer_marker);
		/* (self, *args, **kwargs): the next two locals, in a cell if a closure took them */
		uint64_t args = trace_first_object(
			&g->tr, pm_u64(r, fr[i].f + o->iframe_localsplus + 8, NULL) & ~7ULL);
		uint64_t kwargs = trace_first_object(
			&g->tr, pm_u64(r, fr[i].f + o->iframe_localsplus + 16, NULL) & ~7ULL);
		dump_describe_call(g, args, kwargs, &m->args, &m->kwargs);
	}
	name_modules(g, th);
}

int dump_read(struct target *t, struct dump_snapshot *s)
{
	static struct dump_reading g;
	memset(&g, 0, sizeof(g));
	g.t = t;
	g.r = &t->reader;
	g.o = t->off;
	g.tr.target = t;
	g.dctx.type_name = dump_type_name;
	g.dctx.arg = &g;
	g.dctx.reader = &t->reader;
	g.dctx.warned_cut = 1; /* an int too large is {"type": "int"}, as in a trace */
	memset(s, 0, sizeof(*s));
	if (!t->runtime)
		return -1;
	py_tasks_read(&g.tasks, t->pid);
	uint64_t ts;
	if (py_threads_first(t, &ts))
		return -1;
	for (; ts && s->n < PY_THREADS_MAX; ts = py_thread_next(t, ts)) {
		s->threads = xrealloc(s->threads, (size_t)(s->n + 1) * sizeof(*s->threads));
		struct dump_thread *th = &s->threads[s->n++];
		memset(th, 0, sizeof(*th));
		read_thread(&g, ts, th);
	}
	/* A thread whose outermost module is a submodule of another thread's model (a
	 * worker calling model.encoder): named in that model's tree. */
	for (int i = 0; i < s->n; i++) {
		struct dump_thread *th = &s->threads[i];
		for (int j = 0; th->nmods && j < s->n; j++) {
			const struct dump_thread *other = &s->threads[j];
			if (j == i || !other->nmods || other->mods[0].self == th->mods[0].self)
				continue;
			char *at = path_under(&g, other->mods[0].self, th->mods[0].self, 1 << 16);
			if (!at)
				continue;
			/* "<root>" becomes `at`, and "x.y" under it "at.x.y" */
			for (int m = 0; m < th->nmods; m++) {
				char *path = th->mods[m].path;
				struct buf b = {0};
				if (!m)
					buf_puts(&b, at);
				else if (strcmp(path, "?"))
					buf_printf(&b, "%s.%s", at, path);
				else
					buf_puts(&b, "?");
				snprintf(path, sizeof(th->mods[m].path), "%s", b.data);
				buf_free(&b);
			}
			free(at);
			break;
		}
	}
	s->tensor_invalid = g.tensor_invalid;
	return 0;
}

void dump_snapshot_free(struct dump_snapshot *s)
{
	for (int i = 0; i < s->n; i++)
		for (int k = 0; k < s->threads[i].nmods; k++) {
			buf_free(&s->threads[i].mods[k].args);
			buf_free(&s->threads[i].mods[k].kwargs);
		}
	free(s->threads);
	memset(s, 0, sizeof(*s));
}

static uint64_t signature(const struct dump_snapshot *s)
{
	uint64_t h = (uint64_t)s->n;
	for (int i = 0; i < s->n; i++)
		h = (h ^ s->threads[i].signature ^ s->threads[i].tstate) * 1099511628211ULL;
	return h;
}

int dump_read_running(struct target *t, struct dump_snapshot *s, int *reads, int *consistent)
{
	uint64_t last = 0;
	int rc = 0;
	*consistent = 0;
	for (*reads = 1; *reads <= 10; (*reads)++) {
		dump_snapshot_free(s);
		rc = dump_read(t, s);
		uint64_t sig = signature(s);
		if (rc || (*reads > 1 && sig == last)) {
			*consistent = !rc;
			break;
		}
		last = sig;
	}
	if (*reads > 10)
		*reads = 10;
	return rc;
}
