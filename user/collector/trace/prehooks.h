/* A model's forward pre-hooks of the target's own, said (prehooks.c). */
#ifndef EVMBPF_PREHOOKS_H
#define EVMBPF_PREHOOKS_H

#include "modtree.h"
#include "procmem.h"

/* Said once on stderr when a traced module of the tree (of its first PREHOOK_MODULES)
 * has forward pre-hooks (a non-empty `_forward_pre_hooks`), or every module has
 * (register_module_forward_pre_hook's, found through the root's Module.__call__'s
 * globals): evmbpf sees a module call where it begins, before Module.__call__ runs them,
 * and the in-process tracer's enter comes after them. Names the first such module in
 * named_modules()'s order and its first hook (or the first global one), and whether more
 * modules have some. */
#define PREHOOK_MODULES 8192
void prehooks_said(const struct pyreader *r, const struct modtree *m, uint64_t root);

#endif
