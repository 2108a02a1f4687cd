/* The driver: every run of the tracer is a job (job.c), its processes from its sources
 * (job_state.h): the --pid list (attach.c), a launched command (launch.c), --follow,
 * the node (evmbpf record) */
#ifndef EVMBPF_DRIVERS_H
#define EVMBPF_DRIVERS_H

#include <sys/types.h>

#include "session.h"

/* job.c: evmbpf's exit status */
int run_job(const struct tracer_opts *opts);
/* attach.c: the modules running at a --pid attach, watched for their orphan exits */
void watch_running_modules(struct session *s);
/* launch.c */
pid_t spawn_held(char **argv, int *go_fd);
int exit_code_of(int status);

#endif
