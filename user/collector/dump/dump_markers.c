/* evmbpf dump: phase() markers found on the value stacks of the frames running their
 * `with` blocks. */
#include "dump_markers.h"

#include <string.h>

static int8_t gen_state(struct dump_reading *g, uint64_t gen)
{
	const struct py_offsets *o = g->o;
	int8_t state = 1;
	if (o->version <= 310) {
		uint64_t frame = pm_u64(g->r, gen + o->gen_frame, NULL);
		if (!frame)
			return 1;
		if (o->frame_state) {
			pm_read(g->r, frame + o->frame_state, &state, 1);
			return state;
		}
		int32_t lasti = 0;
		uint8_t executing = 0;
		pm_read(g->r, frame + o->frame_instr, &lasti, 4);
		pm_read(g->r, frame + o->frame_executing, &executing, 1);
		return lasti == -1 ? g->t->gen_state_created : executing ? 0 : -1;
	}
	if (pm_read(g->r, gen + o->gen_frame_state, &state, 1))
		return 1;
	return state;
}

/* A _GeneratorContextManager running evalmetry's phase(), its generator suspended at
 * the yield (in the `with` block): the marker's name. */
static int marker_name(struct dump_reading *g, uint64_t cm, char *name, size_t cap)
{
	const struct pyreader *r = g->r;
	const struct py_offsets *o = g->o;
	uint64_t gen = py_instance_attr(r, cm, "gen");
	if (!gen || py_type(r, gen) != g->t->gen_type)
		return -1;
	uint64_t code, first;
	if (o->version <= 310) {
		code = pm_u64(r, gen + o->gen_code, NULL);
		first = pm_u64(r, pm_u64(r, gen + o->gen_frame, NULL) + o->iframe_localsplus, NULL);
	} else {
		code = pm_u64(r, gen + o->gen_iframe + o->iframe_code, NULL) & ~7ULL;
		first = pm_u64(r, gen + o->gen_iframe + o->iframe_localsplus, NULL) & ~7ULL;
	}
	char fn[16], file[512];
	if (py_str(r, pm_u64(r, code + (o->co_qualname ? o->co_qualname : o->co_name), NULL), fn,
		   sizeof(fn)) < 0 || strcmp(fn, "phase") ||
	    py_str(r, pm_u64(r, code + o->co_filename, NULL), file, sizeof(file)) < 0)
		return -1;
	size_t n = strlen(file);
	if (n < 18 || strcmp(file + n - 18, "evalmetry/debug.py"))
		return -1;
	int8_t state = gen_state(g, gen);
	if (state > 0 || state == 0 || state == g->t->gen_state_created)
		return -1; /* over, running (not in its block), or not started */
	return py_str(r, first, name, cap) < 0 ? -1 : 0;
}

/* The innermost marker whose `with` block this frame is in: its __exit__ (a bound
 * method, or on 3.14 the manager itself) is on the frame's value stack, which lies in
 * words [from, from + nwords). Later pushes are at higher addresses. */
int dump_frame_marker(struct dump_reading *g, uint64_t from, size_t nwords, char *name,
		      size_t cap)
{
	uint64_t words[512];
	if (nwords > 512)
		nwords = 512;
	while (nwords && pm_read(g->r, from, words, nwords * 8))
		nwords /= 2;
	for (size_t i = nwords; i-- > 0;) {
		uint64_t w = words[i] & ~7ULL;
		if (!w || w < 4096)
			continue;
		uint64_t type = py_type(g->r, w);
		if (!type)
			continue;
		int kind = dump_kind_of_type(g, type);
		if (kind == 4) {
			w = pm_u64(g->r, w + 24, NULL); /* PyMethodObject.im_self */
			kind = w ? dump_kind_of_type(g, py_type(g->r, w)) : 0;
		}
		if (kind == 3 && !marker_name(g, w, name, cap))
			return 0;
	}
	return -1;
}
