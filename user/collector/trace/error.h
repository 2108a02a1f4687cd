/* The end of a trace (error.c): the `error` event of an uncaught exception, a signal or
 * an exit with modules running, and the frames still open, unwound. */
#ifndef EVMBPF_ERROR_H
#define EVMBPF_ERROR_H

#include "trace_state.h"

/* --stop-on-nonfinite: the reference's NonFiniteOutput error at the frame still open
 * (detected_at: culprit) and the frames unwound as `session ended`; the trace ends. */
void trace_finish_nonfinite(struct trace *t, uint32_t tid, const char *culprit,
			    const char *message);
/* The end: `exit_code` as wait(2) encodes it, or -1 when evmbpf detached first. */
void trace_finish(struct trace *t, int exit_code);

#endif
