/* evmbpf export --format speedscope: speedscope's evented format (export.h). export.c
 * walks the trace and calls these for each frame opened and closed. */
#ifndef EVMBPF_EXPORT_SPEEDSCOPE_H
#define EVMBPF_EXPORT_SPEEDSCOPE_H

#include <stddef.h>

#include "export_timeline.h"

size_t speedscope_frame(struct exporter *x, const cJSON *module, const cJSON *type);
/* An 'O' (open) or 'C' (close) event of frame on th's profile, at ns. */
void speedscope_event(struct exporter *x, struct thread *th, char type, size_t frame,
		      int64_t ns);
/* The profiles' ends, the spilled ones copied in, the frames: 0, or -1 when a
 * temporary file could not be read back. */
int speedscope_end(struct exporter *x);

#endif
