/* --out's pattern: %p (the pid), %r (the rank), %% (a %), one file per process. */
#include "outpattern.h"

#include <stdio.h>
#include <string.h>

/* Why the pattern cannot be used (NULL: it can) */
const char *out_pattern_problem(const char *pattern, int several)
{
	int names = 0;
	for (const char *p = pattern; *p; p++) {
		if (*p != '%')
			continue;
		p++;
		if (*p == 'p' || *p == 'r')
			names = 1;
		else if (*p != '%')
			return "--out takes %p (pid), %r (rank) and %% in its pattern, nothing else "
			       "after a %";
	}
	if (several && !strcmp(pattern, "-"))
		return "several processes cannot share stdout: give --out a pattern with %p or "
		       "%r, e.g. --out 'trace-%r-%p.jsonl'";
	if (several && !names)
		return "several processes are traced: --out needs %p (pid) or %r (rank) so that "
		       "each has its own file, e.g. --out 'trace-%r-%p.jsonl'";
	return NULL;
}

/* The file name of one process */
void out_expand(const char *pattern, pid_t pid, const char *rank, char *buf, size_t size)
{
	size_t k = 0;
	for (const char *p = pattern; *p && k + 16 < size; p++) {
		if (*p != '%') {
			buf[k++] = *p;
			continue;
		}
		p++;
		if (*p == 'p')
			k += (size_t)snprintf(buf + k, size - k, "%d", pid);
		else if (*p == 'r')
			k += (size_t)snprintf(buf + k, size - k, "%s", rank);
		else if (*p == '%')
			buf[k++] = '%';
		else if (!*p)
			break;
	}
	buf[k] = 0;
}
