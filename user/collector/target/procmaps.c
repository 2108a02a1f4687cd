/* A process's mappings, /proc/PID/maps read with bounds (procmaps.h). */
#include "procmaps.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

int proc_each_mapping(pid_t pid, proc_mapping_fn fn, void *arg)
{
	char name[64];
	snprintf(name, sizeof(name), "/proc/%d/maps", pid);
	FILE *f = fopen(name, "re");
	if (!f)
		return -1;
	/* the fields (at most 16+1+16+1+4+1+16+1+8+1+20 and padding to column 73), a path
	 * of PATH_MAX bytes written as \012 each, " (deleted)" */
	char line[128 + 4 * PATH_MAX + 16];
	int rc = 0, whole = 1;
	long lines = 0;
	while (fgets(line, sizeof(line), f)) {
		int start = whole; /* a line longer than the buffer: its rest is no line */
		whole = strchr(line, '\n') != NULL;
		if (!start || !whole)
			continue;
		if (++lines > PROC_MAPS_MAX_LINES) {
			rc = -1;
			errno = E2BIG;
			break;
		}
		struct proc_mapping m = {0};
		int pos = 0;
		if (sscanf(line, "%lx-%lx %7s %lx %x:%x %lu%n", &m.start, &m.end, m.perms, &m.offset,
			   &m.major, &m.minor, &m.inode, &pos) < 7 || !pos)
			continue;
		char *p = line + pos;
		p += strspn(p, " ");
		p[strcspn(p, "\n")] = 0;
		m.path = p;
		if ((rc = fn(arg, &m)))
			break;
	}
	int err = errno;
	if (!rc && ferror(f)) {
		rc = -1;
		err = EIO;
	}
	fclose(f);
	errno = err;
	return rc;
}
