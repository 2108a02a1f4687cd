/* The target process's state, from /proc/PID/stat and kill(2). */
#ifndef EVMBPF_PROCSTATE_H
#define EVMBPF_PROCSTATE_H

#include <sys/types.h>

/* The state letter of a /proc/.../stat file (R, S, T, Z, ...); 0 when it cannot be read
 * (errno says why, ENOENT: the task is gone). */
char stat_state(const char *path);
/* The process has exited: gone, or a zombie its parent has not reaped yet. */
int process_gone(pid_t pid);
/* 0 once every task of pid is stopped (state T); -1 after timeout_ms. */
int wait_stopped(pid_t pid, int timeout_ms);
/* The value of NAME in the process's environment (/proc/PID/environ, read whole): 1 with
 * it copied into buf (cut at cap), 0 when it is unset or the file cannot be read. */
int proc_getenv(pid_t pid, const char *name, char *buf, size_t cap);

/* Is pid's thread pid (not running: stopped, held) at an address in the file of the
 * dynamic loader the kernel loaded for it (auxv's AT_BASE)? 1 it is: at its start (its
 * image may not be relocated yet, its entry point is to come), or later inside a dlopen,
 * which only the process's own state tells apart (job_follow.c asks its Python first);
 * 0 it is not (it runs its program's code or its libraries'); -1 unknown (running, a
 * static executable, /proc not readable). Read as root: the addresses only, no path. */
int proc_in_loader(pid_t pid);

/* Its parent and its rank in a job (RANK, else LOCAL_RANK: a number of at most 9 digits,
 * or ""): what the trace header and --out's %r name. */
void proc_identity(pid_t pid, int *ppid, char rank[16]);

#endif
