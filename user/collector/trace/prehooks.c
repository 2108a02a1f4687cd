/* A model's forward pre-hooks of the target's own, said. A module call is seen where it
 * begins (slot_tp_call), before Module.__call__ runs the module's forward pre-hooks; the
 * in-process tracer's own pre-hook, registered after the target's, writes its enter after
 * them. So a module that such a hook calls is written inside the hooked module's call (the
 * in-process tracer writes it before the enter, one level up), and args a hook replaces
 * are written as the call received them (the in-process tracer writes what the hook
 * returned). Most hooks (weight_norm's, pruning's, a sharding library's parameter
 * gathering) do neither, and telling them apart needs their code run: the trace is not
 * changed, it is said. */
#include "prehooks.h"

#include <stdio.h>
#include <string.h>

#include "util.h"

struct first_hook {
	const struct pyreader *r;
	char name[96];
};

/* What a code object is called (co_qualname from 3.11, co_name before) */
static int code_name(const struct pyreader *r, uint64_t func, char *dst, size_t cap)
{
	int err = 0;
	uint64_t code = pm_u64(r, func + r->off->func_code, &err);
	uint64_t name = err ? 0 : pm_u64(r, code + (r->off->version >= 311 ? r->off->co_qualname
								 : r->off->co_name), &err);
	return err || !name ? -1 : py_str(r, name, dst, cap);
}

/* The first hook named: a function's or a bound method's qualified name, else its type's
 * name (a callable object such as weight_norm's WeightNorm, a functools.partial) */
static int name_first(void *arg, uint64_t key, uint64_t value)
{
	struct first_hook *h = arg;
	char tname[48];
	(void)key;
	if (!value || py_type_name(h->r, py_type(h->r, value), tname, sizeof(tname))) {
		snprintf(h->name, sizeof(h->name), "?");
		return 1;
	}
	int err = 0;
	uint64_t func = !strcmp(tname, "function") ? value
		      : !strcmp(tname, "method") ? pm_u64(h->r, value + 16, &err) : 0;
	if (err || !func || code_name(h->r, func, h->name, sizeof(h->name)) < 0)
		snprintf(h->name, sizeof(h->name), "%s", tname);
	return 1;
}

/* register_module_forward_pre_hook's: torch.nn.modules.module's
 * _global_forward_pre_hooks, found through the globals of the root's Module.__call__
 * function (_call_impl); 1 when it has one (named in h) */
static int global_prehooks(const struct pyreader *r, uint64_t root, struct first_hook *h)
{
	int err = 0;
	uint64_t impl = root ? py_type_lookup(r, py_type(r, root), "_call_impl") : 0;
	char tname[16];
	if (!impl || py_type_name(r, py_type(r, impl), tname, sizeof(tname)) ||
	    strcmp(tname, "function"))
		return 0;
	uint64_t globals = pm_u64(r, impl + r->off->func_globals, &err);
	uint64_t hooks = err || !globals ? 0
		       : py_dict_get_str(r, globals, "_global_forward_pre_hooks");
	return hooks && py_dict_items(r, hooks, name_first, h) >= 0 && h->name[0];
}

/* A module's _forward_pre_hooks when it has at least one, else 0 (*interned: the name's
 * str object, kept across the modules: procmem.h, py_instance_attr_k) */
static uint64_t module_prehooks(const struct pyreader *r, uint64_t obj, uint64_t *interned)
{
	int err = 0;
	uint64_t hooks = py_instance_attr_k(r, obj, "_forward_pre_hooks", interned);
	/* a dict (an OrderedDict) with items: ma_used, after the head */
	uint64_t flags = !hooks ? 0 : pm_u64(r, py_type(r, hooks) + r->off->tp_flags, &err);
	if (err || !(flags & (1UL << 29)) || (int64_t)pm_u64(r, hooks + 16, &err) <= 0 || err)
		return 0;
	return hooks;
}

void prehooks_said(const struct pyreader *r, const struct modtree *m, uint64_t root)
{
	static int said;
	if (said)
		return;
	const struct mod_entry *first = NULL;
	uint64_t first_hooks = 0;
	size_t looked = 0, with = 0, i;
	uint64_t interned = 0;
	for (i = 0; i < m->cap && looked < PREHOOK_MODULES; i++) {
		const struct mod_entry *e = &m->slots[i];
		if (!e->obj || !e->traced)
			continue;
		looked++;
		uint64_t hooks = module_prehooks(r, e->obj, &interned);
		if (hooks && (!with++ || e->order < first->order)) { /* the first in named_modules() */
			first = e;
			first_hooks = hooks;
		}
	}
	/* its first hook named, once (name_first stops at the first) */
	struct first_hook h = { .r = r };
	if (first && (py_dict_items(r, first_hooks, name_first, &h) < 0 || !h.name[0]))
		snprintf(h.name, sizeof(h.name), "?");
	if (i < m->cap)
		debugx("forward pre-hooks looked for in the first %d modules of the tree only",
		       PREHOOK_MODULES);
	struct first_hook g = { .r = r };
	int global = global_prehooks(r, root, &g);
	if (!first && !global)
		return;
	said = 1;
	char who[512];
	if (global)
		snprintf(who, sizeof(who), "every module (register_module_forward_pre_hook; the "
			 "first: %s)%s%s%s%s", g.name, first ? ", and " : "", first ? first->path : "",
			 first ? " has its own" : "", with > 1 ? ", and more" : "");
	else
		snprintf(who, sizeof(who), "%s (%s; the first: %s)%s", first->path,
			 first->type_name, h.name,
			 with > 2 ? ", and more modules" : with > 1 ? ", and 1 more module" : "");
	warnx_("warning: forward pre-hooks of the process's own run on %s: evmbpf sees a "
	       "module call before its pre-hooks run, so a module such a hook calls is "
	       "written inside the hooked module's call, and args a hook replaces are "
	       "written as the call received them; the in-process tracer writes both after "
	       "the hooks (see docs/tracing.md)", who);
}
