/* The model's module names, as named_modules() gives them, read from the target. */
#ifndef EVMBPF_MODTREE_H
#define EVMBPF_MODTREE_H

#include <stdint.h>
#include "procmem.h"

struct mod_entry {
	uint64_t obj;
	char *path;      /* "<root>" for the root */
	char *type_name; /* type(module).__name__ */
	int traced;      /* matches --modules (or no pattern) */
	size_t order;    /* its place in named_modules() (the root's 0) */
};

struct modtree {
	struct mod_entry *slots; /* open addressing on obj */
	size_t cap, count;
	const char *cut; /* why the last walk stopped before its end (a bound), or NULL */
	size_t bytes;    /* what it holds: its names and its table (--max-memory counts it) */
};

/* Walk root._modules recursively (pre-order, first name wins). Returns the number of
 * modules, -1 when the root's _modules could not be read. */
int modtree_build(struct modtree *t, const struct pyreader *r, uint64_t root);
struct mod_entry *modtree_find(const struct modtree *t, uint64_t obj);
void modtree_free(struct modtree *t);

#endif
