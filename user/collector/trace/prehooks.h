/* A model's forward pre-hooks of the target's own, said (prehooks.c). */
#ifndef EVMBPF_PREHOOKS_H
#define EVMBPF_PREHOOKS_H

#include "modtree.h"
#include "procmem.h"

/* Said once on stderr when a traced module of the tree (of its first PREHOOK_MODULES)
 * has forward pre-hooks (a non-empty `_forward_pre_hooks`): evmbpf sees a module call
 * where it begins, before Module.__call__ runs them, and the in-process tracer's enter
 * comes after them. Names the first such module in named_modules()'s order, its first
 * hook, and how many more have some. */
#define PREHOOK_MODULES 8192
void prehooks_said(const struct pyreader *r, const struct modtree *m);

#endif
