/* evmbpf record: a process's policies, when its trace is written. Each is a line of the
 * table in policy.c: what it watches during the run (its live tail written now, the
 * process running on) and which of its ends need its whole trace. A new trigger is its
 * functions, one line in that table, and its option (record_cli.c). */
#ifndef EVMBPF_POLICY_H
#define EVMBPF_POLICY_H

#include <stddef.h>
#include <stdint.h>

struct proc;
struct record_opts;

struct policy {
	const char *name;
	/* during the run, about once a second for each live process (now: CLOCK_MONOTONIC
	 * ns): 1 with why its live tail is written now (the mark's words) in why; 0 (NULL:
	 * it watches nothing) */
	int (*watch)(const struct record_opts *o, struct proc *p, uint64_t now, char *why,
		     size_t cap);
	/* at its end (it called a module): 1 this end needs its trace (NULL: none does) */
	int (*keep)(const struct record_opts *o, const struct proc *p);
};

/* The processes' live tails to write now: for each, the first policy whose watch says so
 * (why: its words); 0: none. */
int policy_watch(const struct record_opts *o, struct proc *p, uint64_t now, char *why,
		 size_t cap);
/* Does this end of p need its trace? Any policy's keep; none without a module call
 * (called: it called one, or ran modules since its attach). */
int policy_keep(const struct record_opts *o, const struct proc *p, int called);

#endif
