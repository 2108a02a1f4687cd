/* evmbpf dump's output: the snapshot as text, or as one JSON document (its keys:
 * docs/dump-doctor.md), on stdout. */
#ifndef EVMBPF_DUMP_PRINT_H
#define EVMBPF_DUMP_PRINT_H

#include "dump.h"

/* How the snapshot was read. */
struct dump_result {
	const char *how;     /* "stopped", "already-stopped", "running" */
	double held_ms;      /* how long the target was stopped by evmbpf */
	double read_ms;      /* how long the reading took */
	int reads;           /* running: reads made until two agreed */
	int consistent;      /* two reads agreed, or the target stood still */
};

void dump_print_text(const struct target *t, const struct dump_snapshot *s,
		     const struct dump_result *res);
void dump_print_json(const struct target *t, const struct dump_snapshot *s,
		     const struct dump_result *res);
/* The same JSON document (its newline included), appended to out. */
void dump_json(const struct target *t, const struct dump_snapshot *s,
	       const struct dump_result *res, struct buf *out);

#endif
