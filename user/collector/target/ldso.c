/* A process's mapped objects, and its dynamic loader's debug hook (ldso.h). */
#include "ldso.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "elfsym.h"
#include "procmaps.h"

struct find_object {
	pid_t pid;
	const char *prefix;
	char *name, *open_path;
	size_t len;
	uint64_t start;
};

static int find_object(void *arg, const struct proc_mapping *m)
{
	struct find_object *o = arg;
	if (m->path[0] != '/' || m->offset != 0)
		return 0;
	const char *base = strrchr(m->path, '/') + 1;
	if (strncmp(base, o->prefix, strlen(o->prefix)))
		return 0;
	snprintf(o->name, o->len, "%s", m->path);
	struct stat st;
	if ((size_t)snprintf(o->open_path, o->len, "/proc/%d/root%s", o->pid, m->path) >= o->len ||
	    stat(o->open_path, &st) || st.st_ino != m->inode)
		snprintf(o->open_path, o->len, "/proc/%d/map_files/%lx-%lx", o->pid,
			 (unsigned long)m->start, (unsigned long)m->end);
	o->start = m->start;
	return 1;
}

int maps_find_object(pid_t pid, const char *prefix, char *name, char *open_path, size_t len,
		     uint64_t *start_out)
{
	struct find_object o = { pid, prefix, name, open_path, len, 0 };
	int found = proc_each_mapping(pid, find_object, &o);
	if (found > 0)
		*start_out = o.start;
	return found;
}

int ldso_debug_find(pid_t pid, char *open_path, size_t len, uint64_t *state_off,
		    uint64_t *r_debug)
{
	/* glibc's names (ld-linux-x86-64.so.2; ld-2.31.so before 2.34), musl's */
	static const char *const names[] = { "ld-linux", "ld-2.", "ld-musl" };
	char name[PATH_MAX];
	uint64_t start = 0, v, off, rd;
	int found = 0;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && found <= 0; i++)
		found = maps_find_object(pid, names[i], name, open_path, len, &start);
	if (found <= 0)
		return -1;
	struct elf_file *e = elf_file_open(open_path);
	if (!e)
		return -1;
	uint64_t bias = start - elf_file_base_vaddr(e);
	int ok = !elf_file_symbol(e, "_dl_debug_state", &v, NULL) && !elf_file_vaddr_to_offset(e, v, &off) &&
		 !elf_file_symbol(e, "_r_debug", &rd, NULL);
	elf_file_close(e);
	if (!ok)
		return -1;
	*state_off = off;
	*r_debug = bias + rd;
	return 0;
}
