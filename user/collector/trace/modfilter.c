#include <string.h>

#include "modfilter.h"
#include "util.h"

void modfilter_apply(const struct pyre *re, const char *pattern, struct modtree *mods)
{
	static int warned_none, warned_gave_up;
	size_t matched = 0;
	const char *example = NULL;

	for (size_t i = 0; i < mods->cap; i++) {
		struct mod_entry *e = &mods->slots[i];
		if (!e->obj)
			continue;
		int rc = pyre_search(re, e->path, strlen(e->path));
		if (rc < 0 && !warned_gave_up++)
			warnx_("warning: --modules could not be decided on '%s' (the matcher's "
			       "backtracking limit); it is not traced", e->path);
		e->traced = rc == 1;
		if (!example || strcmp(example, "<root>") == 0 || strlen(e->path) > strlen(example))
			example = e->path;
		matched += e->traced;
	}
	if (!matched && mods->count && !warned_none++)
		warnx_("warning: --modules '%s' matches none of the model's %zu module paths "
		       "(such as '%s'); the trace holds its forwards only", pattern, mods->count,
		       example);
}

int modfilter_check(const char *arg)
{
	char why[512];
	struct pyre *re = *arg ? pyre_compile(arg, why, sizeof(why)) : NULL;
	if (!re) {
		if (*arg)
			warnx_("--modules %s", why);
		else
			warnx_("--modules needs a pattern (leave it out to trace every module)");
		return -1;
	}
	pyre_free(re);
	return 0;
}
