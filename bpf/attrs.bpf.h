// SPDX-License-Identifier: GPL-2.0
/* attrs: instance attributes.
 *
 * obj.NAME for a few attribute names, read from the instance's __dict__ (or 3.11+'s
 * inline values) without calling anything: the KV cache description needs a cache's
 * layers and their keys/values, which live in instance attributes. */
#ifndef EVMBPF_ATTRS_BPF_H
#define EVMBPF_ATTRS_BPF_H

#include "values.bpf.h"

/* ---------------------------------------------------------------- instance attributes
 * obj.NAME from the instance __dict__ without calling anything: a tp_dictoffset dict
 * (3.9/3.10), 3.11's dict or values pointers, 3.12's dict-or-values slot, 3.13+ inline
 * values or managed dict (user/pyoffsets.c, managed_kind); 0 when absent or unreadable. Names
 * are short ASCII attribute names, matched by length and bytes. */
#define TPF_INLINE_VALUES (1UL << 2)
#define TPF_MANAGED_DICT (1UL << 4)
#define ATTR_SCAN 32

enum attr_name { A_LAYERS = 1, A_KEY_CACHE, A_VALUE_CACHE, A_KEYS, A_VALUES };

static __always_inline int attr_want(__u32 which, __u64 *lo, __u64 *hi, __u32 *len)
{
	/* little-endian packs of the names */
	*hi = 0;
	switch (which) {
	case A_LAYERS: *lo = 0x73726579616cULL; *len = 6; return 0;          /* "layers" */
	case A_KEY_CACHE: *lo = 0x686361635f79656bULL; *hi = 0x65; *len = 9; return 0;
	case A_VALUE_CACHE: *lo = 0x61635f65756c6176ULL; *hi = 0x656863; *len = 11; return 0;
	case A_KEYS: *lo = 0x7379656bULL; *len = 4; return 0;
	case A_VALUES: *lo = 0x7365756c6176ULL; *len = 6; return 0;
	}
	return -1;
}

/* Where a name was found in a keys object, kept across records (per CPU, direct-mapped
 * by the keys object's address and the name): a hint of where to look first, never an
 * answer. The key at that index is read and compared as the scan compares each key; a
 * match there is the scan's answer, since a keys object of only str keys (3.11+'s
 * unicode and split kinds, to which hints are kept: no str subclass among them) holds one
 * entry per key text. Anything else (another keys object at that address since, the
 * name elsewhere or gone) sends the scan the old way. Saves reading the keys before it
 * (one read each). */
#define ATTR_HINTS 64

struct attr_hint {
	__u64 keys;  /* PS_KEY(ps, keys object), 0: empty */
	__u64 lo;    /* the name (attr_want's packing) */
	__u64 hi;
	__u32 len;
	__u32 index;
};

/* A keys object read in one piece, per CPU (too big for the BPF stack). */
struct attr_block {
	__u8 b[WIN_BYTES + 16]; /* a keys object's first bytes */
	__u64 h[8];             /* a key's header and first data */
	__u64 kv[2];
	__u64 want[3];          /* the name: lo, hi, len */
	__u64 hkey;             /* the keys object's hint key, and its slot (few live values */
	__u32 hslot;            /* through the scan: the BPF stack is shared by the walk's frames) */
	__u32 pad;
	struct attr_hint hint[ATTR_HINTS];
};

static __always_inline __u32 attr_hint_slot(__u64 keys, __u64 lo)
{
	return ((keys >> 4) ^ (keys >> 12) ^ lo ^ (lo >> 19)) & (ATTR_HINTS - 1);
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct attr_block);
} attr_block_map SEC(".maps");

/* h: 8 words of scratch (off the BPF stack) */
static __always_inline int key_matches(__u64 key, __u64 lo, __u64 hi, __u32 len, __u64 *h)
{
	__u64 klen, *d = h + 6;
	__u32 state;
	__u32 span = pyo.str_ascii_data + 16 - pyo.str_length;
	__u32 so = pyo.str_state - pyo.str_length, ao = pyo.str_ascii_data - pyo.str_length;
	if (span <= 64 && so <= 56 && ao <= 48 && !(so & 7) &&
	    !(ao & 7) && !bpf_probe_read_user(h, span & 63, (void *)(key + pyo.str_length))) {
		/* length, state and the first 16 bytes of data: one read */
		klen = h[0];
		state = (__u32)h[(so / 8) & 7];
		__u64 d0 = h[(ao / 8) & 7], d1 = h[(ao / 8 + 1) & 7];
		d[0] = d0;
		d[1] = d1;
	} else {
		if (bpf_probe_read_user(&h[0], 8, (void *)(key + pyo.str_length)) ||
		    bpf_probe_read_user(&h[1], 8, (void *)(key + pyo.str_state)))
			return 0;
		klen = h[0];
		state = (__u32)h[1];
		d[0] = d[1] = 0;
		if (klen == len && bpf_probe_read_user(d, 16, (void *)(key + pyo.str_ascii_data)))
			return 0;
	}
	if (klen != len || !((state >> 6) & 1) || !((state >> 5) & 1))
		return 0;
	if (len < 8)
		d[0] &= (1ULL << (len * 8)) - 1;
	if (len <= 8)
		d[1] = 0;
	else if (len < 16)
		d[1] &= (1ULL << ((len - 8) * 8)) - 1;
	return d[0] == lo && d[1] == hi;
}

/* The index of the name among a keys object's first ATTR_SCAN entries, with that
 * entry's own value in *value; -1 when it is not there or an entry cannot be read.
 * keys_find's answer is packed: index + 1 in the top byte, the value below (a user
 * address: under 2^56). */
#define KEYS_VALUE_MASK ((1ULL << 56) - 1)

static __always_inline __u64 keys_find(__u64 keys, __u64 lo, __u64 hi, __u32 len)
{
	__u64 nentries;
	__u8 esize8, koff8;
	__u64 entries;
	__u32 zero = 0, eo = 0;
	struct attr_block *ab = bpf_map_lookup_elem(&attr_block_map, &zero);
	if (!ab)
		return 0;
	/* few live values through the loop (the BPF stack is shared by the walk's frames):
	 * the name, the hint's key and slot, the entry's key address and its offset in the
	 * block (past it: read) */
	ab->want[0] = lo;
	ab->want[1] = hi;
	ab->want[2] = len;
	ab->hkey = PS_KEY(ps_cur(), keys);
	ab->hslot = attr_hint_slot(keys, lo);
	/* 3.11+: the keys object's header, indices and first entries in one read */
	int whole = ab && !pyo.dk_size && pyo.dk_nentries == 24 && pyo.dk_log2_index_bytes < 24 &&
		    pyo.dk_kind < 24 && !bpf_probe_read_user(ab->b, WIN_BYTES, (void *)keys);
	if (whole && ab) {
		__u8 log2_index = ab->b[pyo.dk_log2_index_bytes & 31];
		__u8 dkind = ab->b[pyo.dk_kind & 31];
		esize8 = dkind ? 16 : 24;
		koff8 = dkind ? 0 : 8;
		eo = pyo.dk_indices + (1U << (log2_index & 31));
		entries = keys + eo;
		nentries = *(__u64 *)&ab->b[24];
	} else if (ab && pyo.dk_nentries <= 40 && pyo.dk_size <= 40 &&
		   !bpf_probe_read_user(ab->h, 48, (void *)keys)) {
		/* the header alone (dict_entries' answer; off the stack) */
		__u8 *hb = (__u8 *)ab->h;
		nentries = ab->h[(pyo.dk_nentries / 8) & 7];
		if (pyo.dk_size) {
			__u64 size = ab->h[(pyo.dk_size / 8) & 7];
			__u64 ib = size <= 0xff ? 1 : size <= 0xffff ? 2 : size <= 0xffffffffULL ? 4 : 8;
			esize8 = 24;
			koff8 = 8;
			entries = keys + pyo.dk_indices + size * ib;
		} else {
			__u8 dkind = hb[pyo.dk_kind & 31];
			esize8 = dkind ? 16 : 24;
			koff8 = dkind ? 0 : 8;
			entries = keys + pyo.dk_indices + (1ULL << (hb[pyo.dk_log2_index_bytes & 31] & 63));
		}
	} else {
		return 0;
	}
	__u32 esize = esize8;
	struct attr_hint *ah = &ab->hint[ab->hslot & (ATTR_HINTS - 1)];
	if (!koff8 && ah->keys == ab->hkey && ah->lo == ab->want[0] &&
	    ah->hi == ab->want[1] && ah->len == ab->want[2] && ah->index < nentries &&
	    ah->index < ATTR_SCAN) {
		__u32 hi_ = ah->index;
		__u64 *kv = ab->kv;
		__u32 at = whole ? eo + koff8 + hi_ * esize : 0x10000;
		if (at <= WIN_BYTES - 16 && !(at & 7)) {
			asm volatile("" : "+r"(at));
			at &= 0xf8;
			kv[0] = *(__u64 *)&ab->b[at];
			kv[1] = *(__u64 *)&ab->b[at + 8];
		} else if (bpf_probe_read_user(kv, 16, (void *)(entries + koff8 + (__u64)hi_ * esize))) {
			kv[0] = 0;
		}
		if (kv[0] && key_matches(kv[0], ab->want[0], ab->want[1], ab->want[2], ab->h))
			return ((__u64)(ab->hint[ab->hslot & (ATTR_HINTS - 1)].index + 1) << 56) |
			       (ab->kv[1] & KEYS_VALUE_MASK);
	}
	__u64 cur = entries + koff8;
	__u32 bo = whole ? eo + koff8 : 0x10000;
	for (__u32 i = 0; i < ATTR_SCAN; i++, cur += esize, bo += esize) {
		if (i >= nentries)
			break;
		__u64 *kv = ab->kv;
		if (bo <= WIN_BYTES - 16 && !(bo & 7)) {
			__u32 at = bo;
			asm volatile("" : "+r"(at));
			at &= 0xf8;
			kv[0] = *(__u64 *)&ab->b[at];
			kv[1] = *(__u64 *)&ab->b[at + 8];
		} else if (bpf_probe_read_user(kv, 16, (void *)cur)) {
			return 0;
		}
		if (kv[0] && key_matches(kv[0], ab->want[0], ab->want[1], ab->want[2], ab->h)) {
			if (!koff8) {
				struct attr_hint *ah = &ab->hint[ab->hslot & (ATTR_HINTS - 1)];
				ah->keys = ab->hkey;
				ah->lo = ab->want[0];
				ah->hi = ab->want[1];
				ah->len = ab->want[2];
				ah->index = i;
			}
			return ((__u64)(i + 1) << 56) | (kv[1] & KEYS_VALUE_MASK);
		}
	}
	return 0;
}

static __always_inline __s32 key_index(__u64 keys, __u64 lo, __u64 hi, __u32 len, __u64 *value)
{
	__u64 r = keys_find(keys, lo, hi, len);
	if (!r)
		return -1;
	*value = r & KEYS_VALUE_MASK;
	return (__s32)(r >> 56) - 1;
}

/* Global (split.bpf.h): verified once for any name, not once for each of get_attr's
 * names and dict layouts. */
__noinline __u64 key_find(__u64 keys, __u64 lo, __u64 hi, __u32 len)
{
	return keys_find(keys, lo, hi, len); /* packed: no pointer kept through the scan */
}

/* Scan a keys object's entries for the name; the value from `values` (split: values[i])
 * or from the entry itself (combined). */
static __always_inline __u64 scan_keys(__u64 keys, __u64 values, __u64 lo, __u64 hi, __u32 len)
{
	__u64 r = key_find(keys, lo, hi, len);
	__s32 i = r ? (__s32)(r >> 56) - 1 : -1;
	if (i < 0 || i >= ATTR_SCAN)
		return 0;
	return values ? rd64(values + pyo.dictvalues_values + i * 8) : r & KEYS_VALUE_MASK;
}

/* Where the name sits in a keys object's entries (the index scan_keys would take the
 * value at), or -1 when it is not among the first ATTR_SCAN. For the split tables of one
 * type's instances (the type's shared keys), found once per record and used for each
 * instance of that type read in it. */
/* A global function: verified once, not at each call. */
__noinline __s32 attr_slot(__u64 keys, __u32 which)
{
	__u64 lo, hi, value;
	__u32 len;
	if (!keys || attr_want(which, &lo, &hi, &len))
		return -1;
	return key_index(keys, lo, hi, len, &value);
}

static __always_inline __u64 dict_get(__u64 dict, __u64 lo, __u64 hi, __u32 len)
{
	if (!dict)
		return 0;
	__u64 keys = rd64(dict + pyo.dict_keys);
	if (!keys)
		return 0;
	return scan_keys(keys, rd64(dict + pyo.dict_values), lo, hi, len);
}

/* A global function: verified once, not at each of its callers (it holds several scans). */
__noinline __u64 get_attr(__u64 obj, __u32 which)
{
	__u64 lo, hi;
	__u32 len;
	if (!obj || attr_want(which, &lo, &hi, &len))
		return 0;
	__u64 type = rd64(obj + 8);
	__u64 flags = rd64(type + pyo.tp_flags);
	if (pyo.managed_kind == 3 && (flags & TPF_MANAGED_DICT)) {
		__u64 dict = rd64(obj + (__s64)pyo.managed_dict);
		if (dict)
			return dict_get(dict, lo, hi, len);
		if (!(flags & TPF_INLINE_VALUES))
			return 0;
		__u64 at = pyo.managed_values ? obj + pyo.managed_values
					      : obj + rd64(type + pyo.tp_basicsize);
		__u8 hdr[4] = {};
		if (bpf_probe_read_user(hdr, 4, (void *)at) || !hdr[3])
			return 0; /* not valid: the values moved to a dict */
		return scan_keys(rd64(type + pyo.ht_cached_keys), at, lo, hi, len);
	}
	if (pyo.managed_kind == 0) {
		__s64 dictoffset = (__s64)rd64(type + pyo.tp_dictoffset);
		if (dictoffset <= 0 || dictoffset > 4096)
			return 0;
		return dict_get(rd64(obj + dictoffset), lo, hi, len);
	}
	if (pyo.managed_kind == 1 && (flags & TPF_MANAGED_DICT)) {
		/* 3.11: the dict pointer at managed_dict, else a values pointer at managed_values */
		__u64 dict = rd64(obj + (__s64)pyo.managed_dict);
		if (dict)
			return dict_get(dict, lo, hi, len);
		__u64 values = rd64(obj + (__s64)pyo.managed_values);
		if (!values)
			return 0;
		return scan_keys(rd64(type + pyo.ht_cached_keys), values, lo, hi, len);
	}
	if (pyo.managed_kind == 2 && (flags & TPF_MANAGED_DICT)) {
		/* 3.12: one slot, a dict pointer, or (values - 1) with bit 0 set */
		__u64 slot = rd64(obj + (__s64)pyo.managed_dict);
		if (slot & 1)
			return scan_keys(rd64(type + pyo.ht_cached_keys), slot + 1, lo, hi, len);
		return dict_get(slot, lo, hi, len);
	}
	return 0;
}

#endif /* EVMBPF_ATTRS_BPF_H */
