/* evmbpf dump: phase() markers, which the tracer follows with a probe, found instead as
 * the __exit__ of a `with` statement left on the value stack of the frame running the
 * block. */
#ifndef EVMBPF_DUMP_MARKERS_H
#define EVMBPF_DUMP_MARKERS_H

#include <stddef.h>
#include <stdint.h>

#include "dump_values.h"

/* The innermost marker whose `with` block a frame is in: its __exit__ (a bound method,
 * or on 3.14 the manager itself) is on the frame's value stack, which lies in words
 * [from, from + nwords). 0 and its name, or -1. */
int dump_frame_marker(struct dump_reading *g, uint64_t from, size_t nwords, char *name,
		      size_t cap);

#endif
