/* The model's module names, read from the target: its `_modules` dicts, walked as
 * named_modules() walks them. The graph is the target's, so it is hostile input: one
 * read is bounded in the dict entries it looks at, the bytes of names it keeps and the
 * time it takes (MODTREE_*_MAX); past a bound the walk stops, the modules named so far
 * keep their names, and the tree says why it stopped (struct modtree's cut). A module
 * reached again (shared, or every module's `_modules` the same dict) costs a lookup in
 * the table, not a read. */
#include "modtree.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

#define MAX_MODULES (1u << 20)
#define MAX_DEPTH 64
/* a 32-layer Llama has about 300 modules and 1,000 entries, an MoE with 128 experts in
 * 48 layers about 20,000 and 20,000; names average some 40 bytes */
#define MODTREE_ENTRIES_MAX (4u << 20)
#define MODTREE_BYTES_MAX (64u << 20)
#define MODTREE_NS_MAX (2ull * 1000000000ull)

static uint64_t mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static size_t slot_of(uint64_t obj, size_t cap)
{
	return (size_t)((obj >> 4) * 0x9E3779B97F4A7C15ULL) & (cap - 1);
}

static void grow(struct modtree *t);

static struct mod_entry *insert(struct modtree *t, uint64_t obj)
{
	if ((t->count + 1) * 2 > t->cap)
		grow(t);
	size_t i = slot_of(obj, t->cap);
	while (t->slots[i].obj) {
		if (t->slots[i].obj == obj)
			return NULL;
		i = (i + 1) & (t->cap - 1);
	}
	t->slots[i].obj = obj;
	t->slots[i].order = t->count++;
	return &t->slots[i];
}

static void grow(struct modtree *t)
{
	struct modtree bigger = { .cap = t->cap ? t->cap * 2 : 256 };
	bigger.slots = xcalloc(bigger.cap, sizeof(*bigger.slots));
	for (size_t i = 0; i < t->cap; i++) {
		if (!t->slots[i].obj)
			continue;
		size_t j = slot_of(t->slots[i].obj, bigger.cap);
		while (bigger.slots[j].obj)
			j = (j + 1) & (bigger.cap - 1);
		bigger.slots[j] = t->slots[i];
		bigger.count++;
	}
	free(t->slots);
	*t = bigger;
}

struct mod_entry *modtree_find(const struct modtree *t, uint64_t obj)
{
	if (!t->cap || !obj)
		return NULL;
	size_t i = slot_of(obj, t->cap);
	while (t->slots[i].obj) {
		if (t->slots[i].obj == obj)
			return &t->slots[i];
		i = (i + 1) & (t->cap - 1);
	}
	return NULL;
}

struct walk {
	struct modtree *t;
	const struct pyreader *r;
	const char *prefix;
	int depth;
	int failed;
	struct budget { /* the whole walk's, shared by its levels */
		uint64_t entries, bytes, deadline_ns;
		uint64_t modules_key; /* "_modules"' str object (procmem.h: py_instance_attr_k) */
	} *budget;
};

/* Past one of the walk's bounds: the walk stops there, and the tree says which. */
static int over(struct walk *w)
{
	struct budget *b = w->budget;
	const char *why = NULL;
	if (w->t->cut)
		return 1;
	if (b->entries > MODTREE_ENTRIES_MAX)
		why = "more than 4 Mi entries in its _modules dicts";
	else if (b->bytes > MODTREE_BYTES_MAX)
		why = "more than 64 MiB of module names";
	else if (!(b->entries & 255) && mono_now() > b->deadline_ns)
		why = "more than 2 s to read";
	if (!why)
		return 0;
	w->t->cut = why;
	return 1;
}

static void visit(struct walk *w, uint64_t obj, const char *path);

static int child(void *arg, uint64_t key, uint64_t value)
{
	struct walk *w = arg;
	w->budget->entries++;
	if (over(w))
		return 1; /* stops the dict's walk, and each one above it */
	if (value == 0 || modtree_find(w->t, value) || w->depth >= MAX_DEPTH)
		return 0; /* reachable twice: the first name stays; or too deep: nothing is read */
	char name[256];
	if (py_str(w->r, key, name, sizeof(name)) < 0)
		return 0;
	/* `None` children are skipped by named_modules */
	char tname[16];
	if (py_type_name(w->r, py_type(w->r, value), tname, sizeof(tname)) == 0 &&
	    !strcmp(tname, "NoneType"))
		return 0;
	struct buf path = {0};
	if (w->prefix[0])
		buf_printf(&path, "%s.%s", w->prefix, name);
	else
		buf_puts(&path, name);
	visit(w, value, path.data);
	buf_free(&path);
	return 0;
}

static void visit(struct walk *w, uint64_t obj, const char *path)
{
	if (w->t->count >= MAX_MODULES || w->depth >= MAX_DEPTH || over(w))
		return;
	struct mod_entry *e = insert(w->t, obj);
	if (!e)
		return; /* reachable twice: the first name stays */
	char tname[256] = "?";
	py_type_name(w->r, py_type(w->r, obj), tname, sizeof(tname));
	w->budget->bytes += strlen(path) + strlen(tname) + 2 + sizeof(*e) * 2;
	e->path = xstrdup(path[0] ? path : "<root>");
	e->type_name = xstrdup(tname);
	e->traced = 1;
	uint64_t modules = py_instance_attr_k(w->r, obj, "_modules", &w->budget->modules_key);
	if (!modules) {
		debugx("cannot read %s._modules", e->path);
		w->failed |= w->depth == 0;
		return;
	}
	struct walk sub = *w;
	sub.prefix = path;
	sub.depth = w->depth + 1;
	if (py_dict_items(w->r, modules, child, &sub))
		debugx("cannot read the items of %s._modules", path[0] ? path : "<root>");
}

int modtree_build(struct modtree *t, const struct pyreader *r, uint64_t root)
{
	modtree_free(t);
	struct budget b = { .deadline_ns = mono_now() + MODTREE_NS_MAX };
	struct walk w = { .t = t, .r = r, .prefix = "", .budget = &b };
	visit(&w, root, "");
	t->bytes = (size_t)b.bytes + t->cap * sizeof(*t->slots);
	return w.failed ? -1 : (int)t->count;
}

void modtree_free(struct modtree *t)
{
	for (size_t i = 0; i < t->cap; i++) {
		free(t->slots[i].path);
		free(t->slots[i].type_name);
	}
	free(t->slots);
	memset(t, 0, sizeof(*t));
}
