/* --numeric's hold and --stop-on-nonfinite's end (numeric_session.c) */
#ifndef EVMBPF_NUMERIC_SESSION_H
#define EVMBPF_NUMERIC_SESSION_H

#include <sys/types.h>

#include "session.h"

/* numeric_session.c: --numeric's hold, once the probes are placed (-1: refused, said);
 * --stop-on-nonfinite's end: the target stopped, the trace finished; evmbpf's status 3 */
int session_numeric_start(struct session *s);
int session_stop_nonfinite(struct session *s, pid_t child);

#endif
