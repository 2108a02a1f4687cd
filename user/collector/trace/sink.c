/* The sinks a trace's lines go through (sink.h): the chain, the file, the --tail keeper. */
#include "sink.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void sink_pass(struct sink *s, struct buf *line)
{
	if (s->next)
		sink_put(s->next, line);
}

void sink_put_deferred(struct sink *s, struct deferred *d)
{
	if (s->ops->put_deferred && !s->finished) {
		s->ops->put_deferred(s, d);
		return;
	}
	struct buf line = {0};
	d->format(d, &line);
	d->free(d);
	sink_put(s, &line);
	buf_free(&line);
}

int sink_defers(const struct sink *s)
{
	return s->ops->put_deferred && !s->finished;
}

void sink_finish(struct sink *chain, int64_t *next_i)
{
	for (struct sink *s = chain; s; s = s->next) {
		if (!s->finished && s->ops->finish)
			s->ops->finish(s, next_i);
		s->finished = 1;
	}
}

int sink_flush(struct sink *chain)
{
	int err = 0;
	for (struct sink *s = chain; s; s = s->next) {
		int e = s->ops->flush ? s->ops->flush(s) : 0;
		if (e && !err)
			err = e;
	}
	return err;
}

void sink_free(struct sink *chain)
{
	while (chain) {
		struct sink *next = chain->next;
		chain->ops->free(chain);
		chain = next;
	}
}

/* The file */

struct file_sink {
	struct sink base;
	FILE *f;
	int error;   /* the first write error (errno); nothing is written after it */
	char *path;  /* deferred: created at the first line */
	int force;
};

static FILE *file_create(const char *path, int force);

/* A deferred file, created now; 0, or its error. */
static int file_ready(struct file_sink *fs)
{
	if (!fs->f && !fs->error && fs->path && !(fs->f = file_create(fs->path, fs->force)))
		fs->error = errno ? errno : EIO;
	return fs->error;
}

static void file_put(struct sink *s, struct buf *line)
{
	struct file_sink *fs = (struct file_sink *)s;
	if (!file_ready(fs) && fwrite(line->data, 1, line->len, fs->f) != line->len)
		fs->error = errno ? errno : EIO;
}

static int file_flush(struct sink *s)
{
	struct file_sink *fs = (struct file_sink *)s;
	if (fs->f && fflush(fs->f) && !fs->error)
		fs->error = errno ? errno : EIO;
	return fs->error;
}

static void file_free(struct sink *s)
{
	struct file_sink *fs = (struct file_sink *)s;
	if (fs->f && fs->f != stdout)
		fclose(fs->f);
	free(fs->path);
	free(fs);
}

static const struct sink_ops file_ops = {
	.put = file_put, .flush = file_flush, .free = file_free,
};

struct sink *sink_file_stream(FILE *f)
{
	struct file_sink *fs = xcalloc(1, sizeof(*fs));
	fs->base.ops = &file_ops;
	fs->f = f;
	return &fs->base;
}

struct sink *sink_file_open(const char *path, int force)
{
	if (!strcmp(path, "-"))
		return sink_file_stream(stdout);
	FILE *f = file_create(path, force);
	return f ? sink_file_stream(f) : NULL;
}

struct sink *sink_file_deferred(const char *path, int force)
{
	if (!strcmp(path, "-"))
		return sink_file_stream(stdout);
	struct file_sink *fs = (struct file_sink *)sink_file_stream(NULL);
	fs->path = xstrdup(path);
	fs->force = force;
	return &fs->base;
}

/* The file, or NULL (said; errno kept). */
static FILE *file_create(const char *path, int force)
{
	int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (force ? O_TRUNC : O_EXCL);
	int fd = open(path, flags, 0600);
	if (fd < 0) {
		if (errno == EEXIST)
			warnx_("%s exists; evmbpf does not overwrite a file it did not create "
			       "(remove it, pick another --out, or pass --force)", path);
		else if (errno == ELOOP)
			warnx_("%s is a symbolic link; evmbpf does not follow it (name the real file)",
			       path);
		else
			warnx_("cannot create %s: %s", path, strerror(errno));
		return NULL;
	}
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		warnx_("%s is not a regular file", path);
		close(fd);
		errno = EINVAL;
		return NULL;
	}
	/* under sudo, the trace belongs to the user who asked for it */
	const char *uid = getenv("SUDO_UID"), *gid = getenv("SUDO_GID");
	if (uid && gid && fchown(fd, (uid_t)atoi(uid), (gid_t)atoi(gid)))
		debugx("cannot give %s to uid %s: %s", path, uid, strerror(errno));
	FILE *f = fdopen(fd, "w");
	if (!f) {
		close(fd);
		return NULL;
	}
	/* a streaming trace is written in big pieces: fewer write(2)s for the collector
	 * (the loop flushes every pass anyway) */
	setvbuf(f, NULL, _IOFBF, 1 << 20);
	return f;
}

int sink_file_fd(const struct sink *s)
{
	const struct file_sink *fs = (const struct file_sink *)s;
	return fs->f && fs->f != stdout ? fileno(fs->f) : -1;
}

int sink_file_error(const struct sink *s)
{
	return ((const struct file_sink *)s)->error;
}

void sink_file_discard(struct sink *s, const char *path)
{
	struct file_sink *fs = (struct file_sink *)s;
	int file = fs->f && fs->f != stdout;
	file_free(s);
	if (file)
		unlink(path);
}

/* --tail N */

/* one of the tail's places: a line, or a deferred event */
struct tail_item {
	char *line;
	size_t len;
	struct deferred *ev;
};

struct tail_sink {
	struct sink base;
	struct tail_item *ring;
	size_t cap, head, count;
	size_t bytes, max_bytes;   /* what its lines and events hold; the bound (0: none) */
	uint64_t bound_hit;        /* lines the bound in bytes took */
	int bound_said;
};

static size_t item_bytes(const struct tail_item *it)
{
	return it->ev ? it->ev->bytes : it->len;
}

static void item_free(struct tail_item *it)
{
	if (it->ev)
		it->ev->free(it->ev);
	free(it->line);
	memset(it, 0, sizeof(*it));
}

/* The item's line: its own, or its event's formatted into `tmp`. */
static void item_line(const struct tail_item *it, struct buf *tmp)
{
	if (it->ev)
		it->ev->format(it->ev, tmp);
	else
		buf_put(tmp, it->line, it->len);
}

static void tail_drop_oldest(struct tail_sink *ts)
{
	struct tail_item *it = &ts->ring[ts->head];
	ts->bytes -= item_bytes(it);
	item_free(it);
	ts->head = (ts->head + 1) % ts->cap;
	ts->count--;
}

/* A free place for an item of this size: the oldest dropped while the count or the
 * bound in bytes says so. */
static struct tail_item *tail_place(struct tail_sink *ts, size_t bytes)
{
	if (ts->count == ts->cap)
		tail_drop_oldest(ts);
	while (ts->max_bytes && ts->count && ts->bytes + bytes > ts->max_bytes) {
		tail_drop_oldest(ts); /* the bound in bytes: the oldest go first */
		ts->bound_hit++;
	}
	ts->bytes += bytes;
	return &ts->ring[(ts->head + ts->count++) % ts->cap];
}

static void tail_put(struct sink *s, struct buf *line)
{
	struct tail_sink *ts = (struct tail_sink *)s;
	if (s->finished) {
		sink_pass(s, line);
		return;
	}
	struct tail_item *it = tail_place(ts, line->len);
	it->line = line->data;
	it->len = line->len;
	line->data = NULL;
	line->len = line->cap = 0;
}

static void tail_put_deferred(struct sink *s, struct deferred *d)
{
	tail_place((struct tail_sink *)s, d->bytes)->ev = d;
}

int sink_tail_bound(struct sink *tail, size_t max_bytes)
{
	struct tail_sink *ts = (struct tail_sink *)tail;
	ts->max_bytes = max_bytes;
	if (!ts->bound_hit || ts->bound_said)
		return 0;
	ts->bound_said = 1;
	return 1;
}

size_t sink_tail_bytes(const struct sink *tail)
{
	return ((const struct tail_sink *)tail)->bytes;
}

void sink_tail_copy(const struct sink *tail, struct sink *to)
{
	const struct tail_sink *ts = (const struct tail_sink *)tail;
	struct buf line = {0};
	for (size_t k = 0; k < ts->count; k++) {
		item_line(&ts->ring[(ts->head + k) % ts->cap], &line);
		sink_put(to, &line);
		buf_clear(&line);
	}
	buf_free(&line);
}

static void tail_finish(struct sink *s, int64_t *next_i)
{
	struct tail_sink *ts = (struct tail_sink *)s;
	struct buf line = {0};
	for (size_t k = 0; k < ts->count; k++) {
		struct tail_item *it = &ts->ring[(ts->head + k) % ts->cap];
		if (it->ev) {
			item_line(it, &line);
		} else { /* its text handed on as it is */
			line.data = it->line, line.len = it->len, line.cap = it->len;
			it->line = NULL;
		}
		item_free(it);
		sink_pass(s, &line);
		buf_free(&line);
	}
	ts->bytes = 0;
	int64_t dropped = *next_i - 1 - (int64_t)ts->count;
	ts->count = 0;
	if (dropped > 0) {
		buf_printf(&line, "{\"event\": \"dropped\", \"count\": %lld, \"i\": %lld}\n",
			   (long long)dropped, (long long)(*next_i)++);
		sink_pass(s, &line);
		buf_free(&line);
	}
}

static void tail_free(struct sink *s)
{
	struct tail_sink *ts = (struct tail_sink *)s;
	for (size_t k = 0; k < ts->cap; k++)
		item_free(&ts->ring[k]);
	free(ts->ring);
	free(ts);
}

static const struct sink_ops tail_ops = {
	.put = tail_put, .put_deferred = tail_put_deferred, .finish = tail_finish,
	.free = tail_free,
};

struct sink *sink_tail_new(struct sink *next, size_t n)
{
	struct tail_sink *ts = xcalloc(1, sizeof(*ts));
	ts->base.ops = &tail_ops;
	ts->base.next = next;
	ts->cap = n;
	ts->ring = xcalloc(n, sizeof(*ts->ring));
	return &ts->base;
}
