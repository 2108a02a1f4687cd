#include "target.h"

#include <ctype.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "asuser.h"
#include "callsites.h"
#include "elfsym.h"
#include "procmaps.h"
#include "procstate.h"
#include "evmbpf.h"
#include "util.h"

/* target_inspect's reason for failing, said once it knows the target is still there */
#define why(t, ...) snprintf((t)->why, sizeof((t)->why), __VA_ARGS__)

/* the mappings of a process that name a file by its absolute path (procmaps.h) */
typedef int (*mapping_fn)(void *arg, const struct proc_mapping *m);

struct file_mappings {
	mapping_fn fn;
	void *arg;
};

static int file_mapping(void *arg, const struct proc_mapping *m)
{
	const struct file_mappings *f = arg;
	return m->path[0] == '/' ? f->fn(f->arg, m) : 0;
}

static int each_mapping(pid_t pid, mapping_fn fn, void *arg)
{
	struct file_mappings f = { fn, arg };
	return proc_each_mapping(pid, file_mapping, &f);
}

struct code_at {
	const char *path;
	uint64_t addr, off;
	int found;
};

static int code_at(void *arg, const struct proc_mapping *m)
{
	struct code_at *c = arg;
	if (strcmp(m->path, c->path) || m->perms[2] != 'x' || c->addr < m->start ||
	    c->addr >= m->end)
		return 0;
	c->off = c->addr - m->start + m->offset;
	c->found = 1;
	return 1;
}

int target_file_offset(const struct target *t, uint64_t addr, uint64_t *off)
{
	struct code_at c = { .path = t->py_path, .addr = addr };
	if (each_mapping(t->pid, code_at, &c) < 0 || !c.found)
		return -1;
	*off = c.off;
	return 0;
}

static int same_inode(const char *path, uint64_t inode)
{
	struct stat st;
	return !stat(path, &st) && (!inode || st.st_ino == inode);
}

/* A path evmbpf can open for a mapped file. /proc/PID/maps names files as seen from
 * evmbpf's root where they are reachable from it (a chroot's files under the host's
 * path to the chroot), else as the target's mount namespace names them (a container):
 * try the target's root first, then the name as is, then /proc/PID/map_files. The
 * inode from the maps line decides. */
static void open_path(const struct target *t, const struct proc_mapping *m, char *dst, size_t cap)
{
	if ((size_t)snprintf(dst, cap, "%s%s", t->root, m->path) < cap &&
	    same_inode(dst, m->inode))
		return;
	if (same_inode(m->path, m->inode)) {
		snprintf(dst, cap, "%s", m->path);
		return;
	}
	if ((size_t)snprintf(dst, cap, "/proc/%d/map_files/%lx-%lx", t->pid,
			     (unsigned long)m->start, (unsigned long)m->end) < cap &&
	    same_inode(dst, m->inode))
		return;
	if ((size_t)snprintf(dst, cap, "%s%s", t->root, m->path) >= cap)
		dst[0] = 0;
}

struct py_search {
	struct target *t;
	char seen[16][PATH_MAX];
	int nseen;
	int found;
};

static int find_runtime(void *arg, const struct proc_mapping *m)
{
	struct py_search *s = arg;
	for (int i = 0; i < s->nseen; i++)
		if (!strcmp(s->seen[i], m->path))
			return 0;
	if (s->nseen < 16)
		snprintf(s->seen[s->nseen++], PATH_MAX, "%s", m->path);
	const char *base = strrchr(m->path, '/');
	base = base ? base + 1 : m->path;
	/* the interpreter lives in python3.X or libpython3.X.so */
	if (strncmp(base, "python", 6) && strncmp(base, "libpython", 9))
		return 0;
	char host[PATH_MAX];
	open_path(s->t, m, host, sizeof(host));
	struct elf_file *f = elf_file_open(host);
	uint64_t v;
	int has = f && !elf_file_symbol(f, "_PyRuntime", &v, NULL);
	elf_file_close(f);
	if (!has)
		return 0;
	snprintf(s->t->py_path, sizeof(s->t->py_path), "%s", m->path);
	snprintf(s->t->py_open, sizeof(s->t->py_open), "%s", host);
	s->found = 1;
	return 1;
}

struct bias_search {
	const char *path;
	uint64_t start;
	int found;
};

static int find_first_map(void *arg, const struct proc_mapping *m)
{
	struct bias_search *b = arg;
	if (strcmp(m->path, b->path) || m->offset != 0)
		return 0;
	b->start = m->start;
	b->found = 1;
	return 1;
}

static int version_from_name(const char *path, int *major, int *minor)
{
	const char *p = strstr(path, "python3.");
	if (!p)
		return -1;
	*major = 3;
	*minor = atoi(p + 8);
	return *minor > 0 ? 0 : -1;
}

static int read_version(struct target *t, struct elf_file *f)
{
	uint64_t v;
	uint32_t hex;
	if (!elf_file_symbol(f, "Py_Version", &v, NULL) && !elf_file_read(f, v, &hex, 4)) {
		t->major = hex >> 24;
		t->minor = (hex >> 16) & 0xff;
		t->micro = (hex >> 8) & 0xff;
		return 0;
	}
	/* 3.9 and 3.10 have no Py_Version: the version is in the file's name */
	return version_from_name(t->py_path, &t->major, &t->minor);
}

/* slot_tp_call is static. Without symbols, find it through the slotdefs table, whose
 * "__call__" entry is {name, offsetof(PyTypeObject, tp_call), slot_tp_call, ...}: read
 * from the live process, where the pointers are relocated. */
struct slot_scan {
	struct target *t;
	uint64_t names[8];
	int nnames;
	uint64_t found;
};

static int scan_slotdefs(void *arg, const struct proc_mapping *m)
{
	struct slot_scan *s = arg;
	if (strcmp(m->path, s->t->py_path) || m->perms[0] != 'r' || m->perms[2] == 'x')
		return 0;
	size_t len = m->end - m->start;
	if (len > (64u << 20))
		return 0;
	uint8_t *data = malloc(len);
	if (!data)
		return 0;
	if (!pm_read(&s->t->reader, m->start, data, len)) {
		for (size_t i = 0; i + 24 <= len; i += 8) {
			uint64_t name, fn;
			int32_t off;
			memcpy(&name, data + i, 8);
			for (int k = 0; k < s->nnames; k++) {
				if (name != s->names[k])
					continue;
				memcpy(&off, data + i + 8, 4);
				memcpy(&fn, data + i + 16, 8);
				if (off == s->t->off->tp_call) {
					s->found = fn;
					free(data);
					return 1;
				}
			}
		}
	}
	free(data);
	return 0;
}

/* What the slotdefs scan found (link-time address), kept for the next process of the same
 * executable file (device, inode, size, mtime) and the same effective uid: the scan reads
 * the target's memory, which its owner can change, so one user's process never decides
 * another's probe. evmbpf record attaches to every Python of the node: the scan was the
 * biggest part of its CPU an attach. */
#define SLOT_CACHE 64
static struct slot_cached {
	dev_t dev;
	ino_t ino;
	off_t size;
	time_t mtime;
	uid_t uid;
	uint64_t vaddr;
} slot_cache[SLOT_CACHE];
static int nslot_cache, slot_cache_next;

static struct slot_cached slot_key(struct target *t)
{
	struct slot_cached k = { .uid = (uid_t)-1 };
	struct stat st;
	struct target_creds c;
	if (stat(t->py_open, &st) || target_creds(t->pid, &c))
		return k;
	k.dev = st.st_dev, k.ino = st.st_ino, k.size = st.st_size, k.mtime = st.st_mtime;
	k.uid = c.uid;
	return k;
}

static int slot_same(const struct slot_cached *a, const struct slot_cached *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime == b->mtime && a->uid == b->uid;
}

static int find_slot_tp_call(struct target *t, struct elf_file *f)
{
	uint64_t v;
	if (!elf_file_symbol(f, "slot_tp_call", &v, NULL)) {
		t->slot_tp_call = v + t->py_bias;
		t->slot_tp_call_found_by = 0;
		return 0;
	}
	struct slot_cached key = slot_key(t);
	for (int i = 0; key.uid != (uid_t)-1 && i < nslot_cache; i++)
		if (slot_same(&slot_cache[i], &key)) {
			t->slot_tp_call = slot_cache[i].vaddr + t->py_bias;
			t->slot_tp_call_found_by = 1;
			return 0;
		}
	struct slot_scan s = { .t = t };
	s.nnames = elf_file_find(f, "__call__", 9, s.names, 8);
	for (int i = 0; i < s.nnames; i++)
		s.names[i] += t->py_bias;
	if (!s.nnames || each_mapping(t->pid, scan_slotdefs, &s) <= 0 || !s.found)
		return -1;
	if (!elf_file_is_code(f, s.found - t->py_bias))
		return -1;
	t->slot_tp_call = s.found;
	t->slot_tp_call_found_by = 1;
	if (key.uid != (uid_t)-1) {
		key.vaddr = s.found - t->py_bias;
		slot_cache[slot_cache_next] = key;
		slot_cache_next = (slot_cache_next + 1) % SLOT_CACHE;
		if (nslot_cache < SLOT_CACHE)
			nslot_cache++;
	}
	return 0;
}

/* Uprobes on an endbr64 are single-stepped (about 23 us a hit): probe one past it. */
static int probe_offset(struct elf_file *f, uint64_t vaddr, uint64_t *offset)
{
	static const uint8_t endbr64[4] = { 0xf3, 0x0f, 0x1e, 0xfa };
	uint8_t insn[4];
	if (elf_file_vaddr_to_offset(f, vaddr, offset))
		return -1;
	if (!elf_file_read(f, vaddr, insn, 4) && !memcmp(insn, endbr64, 4))
		*offset += 4;
	return 0;
}

static int runtime_symbol(struct target *t, struct elf_file *f, const char *name, uint64_t *out)
{
	uint64_t v;
	if (elf_file_symbol(f, name, &v, NULL))
		return -1;
	*out = v + t->py_bias;
	return 0;
}

/* 3.13+: _PyRuntime starts with _Py_DebugOffsets: the cookie "xdebugpy", the version
 * (PY_VERSION_HEX) and, from 3.14, free_threaded. The live runtime must agree with the
 * version read from the file, and be a GIL build. */
static int check_debug_offsets(struct target *t, struct elf_file *f)
{
	uint64_t rt, head[3] = {0};
	if (t->major != 3 || t->minor < 13)
		return 0;
	if (runtime_symbol(t, f, "_PyRuntime", &rt) || pm_read(&t->reader, rt, head, sizeof(head))) {
		why(t, "cannot read _PyRuntime of process %d", t->pid);
		return -1;
	}
	if (memcmp(&head[0], "xdebugpy", 8)) {
		why(t, "%s says Python %d.%d but its _PyRuntime has no _Py_DebugOffsets (cookie "
		       "\"xdebugpy\"); evmbpf does not read it", t->py_path, t->major, t->minor);
		return -1;
	}
	int major = (int)(head[1] >> 24) & 0xff, minor = (int)(head[1] >> 16) & 0xff;
	if (major != t->major || minor != t->minor) {
		why(t, "%s says Python %d.%d but its runtime's _Py_DebugOffsets says %d.%d; evmbpf "
		       "does not read it", t->py_path, t->major, t->minor, major, minor);
		return -1;
	}
	if (head[2]) {
		why(t, "%s is a free-threaded (no-GIL) build of Python %d.%d; evmbpf reads builds "
		       "with the GIL only", t->py_path, major, minor);
		return -1;
	}
	/* Prefer the runtime's own offsets where they cover a field of the table. */
	static const struct { const char *name; size_t field; int w313, w314; } map[] = {
#define F(x) #x, offsetof(struct py_offsets, x)
		{ F(runtime_interp_head), 5, 5 },
		{ F(interp_modules), 11, 12 },
		{ F(interp_sysdict), 12, 13 },
		{ F(frame_back), 29, 32 },
		{ F(iframe_code), 30, 33 },
		{ F(frame_instr), 31, 34 },
		{ F(iframe_localsplus), 32, 35 },
		{ F(iframe_owner), 33, 36 },
		{ F(co_filename), 35, 40 },
		{ F(co_name), 36, 41 },
		{ F(co_qualname), 37, 42 },
		{ F(co_firstlineno), 39, 44 },
		{ F(tp_name), 47, 53 },
		{ F(tp_flags), 49, 55 },
		{ F(tuple_items), 51, 57 },
		{ F(list_items), 54, 60 },
		{ F(dict_keys), 57, 67 },
		{ F(dict_values), 58, 68 },
		{ F(float_value), 60, 70 },
		{ F(long_tag), 62, 72 },
		{ F(long_digits), 63, 73 },
		{ F(str_state), 68, 78 },
		{ F(str_length), 69, 79 },
		{ F(str_ascii_data), 70, 80 },
#undef F
	};
	if (minor != 13 && minor != 14)
		return 0; /* a layout of _Py_DebugOffsets not known here: the table alone */
	uint64_t words[81];
	if (pm_read(&t->reader, rt, words, sizeof(words))) {
		debugx("cannot read _Py_DebugOffsets; using the table");
		return 0;
	}
	t->off_own = *t->off;
	for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++) {
		uint64_t v = words[minor == 13 ? map[i].w313 : map[i].w314];
		off16 *field = (off16 *)((char *)&t->off_own + map[i].field);
		if (v > 0xffff)
			continue;
		t->debug_offsets_read++;
		if (*field != v) {
			debugx("_Py_DebugOffsets: %s is %llu, the table says %u; using %llu", map[i].name,
			       (unsigned long long)v, *field, (unsigned long long)v);
			t->debug_offsets_differ++;
			*field = (off16)v;
		}
	}
	if (words[minor == 13 ? 38 : 43] != CO_LINETABLE_311)
		debugx("_Py_DebugOffsets: co_linetable is at %llu, evmbpf reads it at %d",
		       (unsigned long long)words[minor == 13 ? 38 : 43], CO_LINETABLE_311);
	t->off = &t->off_own;
	t->reader.off = t->off;
	debugx("_Py_DebugOffsets %d.%d: %d fields read, %d differ from the table", major, minor,
	       t->debug_offsets_read, t->debug_offsets_differ);
	return 0;
}

int target_is_python(pid_t pid)
{
	struct target t = { .pid = pid };
	snprintf(t.root, sizeof(t.root), "/proc/%d/root", pid);
	struct py_search s = { .t = &t };
	each_mapping(pid, find_runtime, &s);
	return s.found;
}

/* Does the constant a call site puts in rsi (a link-time address) name `__enter__`: the
 * str (3.11-3.13) or the _Py_Identifier (3.9/3.10) it is, read in the target. */
static int names_enter(struct target *t, uint64_t rsi)
{
	char name[16] = "";
	if (!rsi)
		return 0;
	if (t->lookup_special_kind == LOOKUP_STR)
		return py_str(&t->reader, rsi + t->py_bias, name, sizeof(name)) >= 0 &&
		       !strcmp(name, "__enter__");
	int err = 0;
	uint64_t chars = pm_u64(&t->reader, rsi + t->py_bias + t->off->ident_string, &err);
	return !err && !pm_read(&t->reader, chars, name, 10) && !strcmp(name, "__enter__");
}

/* The `with` statement's calls to _PyObject_LookupSpecial in the eval loop (BEFORE_WITH,
 * 3.9/3.10's SETUP_WITH; and the async ones), where the marker probe goes rather than on
 * the function, which every isinstance() against a class with a metaclass calls too
 * (3.11-3.13). Taken when they are all known: the file names every part of the eval
 * function (.symtab), or one of them is seen to look __enter__ up (a stripped build).
 * Else (the lookup inlined, a build this decoder refuses) the probe stays on the function:
 * t->nmarker_sites 0. 3.14's _PyObject_LookupSpecialMethod serves LOAD_SPECIAL alone. */
/* The eval loop's call sites, decoded once per build and user (slot_key: a site is
 * taken on a read of the target's memory, so one user's process never decides another's
 * probes): the recorder inspects every Python that starts, and decoding the eval loop
 * was the biggest part of that after the slotdefs scan. */
static struct marker_cached {
	struct slot_cached key;
	int n;
	const char *how;
	uint64_t sites[MARKER_SITES_MAX];
} marker_cache[SLOT_CACHE];
static int nmarker_cache, marker_cache_next;

static void find_marker_sites(struct target *t, struct elf_file *f, const char *lookup)
{
	struct slot_cached key = slot_key(t);
	for (int i = 0; key.uid != (uid_t)-1 && i < nmarker_cache; i++) {
		const struct marker_cached *c = &marker_cache[i];
		if (!slot_same(&c->key, &key))
			continue;
		t->nmarker_sites = c->n;
		memcpy(t->marker_sites, c->sites, sizeof(t->marker_sites));
		debugx("phase markers: %s (as for this build before)", c->how);
		return;
	}
	uint64_t at[8], size[8];
	struct call_site cs[MARKER_SITES_MAX];
	int n = 0, enter = 0;
	const char *why = NULL;
	int parts = elf_file_function_parts(f, "_PyEval_EvalFrameDefault", at, size, 8);
	int complete = parts > 0 && parts <= 8;
	if (parts <= 0 && !elf_file_symbol(f, "_PyEval_EvalFrameDefault", at, size))
		parts = 1;
	if (parts <= 0 || parts > 8)
		why = "the eval loop's parts are not known";
	for (int p = 0; !why && p < parts; p++) {
		int k = elf_call_sites(f, at[p], size[p], lookup, cs + n, MARKER_SITES_MAX - n);
		if (k < 0)
			why = "the eval loop's code is not decoded here";
		else if (n + k > MARKER_SITES_MAX)
			why = "too many calls";
		else
			n += k;
	}
	for (int i = 0; !why && i < n; i++) {
		enter |= names_enter(t, cs[i].rsi);
		if (elf_file_vaddr_to_offset(f, cs[i].at, &t->marker_sites[i]))
			why = "a call site is not in the file";
	}
	if (!why && !n)
		why = "the eval loop does not call it (inlined?)";
	else if (!why && !enter && !complete)
		why = "no call site is seen to look __enter__ up, and the file does not name "
		      "every part of the eval loop";
	t->nmarker_sites = why ? 0 : n;
	const char *how = why ? "the probe goes on the function itself"
			      : "the probe goes on the eval loop's calls";
	if (why)
		debugx("phase markers: the probe goes on %s itself: %s", lookup, why);
	else
		debugx("phase markers: the probe goes on the eval loop's %d calls to %s (%s)", n,
		       lookup, enter ? "one looks __enter__ up" : "all its parts decoded");
	if (key.uid == (uid_t)-1)
		return;
	struct marker_cached *c = &marker_cache[marker_cache_next];
	c->key = key;
	c->n = t->nmarker_sites;
	c->how = how;
	memcpy(c->sites, t->marker_sites, sizeof(c->sites));
	marker_cache_next = (marker_cache_next + 1) % SLOT_CACHE;
	if (nmarker_cache < SLOT_CACHE)
		nmarker_cache++;
}

/* Phase markers (`with phase(NAME):`) are seen where `with` looks up __enter__, and
 * followed through their generator's state: its layout per version. */
static void find_marker_support(struct target *t, struct elf_file *f)
{
	uint64_t v;
	if (!t->off->gen_frame_state && !t->off->gen_frame)
		return;
	/* 3.14's LOAD_SPECIAL looks special methods up through another function; 3.9/3.10
	 * hand _PyObject_LookupSpecial an identifier rather than a str */
	t->lookup_special_kind = t->minor >= 14 ? LOOKUP_STACKREF
			       : t->minor <= 10 ? LOOKUP_IDENTIFIER : LOOKUP_STR;
	const char *lookup = t->lookup_special_kind == LOOKUP_STACKREF
				     ? "_PyObject_LookupSpecialMethod" : "_PyObject_LookupSpecial";
	if (runtime_symbol(t, f, "PyGen_Type", &t->gen_type) ||
	    elf_file_symbol(f, lookup, &v, NULL) || probe_offset(f, v, &t->lookup_special_off)) {
		t->gen_type = 0;
		return;
	}
	if (t->lookup_special_kind != LOOKUP_STACKREF)
		find_marker_sites(t, f, lookup);
	t->gen_frame_state = t->off->gen_frame_state;
	t->gen_iframe = t->off->gen_iframe;
	t->gen_state_created = (int8_t)t->off->frame_created;
}

static int inspect(struct target *t, pid_t pid)
{
	memset(t, 0, sizeof(*t));
	t->pid = pid;
	snprintf(t->root, sizeof(t->root), "/proc/%d/root", pid);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d", pid);
	struct stat st;
	if (stat(path, &st)) {
		why(t, "no process %d: check the pid (as the host sees it: `ps -e`)", pid);
		return -1;
	}
	struct py_search s = { .t = t };
	if (each_mapping(pid, find_runtime, &s) < 0) {
		if (errno == E2BIG)
			why(t, "process %d maps more than %d areas: evmbpf does not read a map that "
			       "long (a process of that size is not traced)", pid, PROC_MAPS_MAX_LINES);
		else
			why(t, "cannot read /proc/%d/maps: %s (evmbpf needs root, or CAP_SYS_PTRACE)",
			    pid, strerror(errno));
		return -1;
	}
	if (!s.found) {
		why(t, "process %d is not a Python interpreter: no mapped file defines _PyRuntime "
		       "(point --pid at the python process itself, not a shell or launcher)", pid);
		return -1;
	}
	struct elf_file *f = elf_file_open(t->py_open);
	if (!f) {
		why(t, "cannot open %s: %s", t->py_open, strerror(errno));
		return -1;
	}
	int rc = -1;
	uint64_t dummy;
	if (read_version(t, f)) {
		why(t, "cannot tell which Python %s is (no Py_Version, no version in its name)",
		       t->py_path);
		goto out;
	}
	if (!elf_file_symbol(f, "_Py_RefTotal", &dummy, NULL) ||
	    !elf_file_symbol(f, "_Py_NegativeRefcount", &dummy, NULL)) {
		why(t, "%s is a debug build of Python %d.%d, whose object layouts differ; evmbpf "
		       "reads release builds only", t->py_path, t->major, t->minor);
		goto out;
	}
	if (!elf_file_symbol(f, "_Py_brc_queue_object", &dummy, NULL) ||
	    strstr(t->py_path, "python3.13t") || strstr(t->py_path, "python3.14t")) {
		why(t, "%s is a free-threaded (no-GIL) build of Python %d.%d; evmbpf reads "
		       "builds with the GIL only", t->py_path, t->major, t->minor);
		goto out;
	}
	t->off = pyoffsets_for(t->major, t->minor);
	if (!t->off) {
		why(t, "Python %d.%d is not supported (evmbpf reads CPython 3.9 to 3.14)", t->major,
		       t->minor);
		goto out;
	}
	t->reader.pid = pid;
	t->reader.off = t->off;
	struct bias_search b = { .path = t->py_path };
	each_mapping(pid, find_first_map, &b);
	if (!b.found) {
		why(t, "cannot find where %s is mapped in process %d", t->py_path, pid);
		goto out;
	}
	t->py_bias = b.start - elf_file_base_vaddr(f);
	if (runtime_symbol(t, f, "_Py_NoneStruct", &t->none_obj) ||
	    runtime_symbol(t, f, "PyBool_Type", &t->bool_type) ||
	    runtime_symbol(t, f, "PyFloat_Type", &t->float_type) ||
	    runtime_symbol(t, f, "PyBaseObject_Type", &t->object_type)) {
		why(t, "%s lacks the exported C-API symbols evmbpf needs", t->py_path);
		goto out;
	}
	/* sanity: None's type must be readable now */
	if (!py_type(&t->reader, t->none_obj)) {
		why(t, "cannot read the memory of process %d (evmbpf needs root, or CAP_SYS_PTRACE)",
		       pid);
		goto out;
	}
	if (check_debug_offsets(t, f))
		goto out;
	if (find_slot_tp_call(t, f) ||
	    probe_offset(f, t->slot_tp_call - t->py_bias, &t->slot_tp_call_off)) {
		why(t, "cannot find slot_tp_call in %s (no symbol, and no slotdefs table found)",
		       t->py_path);
		goto out;
	}
	uint64_t v;
	if (elf_file_symbol(f, "PyErr_Display", &v, NULL) || probe_offset(f, v, &t->err_display_off))
		t->err_display_off = 0;
	if (elf_file_symbol(f, "PyEval_EvalCode", &v, NULL) || probe_offset(f, v, &t->eval_code_off))
		t->eval_code_off = 0;
	find_marker_support(t, f);
	if (runtime_symbol(t, f, "_PyRuntime", &t->runtime))
		t->runtime = 0;
	target_find_torch(t);
	rc = 0;
out:
	elf_file_close(f);
	return rc;
}

/* The target can exit while it is read: then that is the one thing to say, not what
 * failed to read because of it. */
int target_inspect(struct target *t, pid_t pid)
{
	if (!inspect(t, pid))
		return 0;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	if (t->why[0] && strncmp(t->why, "no process", 10) && access(path, F_OK) && errno == ENOENT)
		warnx_("process %d exited while evmbpf was inspecting it; nothing traced", pid);
	else if (t->why[0])
		warnx_("%s", t->why);
	return -1;
}

int target_inspect_quiet(struct target *t, pid_t pid)
{
	return inspect(t, pid);
}

/* torch's extension module, .../torch/_C.cpython-*.so, sits beside its version.py
 * (wherever libtorch_python itself lives: Debian puts it in /usr/lib). */
static int find_torch_lib(void *arg, const struct proc_mapping *m)
{
	struct target *t = arg;
	const char *hit = strstr(m->path, "/torch/_C.");
	if (!hit || strchr(hit + 10, '/'))
		return 0;
	snprintf(t->torch_lib, sizeof(t->torch_lib), "%s", m->path);
	return 1;
}

/* torch < 1.8 keeps a tensor's dtype as a pointer to a static caffe2 TypeMetaData
 * record, the one libc10's caffe2::TypeMeta::_typeMetaDataInstance<T>() returns: code
 * `lea REC(%rip), %rax; ret`. So each record's address comes from the file and the
 * library's load bias, by T as the symbol's name mangles it: found while the process
 * runs, it names the dtypes of records described after the process has gone (reading
 * a record's own name then fails). */
static const struct { const char *mangled; int dtype; } meta_types[] = {
	{ "h", 0 }, { "a", 1 }, { "s", 2 }, { "i", 3 }, { "l", 4 }, { "N3c104HalfE", 5 }, { "f", 6 },
	{ "d", 7 }, { "N3c107complexINS2_4HalfEEE", 8 }, { "N3c107complexIfEE", 9 },
	{ "N3c107complexIdEE", 10 }, { "b", 11 }, { "N3c105qint8E", 12 }, { "N3c106quint8E", 13 },
	{ "N3c106qint32E", 14 }, { "N3c108BFloat16E", 15 } };

struct c10_search { struct target *t; char path[PATH_MAX]; uint64_t start; };

static int find_c10(void *arg, const struct proc_mapping *m)
{
	struct c10_search *s = arg;
	const char *base = strrchr(m->path, '/');
	if (m->offset != 0 || strncmp(base + 1, "libc10.so", 9))
		return 0;
	open_path(s->t, m, s->path, sizeof(s->path));
	s->start = m->start;
	return 1;
}

static void find_torch_metas(struct target *t)
{
	int major = 0, minor = 0;
	if (sscanf(t->torch_version, "%d.%d", &major, &minor) == 2 &&
	    (major > 1 || (major == 1 && minor >= 8)))
		return; /* a dtype is a ScalarType number there */
	struct c10_search s = { .t = t };
	if (each_mapping(t->pid, find_c10, &s) <= 0)
		return;
	struct elf_file *f = elf_file_open(s.path);
	if (!f)
		return;
	for (size_t i = 0; i < sizeof(meta_types) / sizeof(meta_types[0]); i++) {
		char name[160];
		snprintf(name, sizeof(name), "_ZN6caffe28TypeMeta21_typeMetaDataInstanceI%sEEPKNS_"
			 "6detail12TypeMetaDataEv", meta_types[i].mangled);
		uint64_t fn;
		uint8_t code[8];
		if (elf_file_symbol(f, name, &fn, NULL) || elf_file_read(f, fn, code, sizeof(code)) ||
		    code[0] != 0x48 || code[1] != 0x8d || code[2] != 0x05 || code[7] != 0xc3)
			continue;
		int32_t disp;
		memcpy(&disp, code + 3, 4);
		int n = t->ntorch_metas++;
		t->torch_metas[n].rec = s.start - elf_file_base_vaddr(f) + fn + 7 + (uint64_t)(int64_t)disp;
		t->torch_metas[n].dtype = meta_types[i].dtype;
	}
	elf_file_close(f);
	debugx("%d: %d of libc10's TypeMetaData records found", t->pid, t->ntorch_metas);
}

char *target_find_line(const struct target *t, const char *path, const char *prefix,
		       const char *needle)
{
	struct target_creds c;
	char root[PATH_MAX];
	ssize_t n = readlink(t->root, root, sizeof(root) - 1); /* a chroot's maps: evmbpf's view */
	if (n > 1 && (root[n] = 0, !strncmp(path, root, (size_t)n)) && path[n] == '/')
		path += n;
	if (path[0] != '/' || target_creds(t->pid, &c))
		return NULL;
	int root_fd = open(t->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	char *line = find_line_as_target(&c, root_fd, path + 1, prefix, needle);
	if (root_fd >= 0)
		close(root_fd);
	return line;
}

/* version.py is found by the name of a file the target maps: read as the target
 * (asuser.c), never with root's rights. */
int target_find_torch(struct target *t)
{
	if (t->torch_version[0])
		return 1;
	if (each_mapping(t->pid, find_torch_lib, t) <= 0)
		return 0;
	snprintf(t->torch_version, sizeof(t->torch_version), "unknown");
	char file[PATH_MAX + 16];
	snprintf(file, sizeof(file), "%s", t->torch_lib);
	char *slash = strrchr(file, '/');
	if (file[0] != '/' || !slash)
		return 1;
	snprintf(slash, sizeof(file) - (size_t)(slash - file), "/version.py");
	char *line = target_find_line(t, file, "__version__", NULL);
	char *q = line ? strpbrk(line, "'\"") : NULL;
	if (q) {
		char quote = *q++;
		char *end = strchr(q, quote);
		if (end) {
			*end = 0;
			snprintf(t->torch_version, sizeof(t->torch_version), "%s", q);
		}
	}
	free(line);
	find_torch_metas(t);
	return 1;
}

int target_ns_pid(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "re");
	int ns_pid = pid;
	if (!f)
		return pid;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "NSpid:", 6))
			continue;
		char *p = line + 6, *end;
		for (;;) {
			long v = strtol(p, &end, 10);
			if (end == p)
				break;
			ns_pid = (int)v;
			p = end;
		}
		break;
	}
	fclose(f);
	return ns_pid;
}

void target_identity(struct target *t)
{
	proc_identity(t->pid, &t->ppid, t->rank);
	if (target_creds(t->pid, &t->creds))
		debugx("%d: its uid, gid and groups cannot be read: no source line of its "
		       "tracebacks is read", t->pid);
}
