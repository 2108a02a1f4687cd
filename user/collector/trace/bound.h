/* Modules called through a bound __call__: the watchpoints on their call sites. */
#ifndef EVMBPF_BOUND_H
#define EVMBPF_BOUND_H

#include "modtree.h"
#include "session_state.h"

/* A new call site (REC_BOUND_SITE): watch it on its thread, continue a held target. */
void bound_site(struct session *s, const struct rec_bound_site *r);
/* The entry of a call whose site could not be watched: 1 (drop the record) when the
 * record is that entry alone; else the module call carrying it is written without it. */
int bound_skip(struct session *s, const void *data, size_t size);
/* 1 (said once on stderr) when the target's CPython runs a tier-2 optimizer or JIT
 * (3.13+ built with --enable-experimental-jit, not turned off by PYTHON_JIT=0): bound
 * calls are then not followed. */
int bound_jit(const struct target *t);
/* Said once on stderr when a module class's forward in the model's tree calls modules
 * through their bound __call__ (its code names `__call__`): such a call that makes no
 * module call of its own, or raises before its first, is not seen. */
void bound_forwards(const struct pyreader *r, const struct modtree *m);
/* Remove the watchpoints of this process's threads (the others' stay armed). */
void bound_detach(pid_t pid);

#endif
