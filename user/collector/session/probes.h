/* Loading the programs and attaching them to a process (probes.c) */
#ifndef EVMBPF_PROBES_H
#define EVMBPF_PROBES_H

#include <stdarg.h>
#include <bpf/libbpf.h>

#include "session_state.h"

/* probes.c */
int evmbpf_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args);
int session_load(struct session *s);
int session_load_floor(struct session *s);
void session_detach(struct session *s);
/* evmbpf record: the process mapped torch (REC_TORCH_LOADED, or NULL when the probe's
 * flag says so and its record was lost): its call probes are placed, its thread let go.
 * 0, or -1 said (not traced from here). */
int session_torch_loaded(struct session *s, const struct rec_loaded *r);

#endif
