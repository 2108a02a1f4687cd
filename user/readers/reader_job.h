/* evmbpf summarize over the traces of a job's processes (reader_job.c). */
#ifndef EVMBPF_READER_JOB_H
#define EVMBPF_READER_JOB_H

#include <stdio.h>

/* The *.jsonl files directly in dir, sorted, into *files (malloc'd); how many. */
int rd_job_files(const char *dir, char ***files);
/* The job's summary of n traces; the exit code. */
int rd_summarize_job(char **files, int n, long long tail, FILE *out);
/* summarize's arguments: several traces, or a directory of several (not a run
 * directory with debug/): the job's summary, its exit code; -1: one trace, as before. */
int rd_job_main(char **traces, int n, long long tail);

#endif
