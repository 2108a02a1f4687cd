/* A process's mapped objects, and its dynamic loader's debug hook (ldso.h). */
#include "ldso.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "elfsym.h"

int maps_find_object(pid_t pid, const char *prefix, char *name, char *open_path, size_t len,
		     uint64_t *start_out)
{
	char path[64], line[PATH_MAX + 128];
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	int found = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end, off, inode;
		char perms[8], dev[16], file[PATH_MAX];
		file[0] = 0;
		if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %4095[^\n]", &start, &end, perms, &off, dev,
			   &inode, file) < 6 || !file[0] || off != 0)
			continue;
		const char *base = strrchr(file, '/');
		base = base ? base + 1 : file;
		if (strncmp(base, prefix, strlen(prefix)))
			continue;
		snprintf(name, len, "%s", file);
		struct stat st;
		if ((size_t)snprintf(open_path, len, "/proc/%d/root%s", pid, file) >= len ||
		    stat(open_path, &st) || st.st_ino != inode)
			snprintf(open_path, len, "/proc/%d/map_files/%lx-%lx", pid, start, end);
		*start_out = start;
		found = 1;
		break;
	}
	fclose(f);
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
