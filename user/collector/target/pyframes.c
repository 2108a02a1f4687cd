/* A running CPython's threads and their Python frames, read from its memory
 * (process_vm_readv), and the line tables that place a frame in its source. */
#include "pyframes.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "evmbpf.h"
#include "procmem.h"
#include "util.h"

/* Where the thread's kernel id is, per CPython version (offsetof(PyThreadState,
 * native_thread_id), measured from each version's headers; 3.9/3.10 have none: the
 * pthread_t thread_id is glibc's struct pthread, whose tid is at 0x2d0 on x86_64). Each
 * value read is checked against /proc/PID/task. */
static int tstate_native_tid_off(int minor)
{
	switch (minor) {
	case 11: case 13: case 14: return 160;
	case 12: return 144;
	default: return 0;
	}
}
#define TSTATE_THREAD_ID_310 176 /* 3.9/3.10 PyThreadState.thread_id */
#define PTHREAD_TID_GLIBC 0x2d0
/* 3.9/3.10 PyCodeObject.co_lnotab / co_linetable (a bytes object) */
#define CO_LNOTAB_310 120
/* 3.11+ offsetof(PyCodeObject, co_code_adaptive): the code units start there */
static int co_code_off(int minor)
{
	switch (minor) {
	case 11: return 184;
	case 12: return 192;
	case 13: return 200;
	case 14: return 208;
	default: return 0;
	}
}
#define FRAME_OWNED_BY_CSTACK 3 /* 3.12+: an entry frame of the C stack, no code */

/* ---------------------------------------------------------------- line tables */

static unsigned lt_varint(const uint8_t *lt, size_t n, size_t *i)
{
	unsigned v = 0, shift = 0;
	while (*i < n) {
		uint8_t b = lt[(*i)++];
		v |= (unsigned)(b & 63) << shift;
		shift += 6;
		if (!(b & 64) || shift > 24)
			break;
	}
	return v;
}

static int lt_svarint(const uint8_t *lt, size_t n, size_t *i)
{
	unsigned v = lt_varint(lt, n, i);
	return v & 1 ? -(int)(v >> 1) : (int)(v >> 1);
}

int py_line_at(const uint8_t *lt, size_t n, int firstlineno, int lasti)
{
	struct code_loc loc;
	return py_loc_at(lt, n, firstlineno, lasti, &loc) ? -1 : loc.line;
}

int py_loc_at(const uint8_t *lt, size_t n, int firstlineno, int lasti, struct code_loc *loc)
{
	size_t i = 0;
	int line = firstlineno, addr = 0, target = lasti / 2;
	while (i < n) {
		uint8_t b = lt[i++];
		if (!(b & 0x80))
			return -1;
		int code = (b >> 3) & 15, len = (b & 7) + 1, none = 0;
		int end_line = -1, col = -1, end_col = -1;
		if (code == 15) {
			none = 1;
		} else if (code == 14) {
			line += lt_svarint(lt, n, &i);
			end_line = line + (int)lt_varint(lt, n, &i);
			col = (int)lt_varint(lt, n, &i) - 1;
			end_col = (int)lt_varint(lt, n, &i) - 1;
		} else if (code == 13) {
			line += lt_svarint(lt, n, &i);
		} else if (code >= 10) {
			line += code - 10;
			end_line = line;
			col = i < n ? lt[i] : -1;
			end_col = i + 1 < n ? lt[i + 1] : -1;
			i += 2;
		} else {
			uint8_t second = i < n ? lt[i] : 0;
			end_line = line;
			col = code * 8 + ((second >> 4) & 7);
			end_col = col + (second & 15);
			i += 1;
		}
		if (target < addr + len) {
			if (none)
				return -1;
			*loc = (struct code_loc){ line, end_line, col, end_col };
			return 0;
		}
		addr += len;
	}
	return -1;
}

/* 3.10's co_linetable ((start delta, line delta) pairs; -128: no line) and 3.9's
 * co_lnotab ((address increment, signed line increment) pairs): the line of the
 * instruction at lasti (in code units). */
static int line_before_311(int version, const uint8_t *lt, int64_t n, int first, int lasti)
{
	int line = -1;
	if (version == 310) {
		int addr = 0, cur = first, bytes = lasti * 2;
		for (int64_t i = 0; i + 1 < n; i += 2) {
			int end = addr + lt[i];
			int8_t d = (int8_t)lt[i + 1];
			int here = -1;
			if (d != -128) {
				cur += d;
				here = cur;
			}
			if (bytes < end) {
				line = here;
				break;
			}
			addr = end;
		}
	} else {
		int addr = 0;
		line = first;
		for (int64_t i = 0; i + 1 < n; i += 2) {
			addr += lt[i];
			if (addr > lasti)
				break;
			line += (int8_t)lt[i + 1];
		}
	}
	return line;
}

/* ---------------------------------------------------------------- threads */

void py_tasks_read(struct py_tasks *k, pid_t pid)
{
	char dir[64];
	snprintf(dir, sizeof(dir), "/proc/%d/task", pid);
	DIR *d = opendir(dir);
	struct dirent *e;
	while (d && (e = readdir(d)) && k->n < PY_THREADS_MAX) {
		if (e->d_name[0] == '.')
			continue;
		int tid = atoi(e->d_name), ns = tid;
		char path[384], l[256];
		snprintf(path, sizeof(path), "%s/%s/status", dir, e->d_name);
		FILE *f = fopen(path, "re");
		while (f && fgets(l, sizeof(l), f)) {
			if (strncmp(l, "NSpid:", 6))
				continue;
			char *p = l + 6, *end;
			for (long v; (v = strtol(p, &end, 10)), end != p; p = end)
				ns = (int)v;
			break;
		}
		if (f)
			fclose(f);
		k->host[k->n] = tid;
		k->ns[k->n++] = ns;
	}
	if (d)
		closedir(d);
}

/* The host's id of the thread the target calls tid; 0 when it is none of them. */
static int host_tid(const struct py_tasks *k, uint64_t tid)
{
	for (int i = 0; i < k->n; i++)
		if ((uint64_t)k->ns[i] == tid)
			return k->host[i];
	return 0;
}

int py_thread_tid(const struct target *t, const struct py_tasks *k, uint64_t ts)
{
	const struct pyreader *r = &t->reader;
	int off = tstate_native_tid_off(t->off->version % 100);
	uint64_t v;
	if (off) {
		v = pm_u64(r, ts + (uint64_t)off, NULL);
		if (host_tid(k, v))
			return host_tid(k, v);
	}
	/* pthread_t is glibc's struct pthread; its tid at 0x2d0 */
	int id_off = t->off->version <= 310 ? TSTATE_THREAD_ID_310 : off - 8;
	uint64_t pthread = pm_u64(r, ts + (uint64_t)id_off, NULL);
	uint32_t tid = 0;
	if (pthread && !pm_read(r, pthread + PTHREAD_TID_GLIBC, &tid, 4))
		return host_tid(k, tid);
	return 0;
}

int py_threads_first(const struct target *t, uint64_t *ts)
{
	const struct pyreader *r = &t->reader;
	uint64_t interp = pm_u64(r, t->runtime + t->off->runtime_interp_head, NULL);
	*ts = interp ? pm_u64(r, interp + t->off->interp_threads_head, NULL) : 0;
	return interp ? 0 : -1;
}

uint64_t py_thread_next(const struct target *t, uint64_t ts)
{
	return pm_u64(&t->reader, ts + t->off->tstate_next, NULL);
}

/* ---------------------------------------------------------------- frames */

uint64_t py_thread_frame(const struct target *t, uint64_t ts)
{
	const struct py_offsets *o = t->off;
	uint64_t f = pm_u64(&t->reader, ts + o->tstate_frame, NULL);
	if (o->tstate_cframe && f)
		f = pm_u64(&t->reader, f + o->cframe_frame, NULL);
	return f;
}

uint64_t py_frame_back(const struct target *t, uint64_t f)
{
	return pm_u64(&t->reader, f + t->off->frame_back, NULL);
}

uint64_t py_frame_code(const struct target *t, uint64_t f)
{
	const struct pyreader *r = &t->reader;
	const struct py_offsets *o = t->off;
	uint64_t code;
	if (o->version >= 311) {
		uint8_t owner = 0;
		pm_read(r, f + o->iframe_owner, &owner, 1);
		if (o->version >= 312 && owner == FRAME_OWNED_BY_CSTACK)
			return 0;
		code = pm_u64(r, f + o->iframe_code, NULL) & ~7ULL;
	} else {
		code = pm_u64(r, f + o->frameobj_code, NULL);
	}
	char tn[8];
	if (!code || py_type_name(r, py_type(r, code), tn, sizeof(tn)) || strcmp(tn, "code"))
		return 0;
	return code;
}

uint64_t py_frame_first_local(const struct target *t, uint64_t f)
{
	return pm_u64(&t->reader, f + t->off->iframe_localsplus, NULL) & ~3ULL;
}

int py_frame_line(const struct target *t, uint64_t f, uint64_t code)
{
	struct code_loc loc;
	return py_frame_loc(t, f, code, &loc);
}

int py_frame_loc(const struct target *t, uint64_t f, uint64_t code, struct code_loc *loc)
{
	const struct pyreader *r = &t->reader;
	const struct py_offsets *o = t->off;
	int32_t first = 0;
	pm_read(r, code + o->co_firstlineno, &first, 4);
	uint64_t table = pm_u64(r, code + (o->version >= 311 ? CO_LINETABLE_311 : CO_LNOTAB_310), NULL);
	int64_t n = table ? (int64_t)pm_u64(r, table + 16, NULL) : 0;
	*loc = (struct code_loc){ -1, -1, -1, -1 };
	if (n <= 0 || n > (1 << 20))
		return -1;
	uint8_t *lt = xmalloc((size_t)n);
	int line = -1;
	if (pm_read(r, table + BYTES_SVAL, lt, (size_t)n))
		goto out;
	if (o->version >= 311) {
		uint64_t ip = pm_u64(r, f + o->frame_instr, NULL);
		uint64_t start = code + (uint64_t)co_code_off(o->version % 100);
		if (ip < start || ip - start > (1u << 26))
			goto out;
		if (!py_loc_at(lt, (size_t)n, first, (int)(ip - start), loc))
			line = loc->line;
		goto out;
	}
	int32_t lasti = -1;
	pm_read(r, f + o->frame_instr, &lasti, 4);
	line = lasti < 0 ? first : line_before_311(o->version, lt, n, first, lasti);
out:
	free(lt);
	loc->line = line;
	return line;
}

void py_code_names(const struct target *t, uint64_t code, int qualname, char *file,
		   size_t file_cap, char *func, size_t func_cap)
{
	const struct pyreader *r = &t->reader;
	const struct py_offsets *o = t->off;
	if (py_str(r, pm_u64(r, code + o->co_filename, NULL), file, file_cap) < 0)
		snprintf(file, file_cap, "?");
	uint64_t name_off = qualname && o->co_qualname ? o->co_qualname : o->co_name;
	if (py_str(r, pm_u64(r, code + name_off, NULL), func, func_cap) < 0)
		snprintf(func, func_cap, "?");
}

int py_thread_frames(const struct target *t, int tid, struct py_frame *out, int max)
{
	static struct py_tasks tasks;
	memset(&tasks, 0, sizeof(tasks));
	if (!t->runtime || max <= 0)
		return -1;
	py_tasks_read(&tasks, t->pid);
	uint64_t ts;
	py_threads_first(t, &ts);
	int guard = 0;
	while (ts && py_thread_tid(t, &tasks, ts) != tid && ++guard < PY_THREADS_MAX)
		ts = py_thread_next(t, ts);
	if (!ts || guard >= PY_THREADS_MAX)
		return -1;
	int n = 0;
	uint64_t f = py_thread_frame(t, ts);
	for (int depth = 0; f && depth < 4 * PY_FRAMES_MAX && n < max;
	     depth++, f = py_frame_back(t, f)) {
		uint64_t code = py_frame_code(t, f);
		if (!code)
			continue;
		struct py_frame *x = &out[n++];
		py_code_names(t, code, 0, x->file, sizeof(x->file), x->func, sizeof(x->func));
		py_frame_loc(t, f, code, &x->loc);
	}
	/* innermost first as read: outermost first, as a traceback lists them */
	for (int i = 0; i < n / 2; i++) {
		struct py_frame tmp = out[i];
		out[i] = out[n - 1 - i];
		out[n - 1 - i] = tmp;
	}
	return n;
}
