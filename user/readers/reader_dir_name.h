/* The names evmbpf record gives its traces (docs/record.md), read back (reader_dir_name.c):
 * evmbpf-PID[-rankR][@HOST][.N][.flush-K].jsonl. */
#ifndef EVMBPF_READER_DIR_NAME_H
#define EVMBPF_READER_DIR_NAME_H

#define RD_HOST_MAX 64         /* the recorder's HOST, at most this many characters */

struct rd_recname {
	long long pid;
	char rank[32];             /* "" none */
	char host[RD_HOST_MAX + 1]; /* "" none: a name from before the host was in it */
	long long again;           /* N of .N (a later process of the pid), 1 without */
	long long flush;           /* K of .flush-K, -1 without */
};

/* base (a file's name, no folder) is one the recorder gives: 1 and its parts in *out
 * (left as they were otherwise); else 0. */
int rd_recorder_name(const char *base, struct rd_recname *out);
/* K of NAME.flush-K.jsonl, whatever NAME, or -1. */
long long rd_flush_of(const char *base);

#endif
