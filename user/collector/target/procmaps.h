/* A process's mappings, /proc/PID/maps read line by line with bounds: the one reader
 * of that file. Its paths are whatever the process's owner named its files, so a line
 * is taken whole or not at all, and no path is opened here. */
#ifndef EVMBPF_PROCMAPS_H
#define EVMBPF_PROCMAPS_H

#include <stdint.h>
#include <sys/types.h>

/* The most lines read: 16 times the kernel's default vm.max_map_count (65530). A
 * process with more is refused (E2BIG), never read in part. */
#define PROC_MAPS_MAX_LINES (1 << 20)

struct proc_mapping {
	uint64_t start, end, offset, inode;
	unsigned major, minor;  /* the file's device */
	char perms[8];          /* "r-xp" */
	const char *path;       /* as the kernel writes it (newlines as \012, " (deleted)"
				 * after a removed file); "" for an anonymous mapping */
};

/* fn(arg, m) for each mapping in order, m valid during the call only; a nonzero return
 * ends the walk. Returns fn's nonzero value, 0 at the end, -1 when the file cannot be
 * read (errno: ENOENT, EACCES, ...) or holds more than PROC_MAPS_MAX_LINES lines
 * (E2BIG). A line longer than a path can make (escaped newlines: 4 bytes each) is
 * skipped whole, its tail never taken for a line. */
typedef int (*proc_mapping_fn)(void *arg, const struct proc_mapping *m);
int proc_each_mapping(pid_t pid, proc_mapping_fn fn, void *arg);

#endif
