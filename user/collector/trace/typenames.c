/* The target's type names, kept for the trace's life (typenames.h). */
#include "typenames.h"

#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>

#include "target.h"

struct typename_slot {
	uint64_t type;   /* 0: empty */
	char *name;
};

static size_t slot_of(uint64_t type, size_t cap)
{
	return (size_t)((type >> 4) * 0x9E3779B97F4A7C15ULL >> 32) & (cap - 1);
}

static struct typename_slot *find(const struct typenames *n, uint64_t type)
{
	if (!n->cap)
		return NULL;
	for (size_t i = slot_of(type, n->cap);; i = (i + 1) & (n->cap - 1)) {
		if (n->slots[i].type == type)
			return &n->slots[i];
		if (!n->slots[i].type)
			return NULL;
	}
}

static void insert(struct typenames *n, uint64_t type, char *name)
{
	if (2 * (n->count + 1) > n->cap) { /* at most half full */
		struct typenames grown = { xcalloc(n->cap ? 2 * n->cap : 64, sizeof(*n->slots)),
					   n->cap ? 2 * n->cap : 64, 0 };
		for (size_t i = 0; i < n->cap; i++)
			if (n->slots[i].type)
				insert(&grown, n->slots[i].type, n->slots[i].name);
		free(n->slots);
		*n = grown;
	}
	size_t i = slot_of(type, n->cap);
	while (n->slots[i].type)
		i = (i + 1) & (n->cap - 1);
	n->slots[i].type = type;
	n->slots[i].name = name;
	n->count++;
}

/* The name, from the BPF side's verdicts (tp_name, read when the type was first seen)
 * or from the target's memory; NULL when neither has it. */
static char *look_up(struct trace *t, uint64_t type)
{
	struct type_info info;
	uint64_t key = type | t->type_tag;
	if (t->type_map_fd >= 0 && !bpf_map_lookup_elem(t->type_map_fd, &key, &info)) {
		info.name[sizeof(info.name) - 1] = 0;
		const char *dot = info.heap ? NULL : strrchr(info.name, '.');
		return xstrdup(dot ? dot + 1 : info.name);
	}
	char name[128];
	if (!t->target_gone && py_type_name(&t->target->reader, type, name, sizeof(name)) == 0)
		return xstrdup(name);
	return NULL;
}

const char *trace_type_name(void *arg, uint64_t type)
{
	struct trace *t = arg;
	if (!type)
		return "?";
	/* type objects live as long as their classes, and their names do not change */
	struct typename_slot *s = find(&t->typenames, type);
	if (s)
		return s->name;
	char *name = look_up(t, type);
	if (!name)
		return "?";
	insert(&t->typenames, type, name);
	return name;
}

void typenames_free(struct typenames *n)
{
	for (size_t i = 0; i < n->cap; i++)
		free(n->slots[i].name);
	free(n->slots);
	memset(n, 0, sizeof(*n));
}
