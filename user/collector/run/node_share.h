/* evmbpf record: each user's share of the recorder's slots, waiting execs, loop time,
 * memory and disk (node_share.c). */
#ifndef EVMBPF_NODE_SHARE_H
#define EVMBPF_NODE_SHARE_H

#include <stdint.h>
#include <sys/types.h>

struct job;
struct record_opts;

#define NODE_NO_UID ((uid_t)-1)

/* A process's real uid (NODE_NO_UID when it is gone). */
uid_t node_proc_uid(pid_t pid);
/* 1 (said once until it has room again) when uid's live processes fill its share of
 * the slots, or its waiting execs their share of the looks; else 0. */
int node_slot_refused(const struct job *j, pid_t pid, uid_t uid);
int node_look_refused(const struct job *j, pid_t pid, uid_t uid);
/* The waiting exec to look at next (-1: none is due): of the user served longest ago,
 * its oldest; node_served says its user was served now. */
int node_next_look(const struct job *j, uint64_t now);
void node_served(uid_t uid);
/* Each live process's share (struct proc's) of avail bytes: avail split between the users
 * with live processes, each user's part between its processes. */
void node_shares(const struct job *j, uint64_t avail);
/* 1 (said) when uid's traces written so far reach half of --max-disk, or all of them
 * reach --max-disk: the trace of pid (path) is not written. */
int node_disk_refused(const struct record_opts *o, pid_t pid, uid_t uid, const char *path);
void node_disk_add(uid_t uid, uint64_t bytes);

#endif
