/* evmbpf summarize DIR over the directory `evmbpf record` writes (docs/record.md):
 * what died on the node, first failure first (reader_dir.c). */
#ifndef EVMBPF_READER_DIR_H
#define EVMBPF_READER_DIR_H

#include <stdio.h>

/* Whether dir is laid out as the recorder writes it (and is not a run directory):
 * its traces in folders (DIR/job-ID/), a live tail (*.flush-K.jsonl), a header the
 * recorder wrote, only evmbpf-PID[-rankR][@HOST].jsonl files with no other evmbpf's header,
 * or the --dir of the recorder running now. */
int rd_dir_is_record(const char *dir);

/* The node's report for a recorder's dir, written to out; the exit code. */
int rd_summarize_node(const char *dir, long long tail, FILE *out);

/* summarize's one argument: the node's report and its exit code when it names a
 * recorder's directory; -1 otherwise (a trace, a run directory, a job's directory). */
int rd_dir_main(const char *arg, long long tail);

#endif
