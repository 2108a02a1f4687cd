/* evmbpf record: whose a trace is, for its closing `recorded` mark (record_who.c). */
#ifndef EVMBPF_RECORD_WHO_H
#define EVMBPF_RECORD_WHO_H

#include <sys/types.h>

struct target;

/* At the attach: the JSON object's members (command, exe, uid, user, started, host,
 * python, rank, job), unclosed, malloc'd. record_who_end: with the torch version known
 * at the end, closed (who is freed). */
char *record_who(const struct target *t, uid_t uid, const char *rank);
char *record_who_end(char *who, const char *torch_version);

#endif
