/* The cores of evmbpf summarize | show | forwards, on an open trace stream, so that
 * tests and fuzzers can drive them on a buffer (fmemopen) as well as on a file. */
#ifndef EVMBPF_READER_CMDS_H
#define EVMBPF_READER_CMDS_H

#include <regex.h>
#include <stdio.h>

#include "reader_util.h"

/* print(summarize_trace(shown, tail)) for the trace read from in; `file` names it
 * in diagnostics. Returns the exit code. */
int rd_summarize(FILE *in, const char *file, const char *shown, long long tail, FILE *out);

/* print(describe_forward(read_trace(file), forward, module)); re is module compiled
 * by rd_regex_compile, or NULL when no module was given. */
int rd_show(FILE *in, const char *file, long long forward, const char *module,
	    const regex_t *re, FILE *out);

/* The forward index: one line a forward, or json.dumps(forward_index()) with json. */
int rd_forwards(FILE *in, const char *file, int json, FILE *out);

/* Compile a Python regular expression for re.search, translated to POSIX ERE.
 * 0, or -1 with the reason in err. */
int rd_regex_compile(const char *python, regex_t *re, struct rd_buf *err);
/* re.search(pattern, text) is not None. */
int rd_regex_search(const regex_t *re, const char *text);
void rd_regex_free(regex_t *re);

#endif
