/* Modules called through a bound __call__, the trace's side (bound.c). */
#ifndef EVMBPF_BOUND_H
#define EVMBPF_BOUND_H

#include "modtree.h"
#include "target.h"

/* 1 (said once on stderr) when the target's CPython runs a tier-2 optimizer or JIT
 * (3.13+ built with --enable-experimental-jit, not turned off by PYTHON_JIT=0): bound
 * calls are then not followed. */
int bound_jit(const struct target *t);
/* Each class of the model's tree judged once (at most 512; another process's classes
 * are not kept): said once on stderr when a class's forward calls modules through their
 * bound __call__ (its code names `__call__`: such a call that makes no module call of its
 * own, or raises before its first, is not seen); modules whose class runs a __call__ of
 * its own that neither is Module.__call__ nor names it (`__call__`, `_call_impl`,
 * `_wrapped_call_impl` in its code) marked not traced: torch runs none of their hooks, so
 * the in-process tracer writes none of their calls (their slot_tp_call is seen all the
 * same), as --modules marks a module it does not match. 1 when the root is one of them
 * (then no forward begins at its calls either: the in-process tracer's root pre-hook
 * never runs). After modfilter_apply. */
int bound_classes(const struct pyreader *r, struct modtree *m, uint64_t root);
#endif
