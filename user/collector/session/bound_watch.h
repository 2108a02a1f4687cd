/* Modules called through a bound __call__: the watchpoints on their call sites
 * (bound_watch.c; the trace's side is trace/bound.c). */
#ifndef EVMBPF_BOUND_WATCH_H
#define EVMBPF_BOUND_WATCH_H

#include <sys/types.h>

#include "session_state.h"

/* A new call site (REC_BOUND_SITE): watch it on its thread, continue a held target. */
void bound_site(struct session *s, const struct rec_bound_site *r);
/* The entry of a call whose site could not be watched: 1 (drop the record) when the
 * record is that entry alone; else the module call carrying it is written without it. */
int bound_skip(struct session *s, const void *data, size_t size);
/* Remove the watchpoints of this process's threads (the others' stay armed). */
void bound_detach(pid_t pid);

#endif
