/* The trace's lines: an event closed (its "i", thread and time) and handed to the
 * trace's sinks (sink.h), the header, the `dropped` events, and the closing mark of
 * what this machine could not observe. */
#include "trace_writer.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cudamem.h"
#include "describe.h"
#include "gpu_calls.h"
#include "hwwatch.h"
#include "jsonw.h"
#include "sink.h"
#include "target.h"
#include "version.h"

static void write_line(struct trace *t, struct buf *line)
{
	buf_putc(line, '\n');
	sink_put(t->sink, line);
}

void trace_event_end(struct buf *ev, int64_t i, uint32_t tid, uint64_t wall_ns)
{
	/* per event: no printf (the collector's hottest path) */
	buf_puts(ev, ", \"i\": ");
	jw_int(ev, i);
	if (tid) {
		buf_puts(ev, ", \"tid\": ");
		jw_int(ev, tid);
		buf_puts(ev, ", \"ts_ns\": ");
		jw_int(ev, (int64_t)wall_ns);
	}
	buf_puts(ev, "}\n");
}

/* Close an event: the reference's "i", then the extension keys. */
void trace_emit(struct trace *t, struct buf *ev, uint32_t tid, uint64_t ts)
{
	trace_event_end(ev, ++t->seq, tid, (ts ? ts : t->now_ns) + t->boot_to_realtime_ns);
	sink_put(t->sink, ev);
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
	for (int i = 0; i < t->target->ntorch_metas; i++)
		describe_known_meta(t->dctx, t->target->torch_metas[i].rec,
				    t->target->torch_metas[i].dtype);
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
	/* evmbpf record: when it attached (a process running then: its forward and call
	 * counters start at the attach, as --pid's do; "exec": a moment after its exec) */
	if (t->opts.recorded)
		buf_printf(&b, ", \"recorder\": {\"attached\": \"%s\"}", t->opts.recorded);
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
		warnx_("warning: records were dropped (the ring buffer was full, or, on a kernel "
		       "that preempts its own code, another thread's probes ran on their CPU while "
		       "they were built); the trace says how many and where in `dropped` events");
	struct buf b = {0};
	buf_printf(&b, "{\"event\": \"dropped\", \"count\": %llu, \"where\": \"ring buffer\"",
		   (unsigned long long)dropped);
	trace_emit(t, &b, 0, 0);
}

/* A closing mark (b holds it up to its last key): its "i", the wall clock now, written. */
static void put_mark(struct trace *t, struct buf *b, int64_t i)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	buf_printf(b, ", \"i\": %lld, \"ts_ns\": %lld}\n", (long long)i,
		   (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
	sink_put(t->sink, b);
	t->events++;
	buf_free(b);
}

void trace_write_unobservable(struct trace *t, int64_t i)
{
	/* the header says it too, but a --tail trace may have lost its header */
	char why[256];
	struct buf b = {0};
	buf_puts(&b, "{\"event\": \"unobservable\", \"what\": [\"note_samples\", "
		 "\"bound_calls\"], \"why\": ");
	buf_printf(&b, "\"hardware breakpoints do not fire on this machine\", \"detail\": ");
	jw_cstr(&b, hw_watch_why(why, sizeof(why)));
	put_mark(t, &b, i);
}

void trace_write_model_cut(struct trace *t, int64_t i)
{
	struct buf b = {0};
	buf_puts(&b, "{\"event\": \"unobservable\", \"what\": [\"modules\"], \"why\": "
		 "\"the model's module tree was read up to evmbpf's bound: the calls of the "
		 "modules past it are not traced\", \"detail\": ");
	jw_cstr(&b, t->mods.cut);
	buf_printf(&b, ", \"named\": %zu", t->mods.count);
	put_mark(t, &b, i);
}

void trace_write_recorded(struct trace *t, int64_t i, const char *why, const char *threads)
{
	struct buf b = {0};
	buf_puts(&b, "{\"event\": \"recorded\", \"why\": ");
	jw_cstr(&b, why);
	if (t->recorded_who)
		buf_puts(&b, ", \"process\": "), buf_puts(&b, t->recorded_who);
	if (threads)
		buf_puts(&b, ", \"threads\": "), buf_puts(&b, threads);
	buf_printf(&b, ", \"pid\": %d", t->target->pid);
	put_mark(t, &b, i);
}
