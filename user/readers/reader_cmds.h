/* The cores of evmbpf summarize | show | forwards, on an open trace stream, so that
 * tests and fuzzers can drive them on a buffer (fmemopen) as well as on a file. */
#ifndef EVMBPF_READER_CMDS_H
#define EVMBPF_READER_CMDS_H

#include <stdio.h>

#include "pyre.h"
#include "util.h"

/* print(summarize_trace(shown, tail)) for the trace read from in; `file` names it
 * in diagnostics. Returns the exit code. */
int rd_summarize(FILE *in, const char *file, const char *shown, long long tail, FILE *out);

/* print(describe_forward(read_trace(file), forward, module)); re is module compiled
 * by pyre_compile, or NULL when no module was given. */
int rd_show(FILE *in, const char *file, long long forward, const char *module,
	    const struct pyre *re, FILE *out);

/* The forward index: one line a forward, or json.dumps(forward_index()) with json. */
int rd_forwards(FILE *in, const char *file, int json, FILE *out);

#endif
