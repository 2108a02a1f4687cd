/* `evmbpf-test-aids cupti-replay` (tests/test_cupti.py): a recorded sequence of module calls
 * and agent records, one a line on stdin, through the agent's ring and the attribution,
 * and the `gpu` and `gpu_summary` events the trace would get on stdout:
 *   ring SLOTS                       the ring's size (a power of two; default 65536)
 *   enter TID CALL MODULE NS | exit TID CALL NS     the trace's module events
 *   api TID CORR NS | kernel CORR START END | memcpy CORR START END BYTES
 *   memset CORR START END BYTES | lost N             the agent's records
 *   at TID NS                        print the call running there ("at CALL" or "at -")
 *   agent TID                        the agent's --numeric thread (its work apart)
 * Agent records pass through a ring as the agent's do: a line that finds it full counts
 * as dropped (written in gpu_summary), and `flush` drains it. */
#include "aids.h"

#include "gpu_calls.h"
#include "jsonw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sink.h"
#include "trace.h"
#include "util.h"

void gpu_calls_write(struct trace *t, struct gpu_calls *g, uint64_t ring_dropped);

int cupti_replay_main(void)
{
	struct gpu_calls g;
	gpu_calls_init(&g);
	uint32_t slots = CUPTI_RING_SLOTS;
	struct cupti_ring *ring = NULL;
	char line[4096];
	int lineno = 0, rc = 0;
	while (fgets(line, sizeof(line), stdin)) {
		lineno++;
		char word[32], name[2048];
		unsigned long long a = 0, b = 0, c = 0, d = 0;
		if (sscanf(line, "%31s", word) != 1 || word[0] == '#')
			continue;
		struct cupti_rec r = {0};
		if (!strcmp(word, "ring") && sscanf(line, "%*s %u", &slots) == 1 && !ring &&
		    slots && !(slots & (slots - 1)))
			continue;
		if (!ring) {
			ring = xcalloc(1, CUPTI_RING_BYTES(slots));
			cupti_ring_init(ring, slots);
		}
		if (!strcmp(word, "enter") &&
		    sscanf(line, "%*s %llu %llu %2047s %llu", &a, &b, name, &c) == 4) {
			gpu_calls_enter(&g, (uint32_t)a, (int64_t)b, name, c);
		} else if (!strcmp(word, "exit") && sscanf(line, "%*s %llu %llu %llu", &a, &b, &c) == 3) {
			gpu_calls_exit(&g, (uint32_t)a, (int64_t)b, c);
		} else if (!strcmp(word, "at") && sscanf(line, "%*s %llu %llu", &a, &b) == 2) {
			size_t k = gpu_calls_at(&g, (uint32_t)a, b);
			if (k)
				printf("at %lld\n", (long long)g.calls[k - 1].call_id);
			else
				printf("at -\n");
		} else if (!strcmp(word, "agent") && sscanf(line, "%*s %llu", &a) == 1) {
			g.agent_tid = (uint32_t)a;
		} else if (!strcmp(word, "flush")) {
			while (cupti_ring_get(ring, &r))
				gpu_calls_record(&g, &r);
		} else if ((!strcmp(word, "api") &&
			    sscanf(line, "%*s %llu %llu %llu", &a, &b, &c) == 3 &&
			    (r = (struct cupti_rec){ .kind = CR_API, .tid = (uint32_t)a,
						     .v = { b, c, 0, 1 } }, 1)) ||
			   (!strcmp(word, "kernel") &&
			    sscanf(line, "%*s %llu %llu %llu", &a, &b, &c) == 3 &&
			    (r = (struct cupti_rec){ .kind = CR_KERNEL, .v = { a, b, c } }, 1)) ||
			   (!strcmp(word, "memcpy") &&
			    sscanf(line, "%*s %llu %llu %llu %llu", &a, &b, &c, &d) == 4 &&
			    (r = (struct cupti_rec){ .kind = CR_MEMCPY, .v = { a, b, c, d } }, 1)) ||
			   (!strcmp(word, "memset") &&
			    sscanf(line, "%*s %llu %llu %llu %llu", &a, &b, &c, &d) == 4 &&
			    (r = (struct cupti_rec){ .kind = CR_MEMSET, .v = { a, b, c, d } }, 1)) ||
			   (!strcmp(word, "lost") && sscanf(line, "%*s %llu", &a) == 1 &&
			    (r = (struct cupti_rec){ .kind = CR_LOST, .v = { a } }, 1))) {
			cupti_ring_put(ring, &r);
		} else {
			warnx_("cupti-replay: line %d: cannot read '%.*s'", lineno,
			       (int)strcspn(line, "\n"), line);
			rc = 2;
			break;
		}
	}
	if (!ring) {
		ring = xcalloc(1, CUPTI_RING_BYTES(slots));
		cupti_ring_init(ring, slots);
	}
	struct cupti_rec r;
	while (cupti_ring_get(ring, &r))
		gpu_calls_record(&g, &r);
	struct trace t = {0};
	t.sink = t.file = sink_file_stream(stdout);
	gpu_calls_write(&t, &g, ring->dropped);
	fflush(stdout);
	free(ring);
	gpu_calls_free(&g);
	return rc;
}
