/* Where a trace's lines go: a chain of sinks. Each takes finished lines (one JSON event,
 * its newline included) in the order of their "i" and hands them on to the next:
 *
 *   trace_emit -> [--cupti --numeric: lines wait for CUDA tensors' stats]
 *              -> [--tail N: the last N lines, kept in memory]
 *              -> the file (or stdout)
 *
 * A stage in front (cupti_numeric.c's) or a keeper (the tail) is one more sink; so is the
 * recorder's in-memory tail of a process. No flag steers a line: the chain is built when
 * the trace opens (and a stage put in front when its feature starts). */
#ifndef EVMBPF_SINK_H
#define EVMBPF_SINK_H

#include <stdint.h>
#include <stdio.h>

#include "util.h"

struct sink;

/* An event kept as it came, made into its line only when its line is wanted: the
 * --tail keeper holds events that way (most never get written), every other sink takes
 * lines. format() writes the line (its newline included) and leaves the event as it
 * was (a flush formats the same event again later); free() ends it. */
struct deferred {
	void (*format)(const struct deferred *d, struct buf *line);
	void (*free)(struct deferred *d);
	size_t bytes;   /* what it holds in memory, itself included */
};

struct sink_ops {
	/* Take the line: its data becomes the sink's (line->data is then NULL), or it is
	 * written now, or handed on. */
	void (*put)(struct sink *s, struct buf *line);
	/* Take a deferred event (it becomes the sink's); NULL: the sink takes lines only,
	 * and is handed the event's line. */
	void (*put_deferred)(struct sink *s, struct deferred *d);
	/* The end of the trace: what the sink keeps goes on to the next (the tail's lines and
	 * its `dropped` line: *next_i is the "i" the next line written gets, advanced for
	 * each line the sink adds). From then on it hands every line straight on. */
	void (*finish)(struct sink *s, int64_t *next_i);
	/* Write out what is buffered. 0, or an errno (the first failure, kept). */
	int (*flush)(struct sink *s);
	void (*free)(struct sink *s);
};

struct sink {
	const struct sink_ops *ops;
	struct sink *next;   /* where its lines go on; NULL for the last */
	int finished;
};

/* The chain's ends: lines in at the first, each sink's finish in order, flush of each,
 * and freeing the whole chain. */
static inline void sink_put(struct sink *s, struct buf *line)
{
	s->ops->put(s, line);
}
/* A deferred event into the chain: kept as it is where the first sink keeps events,
 * else its line now. Does the first sink keep events (should an event be deferred)? */
void sink_put_deferred(struct sink *s, struct deferred *d);
int sink_defers(const struct sink *s);
void sink_finish(struct sink *chain, int64_t *next_i);
int sink_flush(struct sink *chain);
void sink_free(struct sink *chain);
/* Hand a line on to the next sink (a stage's or keeper's way out). */
void sink_pass(struct sink *s, struct buf *line);

/* The file: created 0600, never over an existing file unless force, never through a
 * symbolic link, given to the sudo user; "-" is stdout. NULL (said on stderr) when it
 * cannot be. */
struct sink *sink_file_open(const char *path, int force);
/* The same, created when its first line comes (or at a flush): a trace that may never
 * be written (evmbpf record) leaves no file. Its creation's failure is said then, and
 * is its error. */
struct sink *sink_file_deferred(const char *path, int force);
/* An open stream (stdout, for the tests' aids). */
struct sink *sink_file_stream(FILE *f);
/* Its descriptor, or -1 (stdout); the first write error (an errno), or 0. */
int sink_file_fd(const struct sink *s);
int sink_file_error(const struct sink *s);
/* Close it and remove the file (not stdout): a trace that never began. */
void sink_file_discard(struct sink *s, const char *path);

/* --tail N: the last n lines, handed on at the finish, after them a `dropped` line with
 * how many were emitted before them (the reference's tail). It keeps deferred events as
 * they are, and formats them only when it hands them on (at the finish, or a copy). */
struct sink *sink_tail_new(struct sink *next, size_t n);
/* The most bytes the tail's lines and events may hold together (0: no bound); past it the
 * oldest go first, as when n is reached. 1 the first time the bound took a line. */
int sink_tail_bound(struct sink *tail, size_t max_bytes);
size_t sink_tail_bytes(const struct sink *tail);
/* A copy of the tail's lines, oldest first, put into `to` (its events formatted, kept
 * as they are): what a flush writes. */
void sink_tail_copy(const struct sink *tail, struct sink *to);

#endif
