/* evmbpf record: what the recorder's folder may hold (retention.c, docs/record.md,
 * "How much of the disk"): --max-dir-size, the recorder's files in DIR together, and
 * --keep-free, what the file system keeps free; the oldest files go first. */
#ifndef EVMBPF_RETENTION_H
#define EVMBPF_RETENTION_H

#include <stdint.h>
#include <sys/types.h>

/* The limits given on the command line (-1: not given, the default then). */
void retention_set(int64_t max_dir_size, int64_t keep_free);
/* The defaults made from DIR's file system (--max-dir-size 10% of it, --keep-free 15%,
 * each at most 4 GiB) and the limits said in one line: 0, or -1 (said). */
int retention_start(const char *dir);

enum { RETENTION_ROOM, RETENTION_OVER_DIR, RETENTION_OVER_FREE, RETENTION_NO_FOLDER };
/* Room in dir for `size` bytes of pid's (what: "trace", "live tail") about to be written
 * to path, a file under dir: the recorder's oldest files there removed, each said in one
 * line, until its files with these bytes are within --max-dir-size and the file system
 * keeps --keep-free after them; path's job folder made again when a removal took it.
 * RETENTION_ROOM, or the limit that leaves no room even with every old file removed:
 * nothing is removed then, and the write is refused (said; with -v only, when quiet);
 * RETENTION_NO_FOLDER: path's job folder could not be made again (said). */
int retention_room(const char *dir, pid_t pid, const char *what, const char *path,
		   uint64_t size, int quiet);

#endif
