/* The names of the target's types, as descriptions write them (type(x).__name__): looked
 * up once per type and kept for the trace's life, so that an event described after its
 * process ended (evmbpf record's tails) names its types as one described at once. */
#ifndef EVMBPF_TYPENAMES_H
#define EVMBPF_TYPENAMES_H

#include <stdint.h>

#include "trace_state.h"

/* struct describe_ctx's type_name callback (arg: the trace): never NULL, "?" when the
 * type cannot be named. */
const char *trace_type_name(void *arg, uint64_t type);
void typenames_free(struct typenames *names);

#endif
