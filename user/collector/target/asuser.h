/* A file the target names, read with the target's own rights (asuser.c). */
#ifndef EVMBPF_ASUSER_H
#define EVMBPF_ASUSER_H

#include <sys/types.h>

#define TARGET_GROUPS_MAX 64

/* Whose rights a process has: its effective uid and gid and its groups. */
struct target_creds {
	int known;
	uid_t uid;
	gid_t gid;
	int ngroups;
	gid_t groups[TARGET_GROUPS_MAX];
};

/* pid's, from /proc/PID/status: 0, or -1 (it is gone, or more groups than kept). */
int target_creds(pid_t pid, struct target_creds *c);

/* Line lineno (from 1, with its newline) of path, relative to root_fd (the target's root
 * directory), read in a child with the rights of c (the target's, taken at its attach:
 * it may be gone by the time its traceback is written): a regular file only, opened
 * without blocking, 8 MiB of it and 64 KiB of the line at most, one second at most. A
 * string to free, or NULL when it cannot be read so (nothing is read without c). */
char *read_line_as_target(const struct target_creds *c, int root_fd, const char *path,
			  int lineno);

/* The first line of path that begins with prefix and holds needle (either may be NULL),
 * read as read_line_as_target reads (the same rights, bounds and wait); NULL when none
 * is found so. */
char *find_line_as_target(const struct target_creds *c, int root_fd, const char *path,
			  const char *prefix, const char *needle);

#endif
