// SPDX-License-Identifier: GPL-2.0
/* markers: phase markers.
 *
 * evalmetry's `with phase(NAME):` markers, seen from outside: the generator of the
 * marker's @contextmanager (its code object, its state, its first local: NAME) is read
 * when the `with` looks up __enter__, and again at each module event to know whether
 * it is still suspended at its yield. */
#ifndef EVMBPF_MARKERS_BPF_H
#define EVMBPF_MARKERS_BPF_H

#include "types.bpf.h"
#include "values.bpf.h"

/* ---------------------------------------------------------------- phase markers
 *
 * `with phase(NAME):` (a @contextmanager) looks up `__enter__` on its
 * _GeneratorContextManager through _PyObject_LookupSpecial: there the marker's
 * generator is remembered for the thread. It is active while that generator is
 * suspended at its yield, and over once it has run to its end (left normally or by an
 * exception). Module events read the state of the thread's few markers. */

struct marker_list {
	__u32 n;
	__u32 pad;
	__u64 gen[MARKERS_MAX];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct marker_list);
} markers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
} marker_codes SEC(".maps");

/* Any thread holds markers: module calls of a process without any skip the lookup. */
/* per process: struct proc_state's markers_live */

#define MARKER_PHASE MARKER_KIND_PHASE
#define MARKER_NONE 2
#define MARKER_NO_SAMPLES MARKER_KIND_NO_SAMPLES

/* A generator's state as 3.11+ encode it (created, suspended < 0, running 0, over > 0).
 * 3.9/3.10 keep it in the generator's frame object, which is gone once it is over;
 * 3.9 has no states there: not started is f_lasti -1, running is f_executing. */
static __always_inline __s8 gen_state(__u64 gen)
{
	struct proc_state *ps = ps_cur();
	__s8 state = 1;
	if (rd64(gen + 8) != ps->cfg.gen_type)
		return 1; /* freed and reused: over */
	if (pyo.version <= 310) {
		__u64 frame = rd64(gen + pyo.gen_frame);
		if (!frame)
			return 1;
		if (pyo.frame_state) {
			bpf_probe_read_user(&state, 1, (void *)(frame + pyo.frame_state));
			return state;
		}
		__s32 lasti = 0;
		__u8 executing = 0;
		bpf_probe_read_user(&lasti, 4, (void *)(frame + pyo.frame_instr));
		bpf_probe_read_user(&executing, 1, (void *)(frame + pyo.frame_executing));
		return lasti == -1 ? ps->cfg.gen_state_created : executing ? 0 : -1;
	}
	bpf_probe_read_user(&state, 1, (void *)(gen + ps->cfg.gen_frame_state));
	return state;
}

/* A generator's code object and first local (a phase marker's name). */
static __always_inline __u64 gen_code(__u64 gen)
{
	struct proc_state *ps = ps_cur();
	if (pyo.version <= 310)
		return rd64(gen + pyo.gen_code);
	return rd64(gen + ps->cfg.gen_iframe + pyo.iframe_code) & ~3ULL;
}

static __always_inline __u64 gen_first_local(__u64 gen)
{
	struct proc_state *ps = ps_cur();
	if (pyo.version <= 310)
		return rd64(rd64(gen + pyo.gen_frame) + pyo.iframe_localsplus);
	return rd64(gen + ps->cfg.gen_iframe + pyo.iframe_localsplus) & ~3ULL;
}

/* The innermost marker active on this thread; forgets the ones that are over. */
static __always_inline __u64 active_marker_walk(void)
{
	struct proc_state *ps = ps_cur();
	if (!ps->markers_live)
		return 0;
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct marker_list *m = bpf_map_lookup_elem(&markers, &tid);
	if (!m || !m->n)
		return 0;
	__u64 inner = 0;
	__u32 keep = 0;
	for (int i = 0; i < MARKERS_MAX; i++) {
		if (i >= m->n)
			break;
		__u64 g = m->gen[i];
		__s8 state = gen_state(g);
		if (state > 0)
			continue; /* completed or cleared */
		m->gen[keep & (MARKERS_MAX - 1)] = g;
		keep++;
		if (state < 0 && state != ps->cfg.gen_state_created)
			inner = g;
	}
	m->n = keep;
	return inner;
}

/* Global (split.bpf.h): verified once, not in each state of each caller. */
__noinline __u64 active_marker_list(void)
{
	return active_marker_walk();
}

/* The innermost active marker, 0 when none. A process with no marker alive (most: no
 * phase is open) pays one load here, not a call: each call and return of a program's
 * function costs 10-20 ns on a guest whose returns go through a mitigation's thunk. */
static __always_inline __u64 active_marker(void)
{
	return ps_cur()->markers_live ? active_marker_list() : 0;
}

/* Is this code object's file evalmetry/debug.py (the host's markers and note_samples)? */
static __always_inline int code_in_host(__u64 code)
{
	__u64 file = rd64(code + pyo.co_filename);
	__s64 len = (__s64)rd64(file + pyo.str_length);
	return len >= 18 && len < 4096 &&
	       name_is(file + pyo.str_ascii_data + len - 18, "evalmetry/debug.py", 18);
}

static __always_inline __u8 marker_code_kind_of(__u64 code)
{
	__u64 key = PS_KEY(ps_cur(), code);
	__u8 *cached = bpf_map_lookup_elem(&marker_codes, &key);
	if (cached)
		return *cached;
	__u8 kind = MARKER_NONE;
	/* 3.9/3.10 code objects have a name only */
	__u64 qual = rd64(code + (pyo.co_qualname ? pyo.co_qualname : pyo.co_name));
	if (name_is(qual + pyo.str_ascii_data, "phase", 6) && code_in_host(code))
		kind = MARKER_PHASE;
	else if (name_is(qual + pyo.str_ascii_data, "without_samples", 16) && code_in_host(code))
		kind = MARKER_NO_SAMPLES;
	bpf_map_update_elem(&marker_codes, &key, &kind, BPF_ANY);
	return kind;
}

/* Global (split.bpf.h): marker_seen calls it for each of 4 candidates. */
__noinline __u8 marker_code_kind(__u64 code)
{
	return marker_code_kind_of(code);
}

/* The first few attribute values of an instance (a _GeneratorContextManager keeps
 * `gen` first), wherever this Python keeps them: a PyDictValues block (3.11: before the
 * object; 3.12: tagged in the managed-dict slot; 3.13+: inline after the object), or a
 * materialized __dict__ (split: its values block; combined: its first entries). */
static __always_inline int instance_values(__u64 obj, __u64 out[4])
{
	__u64 block = 0;
	if (pyo.managed_kind == 1) {
		block = rd64(obj + (__s16)pyo.managed_values);
	} else if (pyo.managed_kind == 2) {
		__u64 slot = rd64(obj + (__s16)pyo.managed_dict);
		if (slot & 1)
			block = slot + 1;
	} else if (pyo.managed_kind == 3) {
		__u64 basic = rd64(rd64(obj + 8) + pyo.tp_basicsize);
		__u8 head[4] = {};
		bpf_probe_read_user(head, 4, (void *)(obj + basic));
		if (head[3]) /* valid */
			block = obj + basic;
	}
	if (!block) {
		__u64 dict;
		if (pyo.managed_kind == 0) { /* 3.9/3.10: the __dict__ pointer at tp_dictoffset */
			__s64 at = (__s64)rd64(rd64(obj + 8) + pyo.tp_dictoffset);
			if (at <= 0 || at > 4096)
				return -1;
			dict = rd64(obj + at);
		} else {
			dict = rd64(obj + (__s16)pyo.managed_dict);
		}
		if (!dict || (dict & 1))
			return -1;
		block = rd64(dict + pyo.dict_values);
		if (!block) {
			__u8 esize = 24, koff = 8;
			__u64 entries = dict_entries(rd64(dict + pyo.dict_keys), &esize, &koff);
			for (int i = 0; i < 4; i++)
				out[i] = rd64(entries + i * esize + koff + 8);
			return 0;
		}
	}
	return bpf_probe_read_user(out, 4 * 8, (void *)(block + pyo.dictvalues_values)) ? -1 : 0;
}

/* A `with` statement looks up `mgr.__enter__` (the name's characters at `chars`): is mgr
 * a phase marker? */
static __always_inline int marker_seen(__u64 mgr, __u64 chars)
{
	struct proc_state *ps = ps_cur();
	__u64 type = rd64(mgr + 8);
	if (!type || classify_type(type) != T_GENCM)
		return 0;
	if (!name_is(chars, "__enter__", 10))
		return 0;
	__u64 cand[4] = {};
	if (instance_values(mgr, cand))
		return 0;
	__u64 gen = 0;
	__u8 kind = 0;
	for (int i = 0; i < 4; i++) {
		__u64 c = cand[i] & ~3ULL;
		if (!c || rd64(c + 8) != ps->cfg.gen_type)
			continue;
		kind = marker_code_kind(gen_code(c));
		if (kind == MARKER_PHASE || kind == MARKER_NO_SAMPLES) {
			gen = c;
			break;
		}
	}
	if (!gen)
		return 0;

	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct marker_list *m = bpf_map_lookup_elem(&markers, &tid);
	if (!m) {
		struct marker_list empty = {};
		bpf_map_update_elem(&markers, &tid, &empty, BPF_NOEXIST);
		m = bpf_map_lookup_elem(&markers, &tid);
		if (!m)
			return 0;
	}
	ps->markers_live = 1;
	__u64 parent = active_marker(); /* forgets the ones that are over first */
	__u32 n = m->n;
	if (n >= MARKERS_MAX) {
		/* deeper than we keep: drop the outermost */
		for (int i = 0; i < MARKERS_MAX - 1; i++)
			m->gen[i] = m->gen[i + 1];
		n = MARKERS_MAX - 1;
	}
	m->gen[n & (MARKERS_MAX - 1)] = gen;
	m->n = n + 1;

	struct rec_marker *r = ps_reserve(ps, sizeof(*r));
	if (!r) {
		__sync_fetch_and_add(&ps->dropped_records, 1);
		return 0;
	}
	__u64 id = bpf_get_current_pid_tgid();
	r->hdr.kind = REC_MARKER;
	r->hdr.size = sizeof(*r);
	r->hdr.pid = id >> 32;
	r->hdr.tid = (__u32)id;
	r->hdr.ts_ns = bpf_ktime_get_ns();
	r->gen = gen;
	r->parent = parent;
	r->kind = kind;
	r->pad = 0;
	r->name[0] = 0;
	__u64 name = kind == MARKER_PHASE ? gen_first_local(gen) : 0;
	__u32 state = (__u32)rd64(name + pyo.str_state);
	if (((state >> 2) & 7) == 1 && ((state >> 5) & 1))
		bpf_probe_read_user_str(r->name, sizeof(r->name),
					(void *)(name + (((state >> 6) & 1) ? pyo.str_ascii_data
									     : pyo.str_compact_data)));
	bpf_ringbuf_submit(r, 0);
	return 0;
}

#endif /* EVMBPF_MARKERS_BPF_H */
