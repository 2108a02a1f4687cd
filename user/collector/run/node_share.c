/* evmbpf record: each user's share of the recorder. The recorder reads every user's
 * processes as root, so one user's processes must not take what the others need: its
 * slots (USER_SLOTS_MAX of JOB_MAX), the execs waiting to be looked at (USER_LOOKS_MAX
 * of LOOKS_MAX), the loop's time (the waiting execs are taken user by user, the one
 * served longest ago first), --max-memory (split between the users with live processes,
 * then between each one's processes) and --max-disk (half of it a user). A user is a
 * process's real uid, read from /proc when it is first seen. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_state.h"
#include "node_share.h"
#include "util.h"

#define USERS_MAX 4096

static struct user {
	uid_t uid;
	uint64_t served_ns;  /* when one of its execs was last looked at */
	uint64_t disk;       /* the bytes of its traces written by this recorder */
	unsigned said_slots : 1, said_looks : 1, said_disk : 1;
} users[USERS_MAX];
static int nusers;

/* Its entry; past USERS_MAX users the last entry is every later user's (they share it). */
static struct user *user_of(uid_t uid)
{
	for (int i = 0; i < nusers; i++)
		if (users[i].uid == uid)
			return &users[i];
	if (nusers == USERS_MAX)
		return &users[USERS_MAX - 1];
	struct user *u = &users[nusers++];
	memset(u, 0, sizeof(*u));
	u->uid = uid;
	return u;
}

uid_t node_proc_uid(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "re");
	unsigned long uid = (unsigned long)NODE_NO_UID;
	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, "Uid:", 4)) {
			uid = strtoul(line + 4, NULL, 10); /* the real uid */
			break;
		}
	if (f)
		fclose(f);
	return (uid_t)uid;
}

static int user_live(const struct job *j, uid_t uid)
{
	int n = 0;
	for (int i = 0; i < j->n; i++)
		n += j->procs[i]->live && j->procs[i]->uid == uid;
	return n;
}

/* USER_SLOTS_MAX; EVMBPF_TEST_USER_SLOTS sets it for the tests (tests/test_record.py) */
static int user_slots(void)
{
	static int most;
	if (!most) {
		const char *v = getenv("EVMBPF_TEST_USER_SLOTS");
		most = v && atoi(v) > 0 && atoi(v) < USER_SLOTS_MAX ? atoi(v) : USER_SLOTS_MAX;
	}
	return most;
}

int node_slot_refused(const struct job *j, pid_t pid, uid_t uid)
{
	struct user *u = user_of(uid);
	if (user_live(j, uid) < user_slots()) {
		u->said_slots = 0;
		return 0;
	}
	if (!u->said_slots++)
		warnx_("user %u has %d processes traced, its share of the recorder's %d: %d is not "
		       "traced, nor its next ones until one ends", (unsigned)uid, user_slots(),
		       JOB_MAX, pid);
	else
		debugx("user %u has %d processes traced: %d is not traced", (unsigned)uid,
		       user_slots(), pid);
	return 1;
}

int node_look_refused(const struct job *j, pid_t pid, uid_t uid)
{
	int waiting = 0;
	for (int i = 0; i < LOOKS_MAX; i++)
		waiting += j->node->looks[i].pid && j->node->looks[i].pid != pid && j->node->looks[i].uid == uid;
	struct user *u = user_of(uid);
	if (waiting < USER_LOOKS_MAX) {
		u->said_looks = 0;
		return 0;
	}
	if (!u->said_looks++)
		warnx_("user %u has %d execs waiting to be looked at, its share: %d is not looked "
		       "at, nor its next ones until those are", (unsigned)uid, USER_LOOKS_MAX, pid);
	else
		debugx("user %u has %d execs waiting: %d is not looked at", (unsigned)uid,
		       USER_LOOKS_MAX, pid);
	return 1;
}

int node_next_look(const struct job *j, uint64_t now)
{
	int best = -1;
	uint64_t best_served = 0;
	for (int i = 0; i < LOOKS_MAX; i++) {
		if (!j->node->looks[i].pid || j->node->looks[i].due_ns > now)
			continue;
		uint64_t served = user_of(j->node->looks[i].uid)->served_ns;
		if (best < 0 || served < best_served ||
		    (served == best_served && j->node->looks[i].due_ns < j->node->looks[best].due_ns)) {
			best = i;
			best_served = served;
		}
	}
	return best;
}

void node_served(uid_t uid)
{
	user_of(uid)->served_ns = mono_ns();
}

void node_shares(const struct job *j, uint64_t avail)
{
	uid_t seen[USERS_MAX];
	int nseen = 0;
	for (int i = 0; i < j->n; i++) {
		if (!j->procs[i]->live)
			continue;
		int k = 0;
		while (k < nseen && seen[k] != j->procs[i]->uid)
			k++;
		if (k == nseen && nseen < USERS_MAX)
			seen[nseen++] = j->procs[i]->uid;
	}
	for (int i = 0; i < j->n; i++) {
		struct proc *p = j->procs[i];
		if (!p->live)
			continue;
		p->share = (size_t)(avail / (uint64_t)(nseen ? nseen : 1) /
				    (uint64_t)user_live(j, p->uid));
	}
}

int node_disk_refused(const struct record_opts *o, pid_t pid, uid_t uid, const char *path)
{
	uint64_t all = 0;
	for (int i = 0; i < nusers; i++)
		all += users[i].disk;
	struct user *u = user_of(uid);
	if (u->disk < o->max_disk / 2 && all < o->max_disk)
		return 0;
	if (!u->said_disk++)
		warnx_("%d: its trace is not written: %s (%llu bytes of traces written by this "
		       "recorder, %llu of them user %u's; --max-disk %llu, half of it a user)",
		       pid, path, (unsigned long long)all, (unsigned long long)u->disk,
		       (unsigned)uid, (unsigned long long)o->max_disk);
	else
		debugx("%d: its trace is not written: user %u's traces reached their share of "
		       "--max-disk", pid, (unsigned)uid);
	return 1;
}

void node_disk_add(uid_t uid, uint64_t bytes)
{
	user_of(uid)->disk += bytes;
}
