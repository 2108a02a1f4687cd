/* The drivers: one process by --pid (attach.c), a launched command (launch.c), every
 * process of a job (job.c); tracer.c picks one */
#ifndef EVMBPF_DRIVERS_H
#define EVMBPF_DRIVERS_H

#include <sys/types.h>

#include "session.h"

/* attach.c, launch.c, job.c (several processes, --follow): evmbpf's exit status */
int run_attach(const struct tracer_opts *opts);
int run_launch(const struct tracer_opts *opts);
int run_job(const struct tracer_opts *opts);
/* attach.c: the modules running at a --pid attach, watched for their orphan exits */
void watch_running_modules(struct session *s);
/* launch.c */
pid_t spawn_held(char **argv, int *go_fd);
int exit_code_of(int status);

#endif
