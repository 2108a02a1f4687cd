/* The trace file: opening it (never over an existing file, never through a link),
 * one JSON line an event (or the last N of them in tail mode), the header, and the
 * `dropped` events. */
#include "trace_parts.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cupti_numeric.h"
#include "describe.h"
#include "gpu_calls.h"
#include "hwwatch.h"
#include "jsonw.h"
#include "numeric.h"
#include "version.h"

static void write_line(struct trace *t, struct buf *line)
{
	buf_putc(line, '\n');
	if (cupti_numeric_on && cupti_defer_line(t, line)) /* waits for CUDA tensors' stats */
		return;
	trace_write_line(t, line);
}

void trace_write_line(struct trace *t, struct buf *line)
{
	if (t->opts.tail > 0) {
		size_t cap = (size_t)t->opts.tail;
		size_t slot = (t->ring_head + t->ring_count) % cap;
		if (t->ring_count == cap) {
			free(t->ring[t->ring_head]);
			t->ring_head = (t->ring_head + 1) % cap;
			slot = (t->ring_head + t->ring_count - 1) % cap;
		} else {
			t->ring_count++;
		}
		t->ring[slot] = line->data;
		line->data = NULL;
		line->len = line->cap = 0;
		return;
	}
	if (t->write_failed)
		return;
	if (fwrite(line->data, 1, line->len, t->out) != line->len) {
		t->write_failed = errno ? errno : EIO;
	}
}

/* Close an event: the reference's "i", then the extension keys. */
void trace_emit(struct trace *t, struct buf *ev, uint32_t tid, uint64_t ts)
{
	/* per event: no printf (the collector's hottest path) */
	buf_puts(ev, ", \"i\": ");
	jw_int(ev, ++t->seq);
	if (tid) {
		buf_puts(ev, ", \"tid\": ");
		jw_int(ev, tid);
		buf_puts(ev, ", \"ts_ns\": ");
		jw_int(ev, (int64_t)((ts ? ts : t->now_ns) + t->boot_to_realtime_ns));
	}
	buf_putc(ev, '}');
	write_line(t, ev);
	buf_free(ev);
	t->events++;
}

static void write_created(struct buf *b)
{
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	char when[64];
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S+00:00", &tm);
	jw_cstr(b, when);
}

void trace_header(struct trace *t)
{
	if (t->header_written)
		return;
	t->header_written = 1;
	target_find_torch(t->target);
	struct buf b = {0};
	int f = 1;
	buf_putc(&b, '{');
	jw_key(&b, &f, "event"), jw_cstr(&b, "header");
	jw_key(&b, &f, "trace_schema_version"), jw_cstr(&b, "1.1");
	jw_key(&b, &f, "created"), write_created(&b);
	jw_key(&b, &f, "config");
	int c = 1;
	buf_putc(&b, '{');
	jw_key(&b, &c, "enabled"), jw_bool(&b, 1);
	jw_key(&b, &c, "modules"), jw_cstr(&b, t->opts.modules);
	jw_key(&b, &c, "numeric"), jw_bool(&b, t->opts.numeric);
	jw_key(&b, &c, "stop_on_nonfinite"), jw_bool(&b, t->opts.stop_on_nonfinite);
	jw_key(&b, &c, "tail");
	if (t->opts.tail > 0)
		jw_int(&b, t->opts.tail);
	else
		jw_null(&b);
	jw_key(&b, &c, "sync"), jw_bool(&b, 0);
	jw_key(&b, &c, "sample_stats"), jw_bool(&b, 0);
	jw_key(&b, &c, "extremes"), jw_int(&b, 0);
	jw_key(&b, &c, "extremes_modules"), jw_null(&b);
	jw_key(&b, &c, "axes"), jw_null(&b);
	jw_key(&b, &c, "axes_modules"), jw_null(&b);
	jw_key(&b, &c, "routing"), jw_null(&b);
	jw_key(&b, &c, "chunk_elements"), jw_null(&b);
	jw_key(&b, &c, "trace_schema_version"), jw_cstr(&b, "1.1");
	buf_putc(&b, '}');
	jw_key(&b, &f, "model_type"), jw_cstr(&b, t->model_type[0] ? t->model_type : NULL);
	jw_key(&b, &f, "torch"), jw_cstr(&b, t->target->torch_version[0] ? t->target->torch_version : NULL);
	jw_key(&b, &f, "cuda"), jw_bool(&b, t->cuda ? cudamem_available(t->cuda) : 0);
	buf_printf(&b, ", \"i\": %lld", (long long)++t->seq);
	/* extension: who wrote this trace, and in which pid namespace its pids and tids are */
	buf_puts(&b, ", \"tracer\": {\"name\": \"evmbpf\", \"version\": \"" EVMBPF_VERSION "\"");
	buf_printf(&b, ", \"pid\": %d, \"python\": \"%d.%d\", \"probe\": \"slot_tp_call\"", t->target->pid,
		   t->target->major, t->target->minor);
	/* which process of a job: its parent, its rank (RANK, else LOCAL_RANK, or null) */
	buf_printf(&b, ", \"ppid\": %d, \"rank\": ", t->target->ppid);
	if (t->target->rank[0])
		buf_puts(&b, t->target->rank);
	else
		buf_puts(&b, "null");
	buf_printf(&b, ", \"pid_namespace\": %llu, \"pids\": \"host\"",
		   (unsigned long long)t->target->pid_ns_inode);
	buf_printf(&b, ", \"target_pid_namespace\": %llu, \"target_pid\": %d",
		   (unsigned long long)t->target->target_pid_ns_inode, t->target->ns_pid);
	/* what watches the hardware breakpoints: documents in flight, bound calls' returns */
	int hw = hw_watch_works();
	buf_printf(&b, ", \"watch\": {\"debug_registers\": \"%s\", \"note_samples\": \"%s\", "
		   "\"bound_calls\": \"%s\"}",
		   hw ? "fire" : hw_watch_check()->opened ? "do not fire" : "refused",
		   hw ? "hardware breakpoint" : "not observable",
		   hw ? "hardware breakpoints" : "not followed");
	/* --cupti: the libcupti the agent took, when it runs by now (else gpu_summary's) */
	char lib[CUPTI_LIB_MAX], how[CUPTI_HOW_MAX];
	uint64_t version;
	if (gpu_calls_cupti(t->gpu, lib, how, &version)) {
		int f = 1;
		buf_puts(&b, ", \"cupti\": {");
		jw_key(&b, &f, "lib"), jw_cstr(&b, lib[0] ? lib : NULL);
		jw_key(&b, &f, "how"), jw_cstr(&b, how);
		jw_key(&b, &f, "version"), version ? jw_int(&b, (int64_t)version) : jw_null(&b);
		jw_key(&b, &f, "cuda"), version ? jw_int(&b, (int64_t)gpu_cuda_major(version)) : jw_null(&b);
		buf_putc(&b, '}');
	}
	buf_puts(&b, "}}");
	write_line(t, &b);
	buf_free(&b);
	t->events++;
}

void trace_set_dropped(struct trace *t, uint64_t dropped)
{
	static int warned; /* called as drops are seen: where they happened, and at the end */
	if (!dropped)
		return;
	if (!warned++)
		warnx_("warning: records were dropped (the ring buffer was full); the trace says "
		       "how many and where in `dropped` events");
	struct buf b = {0};
	buf_printf(&b, "{\"event\": \"dropped\", \"count\": %llu, \"where\": \"ring buffer\"",
		   (unsigned long long)dropped);
	trace_emit(t, &b, 0, 0);
}

int trace_open(struct trace *t, struct target *target, const char *path, int force,
	       const struct trace_opts *opts)
{
	memset(t, 0, sizeof(*t));
	t->type_map_fd = -1;
	t->target = target;
	t->opts = *opts;
	t->out_path = path;
	if (opts->modules) {
		char why[512];
		if (!(t->pattern = pyre_compile(opts->modules, why, sizeof(why)))) {
			warnx_("--modules %s", why);
			return -1;
		}
		debugx("--modules runs as the PCRE2 pattern %s", pyre_pcre2(t->pattern));
	}
	if (opts->tail > 0)
		t->ring = xcalloc((size_t)opts->tail, sizeof(*t->ring));
	/* one per trace: several processes are traced at once, each with its own memory */
	t->dctx = xcalloc(1, sizeof(*t->dctx));
	t->dctx->type_name = trace_type_name;
	t->dctx->arg = t;
	t->dctx->reader = &target->reader;

	struct timespec rt, mono;
	clock_gettime(CLOCK_REALTIME, &rt);
	clock_gettime(CLOCK_MONOTONIC, &mono);
	t->boot_to_realtime_ns = (rt.tv_sec - mono.tv_sec) * 1000000000ULL + rt.tv_nsec - mono.tv_nsec;

	if (!strcmp(path, "-")) {
		t->out = stdout;
		return 0;
	}
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
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		warnx_("%s is not a regular file", path);
		close(fd);
		return -1;
	}
	/* under sudo, the trace belongs to the user who asked for it */
	const char *uid = getenv("SUDO_UID"), *gid = getenv("SUDO_GID");
	if (uid && gid && fchown(fd, (uid_t)atoi(uid), (gid_t)atoi(gid)))
		debugx("cannot give %s to uid %s: %s", path, uid, strerror(errno));
	t->out = fdopen(fd, "w");
	if (!t->out) {
		close(fd);
		return -1;
	}
	/* a streaming trace is written in big pieces: fewer write(2)s for the collector
	 * (the loop flushes every pass anyway) */
	setvbuf(t->out, NULL, _IOFBF, 1 << 20);
	return 0;
}

int trace_close(struct trace *t)
{
	int rc = 0;
	int64_t next_i = t->seq + 1; /* of a line written here */
	if (t->opts.tail > 0) {
		size_t cap = (size_t)t->opts.tail;
		for (size_t k = 0; k < t->ring_count && !t->write_failed; k++) {
			char *line = t->ring[(t->ring_head + k) % cap];
			size_t n = strlen(line);
			if (fwrite(line, 1, n, t->out) != n)
				t->write_failed = errno ? errno : EIO;
		}
		int64_t dropped = t->seq - (int64_t)t->ring_count;
		if (dropped > 0 && !t->write_failed)
			fprintf(t->out, "{\"event\": \"dropped\", \"count\": %lld, \"i\": %lld}\n",
				(long long)dropped, (long long)next_i++);
	}
	if (t->out && !t->write_failed && t->events && !hw_watch_works()) {
		/* the header says it too, but a --tail trace may have lost its header */
		char why[256];
		struct buf b = {0};
		buf_puts(&b, "{\"event\": \"unobservable\", \"what\": [\"note_samples\", "
			 "\"bound_calls\"], \"why\": ");
		buf_printf(&b, "\"hardware breakpoints do not fire on this machine\", \"detail\": ");
		jw_cstr(&b, hw_watch_why(why, sizeof(why)));
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		buf_printf(&b, ", \"i\": %lld, \"ts_ns\": %lld}\n", (long long)next_i,
			   (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
		if (fwrite(b.data, 1, b.len, t->out) != b.len)
			t->write_failed = errno ? errno : EIO;
		t->events++;
		buf_free(&b);
	}
	if (t->ring) {
		size_t cap = (size_t)t->opts.tail;
		for (size_t k = 0; k < cap; k++)
			free(t->ring[k]);
		free(t->ring);
		t->ring = NULL;
	}
	if (t->out && fflush(t->out))
		t->write_failed = errno ? errno : EIO;
	if (t->write_failed) {
		if (!t->write_reported)
			warnx_("cannot write %s: %s", t->out_path, strerror(t->write_failed));
		rc = -1;
	}
	if (t->out && t->out != stdout)
		fclose(t->out);
	t->out = NULL;
	for (size_t i = 0; i < t->nthreads; i++) {
		stack_truncate(&t->threads[i], 0);
		free(t->threads[i].frames);
	}
	free(t->threads);
	free(t->last_exc);
	numeric_bytes_free(t->dctx);
	free(t->dctx);
	t->dctx = NULL;
	modtree_free(&t->mods);
	pyre_free(t->pattern);
	return rc;
}
