/* The tracer's top (tracer_run.c): main.c hands it the options. */
#ifndef EVMBPF_TRACER_RUN_H
#define EVMBPF_TRACER_RUN_H

#include "tracer.h"

/* Returns evmbpf's exit code: 0, 1 on an error, or in launch mode the command's. */
int tracer_run(const struct tracer_opts *opts);

#endif
