/* --out's pattern (outpattern.c). */
#ifndef EVMBPF_OUTPATTERN_H
#define EVMBPF_OUTPATTERN_H

#include <stddef.h>
#include <sys/types.h>

/* Why the pattern cannot be used (NULL: it can); `several`: more than one process may
 * be traced. */
const char *out_pattern_problem(const char *pattern, int several);
/* The pattern for one process: its pid and rank ("" when it has none). */
void out_expand(const char *pattern, pid_t pid, const char *rank, char *buf, size_t size);

#endif
