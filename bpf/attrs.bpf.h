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

static __always_inline int key_matches(__u64 key, __u64 lo, __u64 hi, __u32 len)
{
	__u64 klen = rd64(key + pyo.str_length);
	__u32 state = (__u32)rd64(key + pyo.str_state);
	if (klen != len || !((state >> 6) & 1) || !((state >> 5) & 1))
		return 0;
	__u64 d[2] = {};
	if (bpf_probe_read_user(d, 16, (void *)(key + pyo.str_ascii_data)))
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
 * entry's own value in *value; -1 when it is not there or an entry cannot be read. */
static __always_inline __s32 key_index(__u64 keys, __u64 lo, __u64 hi, __u32 len, __u64 *value)
{
	__u64 nentries = rd64(keys + pyo.dk_nentries);
	__u8 esize8, koff8;
	__u64 entries = dict_entries(keys, &esize8, &koff8);
	__u32 esize = esize8, koff = koff8;
	for (__u32 i = 0; i < ATTR_SCAN; i++) {
		if (i >= nentries)
			break;
		__u64 kv[2] = {};
		if (bpf_probe_read_user(kv, 16, (void *)(entries + i * esize + koff)))
			return -1;
		if (kv[0] && key_matches(kv[0], lo, hi, len)) {
			*value = kv[1];
			return i;
		}
	}
	return -1;
}

/* Global (split.bpf.h): verified once for any name, not once for each of get_attr's
 * names and dict layouts. */
__noinline __s32 key_find(__u64 keys, __u64 lo, __u64 hi, __u32 len, __u64 *value)
{
	if (!value)
		return -1;
	return key_index(keys, lo, hi, len, value);
}

/* Scan a keys object's entries for the name; the value from `values` (split: values[i])
 * or from the entry itself (combined). */
static __always_inline __u64 scan_keys(__u64 keys, __u64 values, __u64 lo, __u64 hi, __u32 len)
{
	__u64 value = 0;
	__s32 i = key_find(keys, lo, hi, len, &value);
	if (i < 0 || i >= ATTR_SCAN)
		return 0;
	return values ? rd64(values + pyo.dictvalues_values + i * 8) : value;
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
