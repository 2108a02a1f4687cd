/* Phases: the host's markers (records of the BPF side's marker probe), the --phase
 * rules and their glob matching on the frames under an outermost call, and naming code
 * objects (co_qualname, or on 3.9/3.10 a method's class from its first argument). */
#include "phases.h"

#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stacks.h"
#include "target.h"

/* The phase a record was made in: the name of the innermost phase marker active on its
 * thread, as the BPF side saw it, or "other". */
static int marker_slot(const struct trace *t, uint64_t marker)
{
	for (size_t k = 0, i = (marker >> 4) % MARKER_SLOTS; marker && k < MARKER_SLOTS;
	     k++, i = (i + 1) % MARKER_SLOTS)
		if (t->markers[i].gen == marker)
			return (int)i;
	return -1;
}

/* The innermost marker of this kind from `marker` outwards (its parents: the markers
 * active around it when it began, which enclose it); 0 when none. */
static uint64_t marker_of_kind(const struct trace *t, uint64_t marker, uint32_t kind)
{
	for (int n = 0; marker && n < 4 * MARKERS_MAX; n++) {
		int i = marker_slot(t, marker);
		if (i < 0)
			return 0;
		if (t->markers[i].kind == kind)
			return marker;
		marker = t->markers[i].parent;
	}
	return 0;
}

int phase_marker_kind_in(const struct trace *t, uint64_t marker, uint32_t kind)
{
	return marker_of_kind(t, marker, kind) != 0;
}

static const char *phase_of(struct trace *t, uint64_t marker)
{
	if (!marker)
		return DEFAULT_PHASE;
	for (size_t k = 0, i = (marker >> 4) % MARKER_SLOTS; k < MARKER_SLOTS;
	     k++, i = (i + 1) % MARKER_SLOTS)
		if (t->markers[i].gen == marker)
			return t->markers[i].name;
	return DEFAULT_PHASE;
}

/* Does a code object's file name a module matching `glob`? The file's path is read as a
 * dotted name and matched from any of its components on: lm_eval.models.huggingface
 * matches .../site-packages/lm_eval/models/huggingface.py. */
static int module_matches(const char *glob, const char *filename)
{
	char dotted[1024];
	snprintf(dotted, sizeof(dotted), "%s", filename);
	size_t n = strlen(dotted);
	if (n > 3 && !strcmp(dotted + n - 3, ".py"))
		dotted[n -= 3] = 0;
	if (n > 9 && !strcmp(dotted + n - 9, "/__init__"))
		dotted[n -= 9] = 0;
	for (char *p = dotted; *p; p++)
		if (*p == '/')
			*p = '.';
	for (char *p = dotted; p; p = strchr(p + 1, '.')) {
		const char *candidate = *p == '.' ? p + 1 : p;
		if (!fnmatch(glob, candidate, 0))
			return 1;
	}
	return 0;
}

struct code_names {
	uint64_t code;
	char filename[512];
	char qualname[256];
};

/* 3.9/3.10 code objects have no co_qualname. A method's is rebuilt from the frame's
 * first local: the class in type(first).__mro__ whose own __dict__ holds a function of
 * this name with this code names it; any other function is named by co_name alone. */
static void qualname_from_mro(struct trace *t, uint64_t code, uint64_t first, char *dst,
			      size_t cap)
{
	const struct pyreader *r = &t->target->reader;
	const struct py_offsets *o = t->target->off;
	uint64_t type = first ? py_type(r, first) : 0;
	uint64_t mro = type ? pm_u64(r, type + o->tp_mro, NULL) : 0;
	int64_t n = mro ? (int64_t)pm_u64(r, mro + 16 /* ob_size */, NULL) : 0;
	char name[120], cls[120];
	snprintf(name, sizeof(name), "%s", dst);
	for (int64_t i = 0; i < n && i < 64; i++) {
		uint64_t k = pm_u64(r, mro + o->tuple_items + 8 * i, NULL);
		uint64_t dict = k ? pm_u64(r, k + o->tp_dict, NULL) : 0;
		uint64_t fn = dict ? py_dict_get_str(r, dict, name) : 0;
		if (!fn || pm_u64(r, fn + o->func_code, NULL) != code)
			continue;
		if (py_str(r, pm_u64(r, k + o->ht_qualname, NULL), cls, sizeof(cls)) >= 0)
			snprintf(dst, cap, "%s.%s", cls, name);
		return;
	}
}

static const struct code_names *code_names_of(struct trace *t, uint64_t code, uint64_t first)
{
	static struct code_names cache[1024];
	struct code_names *c = &cache[(code >> 4) & 1023];
	if (c->code == code)
		return c;
	const struct pyreader *r = &t->target->reader;
	const struct py_offsets *o = t->target->off;
	int bare = !o->co_qualname;
	c->code = 0;
	if (py_str(r, pm_u64(r, code + o->co_filename, NULL), c->filename, sizeof(c->filename)) < 0 ||
	    py_str(r, pm_u64(r, code + (bare ? o->co_name : o->co_qualname), NULL), c->qualname,
		   sizeof(c->qualname)) < 0)
		return NULL;
	if (bare)
		qualname_from_mro(t, code, first, c->qualname, sizeof(c->qualname));
	c->code = code;
	return c;
}

/* The phase the rules give an outermost call: the innermost frame that matches a rule
 * decides; among the rules matching that frame, the first given wins. */
const char *phase_from_rules(struct trace *t, const struct thread_stack *s)
{
	for (uint32_t i = 0; i < s->ncodes; i++) {
		const struct code_names *c = code_names_of(t, s->codes[i], s->firsts[i]);
		if (!c)
			continue;
		for (size_t k = 0; k < t->opts.nrules; k++) {
			const struct phase_rule *rule = &t->opts.rules[k];
			if (!fnmatch(rule->qualname, c->qualname, 0) &&
			    (!rule->module || module_matches(rule->module, c->filename)))
				return rule->name;
		}
	}
	return NULL;
}

void phase_stack_record(struct trace *t, const struct rec_stack *r)
{
	struct thread_stack *s = stack_of(t, r->hdr.tid);
	s->ncodes = r->n < STACK_FRAMES_MAX ? r->n : STACK_FRAMES_MAX;
	memcpy(s->codes, r->code, s->ncodes * sizeof(s->codes[0]));
	memcpy(s->firsts, r->first, s->ncodes * sizeof(s->firsts[0]));
	/* Name them now, while the target may be held for it (struct rec_stack): the
	 * names are cached, the target may be gone by the rule's turn. */
	for (uint32_t i = 0; i < s->ncodes; i++)
		code_names_of(t, s->codes[i], s->firsts[i]);
}

/* Attached in the middle of a forward, the first call seen is not the model's: the
 * modules already running are on the Python stack, in frames of Module.__call__'s
 * code, with self as their first local. The outermost of them is the model. */
int trace_is_module_call(struct trace *t, uint64_t code, uint64_t first)
{
	static const char *const calls[] = { "Module._call_impl", "Module._wrapped_call_impl" };
	const struct code_names *c = first ? code_names_of(t, code, first) : NULL;
	if (!c || !str_ends_with(c->filename, TORCH_MODULE_FILE))
		return 0;
	for (size_t k = 0; k < sizeof(calls) / sizeof(calls[0]); k++)
		if (!strcmp(c->qualname, calls[k]))
			return 1;
	return 0;
}

uint64_t trace_first_object(struct trace *t, uint64_t first)
{
	/* 3.11+ turn a local that a closure captures into a cell in its own slot */
	const struct pyreader *r = &t->target->reader;
	char name[16];
	if (first && py_type_name(r, py_type(r, first), name, sizeof(name)) >= 0 &&
	    !strcmp(name, "cell"))
		return pm_u64(r, first + 16 /* PyCellObject.ob_ref */, NULL);
	return first;
}

uint64_t phase_enclosing_model(struct trace *t, const struct thread_stack *s)
{
	for (uint32_t i = s->ncodes; i-- > 0;)
		if (trace_is_module_call(t, s->codes[i], s->firsts[i]))
			return trace_first_object(t, s->firsts[i]);
	return 0;
}

/* Markers beat rules; rules hold from an outermost call until the next one. */
const char *phase_at(struct trace *t, const struct thread_stack *s, uint64_t marker)
{
	uint64_t phase = marker_of_kind(t, marker, MARKER_KIND_PHASE);
	if (phase)
		return phase_of(t, phase);
	return s->rule_phase ? s->rule_phase : DEFAULT_PHASE;
}

void phase_marker_record(struct trace *t, const struct rec_marker *r)
{
	size_t i = (r->gen >> 4) % MARKER_SLOTS, k;
	/* a generator address names the newest marker made there */
	for (k = 0; k < MARKER_SLOTS; k++, i = (i + 1) % MARKER_SLOTS)
		if (!t->markers[i].gen || t->markers[i].gen == r->gen)
			break;
	if (k == MARKER_SLOTS) /* full: markers long over hold the slots; start afresh */
		memset(t->markers, 0, sizeof(t->markers));
	t->markers[i].gen = r->gen;
	t->markers[i].parent = r->parent;
	t->markers[i].kind = r->kind;
	snprintf(t->markers[i].name, sizeof(t->markers[i].name), "%.*s", MARKER_NAME_MAX - 1,
		 r->name);
}
