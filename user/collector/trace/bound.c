/* Modules called through a bound __call__, the trace's side: which forwards of the
 * model call modules that way (said once), and whether the target's CPython runs a JIT
 * that hides such calls. Their watchpoints are session/bound_watch.c's. */
#include "bound.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elfsym.h"
#include "procstate.h"
#include "util.h"

/* Is this code object's file torch's TORCH_MODULE_FILE? A name that cannot be read as
 * text: judged by the name alone, as the probes judge (bpf/bound.bpf.h). */
static int code_in_torch_module(const struct pyreader *r, uint64_t code)
{
	char file[PATH_MAX];
	int err = 0;
	uint64_t name = pm_u64(r, code + r->off->co_filename, &err);
	if (err || py_str(r, name, file, sizeof(file)) < 0)
		return 1;
	return str_ends_with(file, TORCH_MODULE_FILE);
}

/* A function's code names one of want (co_names: an attribute or global loaded), its
 * own name one of own when own is given (co_name) and its file is torch's module.py;
 * 0 when func is not a function. */
static int code_names(const struct pyreader *r, uint64_t func, const char *const *want,
		      const char *const *own)
{
	char tname[16];
	if (!func || py_type_name(r, py_type(r, func), tname, sizeof(tname)) ||
	    strcmp(tname, "function"))
		return 0;
	int err = 0;
	uint64_t code = pm_u64(r, func + r->off->func_code, &err);
	/* PyCodeObject.co_names: after the fixed ints on 3.9/3.10, right after co_consts
	 * from 3.11 */
	uint64_t names = err ? 0 : pm_u64(r, code + (r->off->version <= 310 ? 64 : 32), &err);
	if (err || !names || py_type_name(r, py_type(r, names), tname, sizeof(tname)) ||
	    strcmp(tname, "tuple"))
		return 0;
	char name[32];
	int name_err = 0;
	uint64_t co_name = own ? pm_u64(r, code + r->off->co_name, &name_err) : 0;
	if (own && !name_err && py_str(r, co_name, name, sizeof(name)) >= 0)
		for (int k = 0; own[k]; k++)
			if (!strcmp(name, own[k]) && code_in_torch_module(r, code))
				return 1;
	int64_t n = (int64_t)pm_u64(r, names + 16, &err);
	for (int64_t i = 0; !err && i < n && i < 4096; i++) {
		uint64_t item = pm_u64(r, names + r->off->tuple_items + 8 * (uint64_t)i, &err);
		if (err || py_str(r, item, name, sizeof(name)) < 0)
			continue;
		for (int k = 0; want[k]; k++)
			if (!strcmp(name, want[k]))
				return 1;
	}
	return 0;
}

static const char *const call_names[] = { "__call__", NULL };

/* A function's code names `__call__` (co_names: a `.__call__` attribute load). */
static int code_names_call(const struct pyreader *r, uint64_t func)
{
	return code_names(r, func, call_names, NULL);
}

static uint64_t type_forward(const struct pyreader *r, uint64_t type)
{
	return py_type_lookup(r, type, "forward");
}

/* Module.__call__'s own functions (torch 1.x _call_impl, 2.x _wrapped_call_impl around
 * it), and the names a __call__ that runs them loads (`super().__call__(x)`,
 * `self._call_impl(x)`) */
static const char *const module_call[] = { "_call_impl", "_wrapped_call_impl", NULL };
static const char *const runs_module_call[] = { "__call__", "_call_impl",
						"_wrapped_call_impl", NULL };

struct hook_scan {
	const struct pyreader *r;
	int found;
};

/* A hook: a function, or a bound method (its __func__ at +16), whose code names
 * `__call__`. */
static int hook_names_call(void *arg, uint64_t key, uint64_t value)
{
	struct hook_scan *h = arg;
	char tname[16];
	(void)key;
	if (value && !py_type_name(h->r, py_type(h->r, value), tname, sizeof(tname)) &&
	    !strcmp(tname, "method")) {
		int err = 0;
		value = pm_u64(h->r, value + 16, &err);
		if (err)
			return 0;
	}
	h->found = code_names_call(h->r, value);
	return h->found;
}

/* 3.9-3.12: a module's forward pre-hook or hook that calls modules through their bound
 * __call__ (the first of the tree), said once: a call there whose first module call sits
 * at the C stack depth of the module's own children is taken for one of them. */
static void bound_hooks(const struct pyreader *r, const struct modtree *m)
{
	static int said;
	if (said || r->off->version > 312)
		return;
	for (size_t i = 0; !said && i < m->cap; i++) {
		const struct mod_entry *e = &m->slots[i];
		const char *kinds[] = { "_forward_pre_hooks", "_forward_hooks" };
		for (int k = 0; e->obj && !said && k < 2; k++) {
			uint64_t hooks = py_instance_attr(r, e->obj, kinds[k]);
			struct hook_scan h = { .r = r };
			if (hooks && !py_dict_items(r, hooks, hook_names_call, &h) && h.found) {
				said = 1;
				warnx_("warning: a forward %shook of %s (%s) calls modules through their "
				       "bound __call__: on CPython 3.9-3.12 such a call is not seen, and "
				       "its own module calls are written as %s's (see docs/design.md)",
				       k ? "" : "pre-", e->path, e->type_name, e->path);
			}
		}
	}
}

/* At most this many classes of a tree are judged (each an MRO walk of dict look-ups in
 * the target's memory): a tree of many classes costs no more; the forwards of the first
 * FORWARD_CLASSES of them are looked at */
#define TREE_CLASSES 512
#define FORWARD_CLASSES 256

int bound_classes(const struct pyreader *r, struct modtree *m, uint64_t root)
{
	int root_bypass = 0;
	uint64_t judged[TREE_CLASSES]; /* this process's classes (another's may be there) */
	uint8_t bypass[TREE_CLASSES];
	int n = 0;
	static int said_forward, said_bypass, said_many;
	bound_hooks(r, m);
	for (size_t i = 0; i < m->cap; i++) {
		struct mod_entry *e = &m->slots[i];
		uint64_t type = e->obj ? py_type(r, e->obj) : 0;
		if (!type)
			continue;
		int k = 0;
		while (k < n && judged[k] != type)
			k++;
		if (k == n) {
			if (n == TREE_CLASSES) {
				if (!said_many++)
					debugx("more than %d module classes: the others' __call__ and forward "
					       "are not looked at", TREE_CLASSES);
				continue;
			}
			/* a __call__ of its own: a Python function that neither is Module.__call__'s
			 * nor names it */
			uint64_t call = py_type_lookup(r, type, "__call__");
			char tname[16];
			judged[n] = type;
			bypass[n] = call && !py_type_name(r, py_type(r, call), tname, sizeof(tname)) &&
				    !strcmp(tname, "function") &&
				    !code_names(r, call, runs_module_call, module_call);
			n++;
			if (bypass[k] && !said_bypass++)
				debugx("%s (%s) runs a __call__ of its own that does not call "
				       "Module.__call__: torch runs none of its hooks, and its calls "
				       "are not written, as the in-process tracer writes none",
				       e->path, e->type_name);
			if (!said_forward && n <= FORWARD_CLASSES &&
			    code_names_call(r, type_forward(r, type))) {
				said_forward = 1;
				warnx_("warning: %s.forward (%s) calls modules through their bound "
				       "__call__ (`m.__call__(x)`): such a call is traced from its first "
				       "module call on; one that makes none (a module without submodules, "
				       "such as nn.Linear) or raises before it is not seen (see "
				       "docs/design.md)", e->type_name, e->path);
			}
		}
		if (bypass[k]) {
			e->traced = 0;
			root_bypass |= e->obj == root;
		}
	}
	return root_bypass;
}

/* --enable-experimental-jit's value in the build's _sysconfigdata (beside the
 * interpreter: PREFIX/lib/pythonX.Y, or Debian's /usr/lib/pythonX.Y), "" when the build
 * has none, NULL when no _sysconfigdata was found. */
static const char *config_jit(const struct target *t, char *buf, size_t cap)
{
	char prefix[PATH_MAX], pattern[PATH_MAX + 128];
	snprintf(prefix, sizeof(prefix), "%s", t->py_path);
	for (int up = 0; up < 2; up++) { /* .../bin/python3.13 or .../lib/libpython3.13.so */
		char *slash = strrchr(prefix, '/');
		if (slash)
			*slash = 0;
	}
	const char *where[] = { prefix, "/usr" };
	for (int w = 0; w < 2; w++) {
		snprintf(pattern, sizeof(pattern), "%s%s/lib/python%d.%d/_sysconfigdata_*.py",
			 t->root, where[w], t->major, t->minor);
		glob_t g;
		if (glob(pattern, 0, NULL, &g))
			continue;
		/* the build's own file, maybe a user's: read as the target (asuser.c) */
		char *line = target_find_line(t, g.gl_pathv[0] + strlen(t->root), NULL,
					      "--enable-experimental-jit");
		globfree(&g);
		buf[0] = 0;
		if (line) {
			char *at = strstr(line, "--enable-experimental-jit");
			at += strlen("--enable-experimental-jit");
			size_t n = *at == '=' ? strcspn(at + 1, "' \"") : 0;
			snprintf(buf, cap, "%.*s", (int)(n ? n : 3), n ? at + 1 : "yes");
			free(line);
		}
		return buf;
	}
	return NULL;
}

int bound_jit(const struct target *t)
{
	if (t->major != 3 || t->minor < 13)
		return 0;
	char cfg[32] = "", env[32] = "";
	const char *mode = config_jit(t, cfg, sizeof(cfg));
	struct elf_file *f = elf_file_open(t->py_open);
	uint64_t v, size;
	int has_jit = f && !elf_file_symbol(f, "_PyJIT_Compile", &v, &size);
	if (f)
		elf_file_close(f);
	if (has_jit && (!mode || !*mode))
		mode = "yes";
	if (!mode || !*mode || !strcmp(mode, "no"))
		return 0;
	const char *e = proc_getenv(t->pid, "PYTHON_JIT", env, sizeof(env)) ? env : NULL;
	/* on by default but in yes-off and interpreter-off builds; PYTHON_JIT=0 turns it off */
	int on = e ? strcmp(e, "0") != 0 : !strstr(mode, "off");
	if (!on)
		return 0;
	warnx_("warning: this CPython %d.%d runs a tier-2 optimizer (built with "
	       "--enable-experimental-jit=%s%s%s): the code it optimizes does not fetch the "
	       "bytecode that evmbpf's watchpoints are on, so modules called through a bound "
	       "__call__ (`step = model.__call__; step(x)`, transformers' generate() steps) "
	       "are not traced; run the target with PYTHON_JIT=0 to trace them", t->major,
	       t->minor, mode, e ? ", PYTHON_JIT=" : "", e ? e : "");
	return 1;
}
