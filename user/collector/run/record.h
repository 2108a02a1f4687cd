/* evmbpf record's side of the run loop (record.c): which processes of the node it
 * traces, where their traces go, which ends deserve one, the pid file and the flush
 * requests. job.c runs the loop; nothing here calls back into it. See docs/record.md. */
#ifndef EVMBPF_RECORD_H
#define EVMBPF_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tracer.h"

struct pyre;

/* --match compiled (NULL: none, or -1 said: not a valid pattern). */
int record_match_compile(const struct record_opts *o, struct pyre **out);
/* Is this process one the recorder traces: Python, its command line found by --match,
 * in --cgroup or below? 1 yes, 0 no. */
int record_wanted(const struct record_opts *o, const struct pyre *match, pid_t pid);
/* record_wanted without the Python check (which needs its libraries mapped): at its exec,
 * is the process one the recorder would take if it is Python? 1 yes, 0 no. */
int record_chosen(const struct record_opts *o, const struct pyre *match, pid_t pid);
/* The processes running now that record_wanted takes, evmbpf itself apart: how many
 * were put into pids. */
int record_scan(const struct record_opts *o, const struct pyre *match, pid_t *pids, int max);
/* The node in the traces' names: uname's nodename, each character outside [A-Za-z0-9_-]
 * made '_' (an FQDN's dots too), at most RECORD_HOST_MAX of them: the folders of many
 * nodes merge without a name taken twice. */
#define RECORD_HOST_MAX 64
const char *record_host(void);
/* Where a process's trace goes: DIR[/job-ID]/evmbpf-PID[-rankR]@HOST[.N].jsonl, the
 * job's folder made (ID: the process's TORCHELASTIC_RUN_ID, else port-MASTER_PORT); .N
 * (2, 3, ...) when an earlier process of that pid left a file there. 0, or -1 (said). */
int record_path(const struct record_opts *o, pid_t pid, const char *rank, char *out, size_t cap);
/* Its live tail's K-th flush: the trace's path with .flush-K before .jsonl. 0, or -1. */
int record_flush_path(const char *trace_path, int k, char *out, size_t cap);

/* A Python build evmbpf could not trace is named once: later processes of the same
 * executable are skipped without a word. refused(pid): 1 when its executable was
 * refused before; refuse(pid): remember it. */
int record_exe_refused(pid_t pid);
void record_exe_refuse(pid_t pid);

/* The recorder's pid file (EVMBPF_RECORD_PIDFILE, else /run/evmbpf-record.pid): 0, or
 * -1 (said: another recorder runs, or it cannot be written). */
int record_pidfile_write(void);
void record_pidfile_remove(void);
/* SIGUSR1 (its value a pid, or none): flush requests are taken from here on. */
void record_flush_catch(void);
/* A flush asked for since the last call: 0 none, -1 every process, else that pid. */
pid_t record_flush_asked(void);
/* evmbpf record --flush [--pid PID]: ask the running recorder; evmbpf's exit status. */
int record_flush_send(pid_t pid);

/* The open files' limit raised to its hard limit: each process traced holds about 15
 * descriptors (its ring buffer, its probes), each loaded BPF object about 60, and a shell's
 * soft limit is often 1024. */
void record_fd_limit(void);

/* The size of --max-memory: a number with K, M or G; -1 when it is not one. */
int64_t record_parse_size(const char *text);

#endif
