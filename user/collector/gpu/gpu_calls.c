/* --cupti: kernels, copies and sets attributed to module calls (see gpu_calls.h). */
#include "gpu_calls.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

void gpu_calls_init(struct gpu_calls *g)
{
	memset(g, 0, sizeof(*g));
}

void gpu_calls_free(struct gpu_calls *g)
{
	for (size_t i = 0; i < g->nthreads; i++)
		free(g->threads[i].open), free(g->threads[i].all);
	for (size_t i = 0; i < g->names_cap; i++)
		free(g->names[i].copy);
	free(g->threads);
	free(g->calls);
	free(g->apis);
	free(g->names);
	memset(g, 0, sizeof(*g));
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

/* Module paths are the trace's own strings, which may be freed before the end: keep a
 * copy of each, found by the address the trace passed. */
static const char *intern(struct gpu_calls *g, const char *s)
{
	if (!s)
		return NULL;
	if (2 * (g->nnames + 1) > g->names_cap) {
		size_t cap = g->names_cap ? g->names_cap * 2 : 256;
		__typeof__(g->names) n = xcalloc(cap, sizeof(*n));
		for (size_t i = 0; i < g->names_cap; i++) {
			if (!g->names[i].key)
				continue;
			size_t j = mix((uintptr_t)g->names[i].key) & (cap - 1);
			while (n[j].key)
				j = (j + 1) & (cap - 1);
			n[j] = g->names[i];
		}
		free(g->names);
		g->names = n;
		g->names_cap = cap;
	}
	size_t j = mix((uintptr_t)s) & (g->names_cap - 1);
	while (g->names[j].key) {
		if (g->names[j].key == s && !strcmp(g->names[j].copy, s))
			return g->names[j].copy;
		j = (j + 1) & (g->names_cap - 1);
	}
	g->names[j].key = s;
	g->names[j].copy = xstrdup(s);
	g->nnames++;
	return g->names[j].copy;
}

static __typeof__(((struct gpu_calls *)0)->threads) thread_of(struct gpu_calls *g, uint32_t tid)
{
	for (size_t i = 0; i < g->nthreads; i++)
		if (g->threads[i].tid == tid)
			return &g->threads[i];
	g->threads = xrealloc(g->threads, (g->nthreads + 1) * sizeof(*g->threads));
	__typeof__(g->threads) t = &g->threads[g->nthreads++];
	memset(t, 0, sizeof(*t));
	t->tid = tid;
	return t;
}

void gpu_calls_enter(struct gpu_calls *g, uint32_t tid, int64_t call_id, const char *module,
		     uint64_t ns)
{
	__typeof__(g->threads) t = thread_of(g, tid);
	if (g->ncalls == g->cap) {
		g->cap = g->cap ? g->cap * 2 : 1024;
		g->calls = xrealloc(g->calls, g->cap * sizeof(*g->calls));
	}
	struct gpu_call *c = &g->calls[g->ncalls++];
	memset(c, 0, sizeof(*c));
	c->tid = tid;
	c->call_id = call_id;
	c->module = intern(g, module);
	c->enter_ns = ns;
	c->exit_ns = UINT64_MAX;
	c->parent = t->depth ? t->open[t->depth - 1] : 0;
	if (t->depth == t->cap) {
		t->cap = t->cap ? t->cap * 2 : 16;
		t->open = xrealloc(t->open, t->cap * sizeof(*t->open));
	}
	t->open[t->depth++] = g->ncalls;
	if (t->nall == t->allcap) {
		t->allcap = t->allcap ? t->allcap * 2 : 256;
		t->all = xrealloc(t->all, t->allcap * sizeof(*t->all));
	}
	t->all[t->nall++] = g->ncalls;
}

void gpu_calls_exit(struct gpu_calls *g, uint32_t tid, int64_t call_id, uint64_t ns)
{
	__typeof__(g->threads) t = thread_of(g, tid);
	/* frames an exception left stay open under it: they end with it */
	for (size_t d = t->depth; d-- > 0;) {
		if (g->calls[t->open[d] - 1].call_id != call_id)
			continue;
		for (size_t k = d; k < t->depth; k++) {
			struct gpu_call *c = &g->calls[t->open[k] - 1];
			if (c->exit_ns == UINT64_MAX)
				c->exit_ns = ns;
		}
		t->depth = d;
		return;
	}
}

static struct gpu_api *api_slot(struct gpu_calls *g, uint32_t corr, int create)
{
	if (create && 2 * (g->napis + 1) > g->apis_cap) {
		size_t cap = g->apis_cap ? g->apis_cap * 2 : 4096;
		struct gpu_api *n = xcalloc(cap, sizeof(*n));
		for (size_t i = 0; i < g->apis_cap; i++) {
			if (!g->apis[i].used)
				continue;
			size_t j = mix(g->apis[i].corr) & (cap - 1);
			while (n[j].used)
				j = (j + 1) & (cap - 1);
			n[j] = g->apis[i];
		}
		free(g->apis);
		g->apis = n;
		g->apis_cap = cap;
	}
	if (!g->apis_cap)
		return NULL;
	size_t j = mix(corr) & (g->apis_cap - 1);
	while (g->apis[j].used) {
		if (g->apis[j].corr == corr)
			return &g->apis[j];
		j = (j + 1) & (g->apis_cap - 1);
	}
	if (!create)
		return NULL;
	g->apis[j].used = 1;
	g->apis[j].corr = corr;
	g->napis++;
	return &g->apis[j];
}

static uint64_t span(uint64_t start, uint64_t end)
{
	return end > start ? end - start : 0;
}

void gpu_calls_record(struct gpu_calls *g, const struct cupti_rec *r)
{
	struct gpu_work w = {0};
	switch (r->kind) {
	case CR_API: {
		struct gpu_api *a = api_slot(g, (uint32_t)r->v[0], 1);
		if (!a->tid) {   /* the runtime API's enter comes before its driver call's */
			a->tid = r->tid;
			a->ns = r->v[1];
		}
		return;
	}
	case CR_KERNEL:
		w.kernels = 1, w.kernel_ns = span(r->v[1], r->v[2]);
		break;
	case CR_MEMCPY:
		w.memcpys = 1, w.memcpy_bytes = r->v[3], w.memcpy_ns = span(r->v[1], r->v[2]);
		break;
	case CR_MEMSET:
		w.memsets = 1, w.memset_bytes = r->v[3];
		break;
	case CR_LOST:
		g->lost += r->v[0];
		return;
	default:
		return;
	}
	/* the activity arrives after its API's enter (the same ring, later) */
	struct gpu_api *a = api_slot(g, (uint32_t)r->v[0], 1);
	a->work.kernels += w.kernels, a->work.kernel_ns += w.kernel_ns;
	a->work.memcpys += w.memcpys, a->work.memcpy_bytes += w.memcpy_bytes;
	a->work.memcpy_ns += w.memcpy_ns;
	a->work.memsets += w.memsets, a->work.memset_bytes += w.memset_bytes;
}

size_t gpu_calls_at(const struct gpu_calls *g, uint32_t tid, uint64_t ns)
{
	/* the thread's last call entered at or before ns, then up its parents to the one
	 * still running at ns */
	for (size_t t = 0; t < g->nthreads; t++) {
		if (g->threads[t].tid != tid)
			continue;
		const size_t *all = g->threads[t].all;
		size_t lo = 0, hi = g->threads[t].nall;
		while (lo < hi) {
			size_t mid = lo + (hi - lo) / 2;
			if (g->calls[all[mid] - 1].enter_ns <= ns)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (!lo)
			return 0;
		for (size_t c = all[lo - 1]; c; c = g->calls[c - 1].parent)
			if (g->calls[c - 1].exit_ns > ns)
				return c;
		return 0;
	}
	return 0;
}

static void add(struct gpu_work *to, const struct gpu_work *w)
{
	to->kernels += w->kernels, to->kernel_ns += w->kernel_ns;
	to->memcpys += w->memcpys, to->memcpy_bytes += w->memcpy_bytes;
	to->memcpy_ns += w->memcpy_ns;
	to->memsets += w->memsets, to->memset_bytes += w->memset_bytes;
}

void gpu_calls_resolve(struct gpu_calls *g)
{
	for (size_t i = 0; i < g->apis_cap; i++) {
		struct gpu_api *a = &g->apis[i];
		if (!a->used)
			continue;
		if (g->agent_tid && a->tid == g->agent_tid) {
			add(&g->numeric, &a->work);
			continue;
		}
		add(&g->all, &a->work);
		size_t c = a->tid ? gpu_calls_at(g, a->tid, a->ns) : 0;
		add(c ? &g->calls[c - 1].self : &g->unattributed, &a->work);
	}
	for (size_t i = 0; i < g->ncalls; i++)
		add(&g->calls[i].total, &g->calls[i].self);
	/* children come after their parent: sum from the last */
	for (size_t i = g->ncalls; i-- > 0;)
		if (g->calls[i].parent)
			add(&g->calls[g->calls[i].parent - 1].total, &g->calls[i].total);
}

int gpu_calls_cupti(const struct gpu_calls *g, char lib[CUPTI_LIB_MAX], char how[CUPTI_HOW_MAX],
		    uint64_t *version)
{
	const struct cupti_ring *r = g ? g->ring : NULL;
	uint32_t state = r ? __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) : 0;
	if (state != 1 && state != 3)
		return 0;
	memcpy(lib, r->lib, CUPTI_LIB_MAX);
	lib[CUPTI_LIB_MAX - 1] = 0;
	memcpy(how, r->lib_how, CUPTI_HOW_MAX);
	how[CUPTI_HOW_MAX - 1] = 0;
	*version = r->cupti_version;
	return 1;
}

uint64_t gpu_cuda_major(uint64_t api)
{
	return api >= 100000 ? api / 10000 : api >= 18 ? 12 : 11;
}
