/* The module calls' events (`enter`, `exit`, `unwound`): the state at their time, taken
 * from the records as they come, and their lines. Where the trace's first sink keeps
 * events (--tail, evmbpf record), an event is kept raw, its description nodes as the
 * BPF side wrote them, and described only if its line is ever written; else it is
 * written now. The two ways write the same bytes: one function writes both. */
#ifndef EVMBPF_EVENTS_H
#define EVMBPF_EVENTS_H

#include <stdint.h>

#include "trace_state.h"

/* A record's description nodes, as they came: kept by an event and by its frame (an
 * `unwound` event describes the enter's args again). */
struct rawnodes {
	unsigned refs;
	uint32_t len;
	uint8_t data[];
};

struct rawnodes *rawnodes_new(const uint8_t *p, size_t len);
struct rawnodes *rawnodes_ref(struct rawnodes *n);
void rawnodes_unref(struct rawnodes *n);

enum call_event_kind { CALL_ENTER, CALL_EXIT, CALL_UNWOUND };

struct call_event {
	uint8_t kind;
	uint8_t found;        /* exit: its frame was found (else an orphan: type, call null) */
	uint8_t deepest;      /* unwound */
	uint8_t mem_valid;    /* enter: `mem` has the thread's counters (else null) */
	uint32_t tid;
	uint64_t ts_ns;       /* the record's (bpf_ktime_get_ns) */
	int64_t depth, forward, call;
	const struct mod_entry *mod;
	const char *phase;    /* (an event kept raw keeps a copy) */
	const char *reason;   /* unwound: a string constant */
	int64_t mem[3];       /* allocated, reserved, max_allocated */
	/* what is described: the JSON written already (args, kwargs; exit: output in
	 * `args`), or else the nodes (enter: args then kwargs; unwound: args; exit: the
	 * output) */
	const char *args, *kwargs;
	struct rawnodes *nodes;
};

/* Should the next event be kept raw? (the first sink keeps events, and its description
 * needs nothing read from the target while its record's thread is held: not --numeric) */
int events_defer(const struct trace *t);
/* The event into the trace, its "i" given now: its line written now (its nodes, if
 * any, described now), or the event kept with a reference to its nodes. */
void events_put(struct trace *t, const struct call_event *ev);

#endif
