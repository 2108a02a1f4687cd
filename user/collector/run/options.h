/* The options the tracer (main.c) and the recorder (record_cli.c) share: one table, one
 * parser, the same checks and messages; a bad value ends the command with status 2. */
#ifndef EVMBPF_OPTIONS_H
#define EVMBPF_OPTIONS_H

#include <getopt.h>

#include "tracer.h"

/* each process's BPF ring buffer, MiB: one traced process, or the recorder's many */
#define RINGBUF_MB_TRACER 16
#define RINGBUF_MB_RECORDER 2

/* the shared entries of a getopt_long table */
#define OPTIONS_SHARED                                              \
	{ "modules", required_argument, NULL, 'm' },                 \
	{ "tail", required_argument, NULL, 't' },                    \
	{ "ringbuf-mb", required_argument, NULL, 'R' },              \
	{ "numeric", no_argument, NULL, 'N' },                       \
	{ "stop-on-nonfinite", no_argument, NULL, 'X' },             \
	{ "verbose", no_argument, NULL, 'v' }

/* c as getopt_long gave it: 1 one of OPTIONS_SHARED's, taken; 0 not one of them; -1 its
 * value is refused (said in one line). */
int option_shared(int c, const char *arg, struct tracer_opts *opts);

#endif
