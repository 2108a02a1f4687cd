/* --modules on the model's named modules. */
#ifndef EVMBPF_MODFILTER_H
#define EVMBPF_MODFILTER_H

#include "modtree.h"
#include "pyre.h"

/* Mark each module traced when re.search(pattern, path) finds it, as the reference's
 * register_hooks does; say once on stderr when the pattern matches none of them (the
 * trace is written all the same: its forwards and root boundaries still are). */
void modfilter_apply(const struct pyre *re, const char *pattern, struct modtree *mods);
/* --modules ARG checked before anything is traced (the tracer's and the recorder's):
 * 0, or -1 with what is wrong with it said. */
int modfilter_check(const char *arg);

#endif
