#include "procmem.h"

#include "pyfmt.h"
#include "util.h"

#include <errno.h>
#include <string.h>
#include <stdio.h>
#include <sys/uio.h>

#define TPF_MANAGED_DICT (1UL << 4)
#define TPF_HEAPTYPE (1UL << 9)

int pm_read(const struct pyreader *r, uint64_t addr, void *dst, size_t n)
{
	if (!addr)
		return -1;
	struct iovec local = { dst, n };
	struct iovec remote = { (void *)(uintptr_t)addr, n };
	ssize_t got = process_vm_readv(r->pid, &local, 1, &remote, 1, 0);
	if (got != (ssize_t)n && verbose > 2)
		debugx("read of %zu bytes at %#lx in %d: %zd (%s)", n, (unsigned long)addr, r->pid, got,
		       strerror(errno));
	return got == (ssize_t)n ? 0 : -1;
}

uint64_t pm_u64(const struct pyreader *r, uint64_t addr, int *err)
{
	uint64_t v = 0;
	if (pm_read(r, addr, &v, sizeof(v)) && err)
		*err = 1;
	return v;
}

uint64_t py_type(const struct pyreader *r, uint64_t obj)
{
	return pm_u64(r, obj + 8, NULL);
}

int py_str(const struct pyreader *r, uint64_t obj, char *dst, size_t cap)
{
	const struct py_offsets *o = r->off;
	int err = 0;
	if (!cap)
		return -1;
	dst[0] = 0;
	uint64_t len = pm_u64(r, obj + o->str_length, &err);
	uint32_t state = (uint32_t)pm_u64(r, obj + o->str_state, &err);
	unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
	if (err || !compact || (kind != 1 && kind != 2 && kind != 4) || len > (1u << 20))
		return -1;
	uint64_t data = obj + (ascii ? o->str_ascii_data : o->str_compact_data);
	size_t want = len < cap ? len : cap - 1;
	uint8_t raw[4096];
	size_t out = 0;
	for (size_t i = 0; i < want;) {
		size_t chunk = want - i;
		if (chunk * kind > sizeof(raw))
			chunk = sizeof(raw) / kind;
		if (pm_read(r, data + i * kind, raw, chunk * kind))
			return -1;
		for (size_t j = 0; j < chunk; j++) {
			uint32_t c = kind == 1 ? raw[j] : kind == 2 ? (uint32_t)raw[2 * j] | raw[2 * j + 1] << 8
							      : (uint32_t)raw[4 * j] | raw[4 * j + 1] << 8 |
								(uint32_t)raw[4 * j + 2] << 16 | (uint32_t)raw[4 * j + 3] << 24;
			char enc[4];
			size_t n = pyfmt_utf8_encode(c, enc);
			if (out + n >= cap)
				goto done;
			memcpy(dst + out, enc, n);
			out += n;
		}
		i += chunk;
	}
done:
	dst[out] = 0;
	return (int)out;
}

int py_type_name(const struct pyreader *r, uint64_t type, char *dst, size_t cap)
{
	const struct py_offsets *o = r->off;
	int err = 0;
	uint64_t flags = pm_u64(r, type + o->tp_flags, &err);
	uint64_t name = pm_u64(r, type + o->tp_name, &err);
	char tmp[256];
	if (err || pm_read(r, name, tmp, 1))
		return -1;
	/* tp_name is a C string; read it in small steps to stay inside mapped memory */
	size_t n = 0;
	while (n < sizeof(tmp) - 1) {
		size_t step = 16;
		if (n + step > sizeof(tmp) - 1)
			step = sizeof(tmp) - 1 - n;
		if (pm_read(r, name + n, tmp + n, step)) {
			/* fall back to bytewise near a page end */
			if (pm_read(r, name + n, tmp + n, 1))
				break;
			step = 1;
		}
		void *z = memchr(tmp + n, 0, step);
		n += step;
		if (z)
			break;
	}
	tmp[n < sizeof(tmp) ? n : sizeof(tmp) - 1] = 0;
	const char *base = tmp;
	if (!(flags & TPF_HEAPTYPE)) {
		const char *dot = strrchr(tmp, '.');
		if (dot)
			base = dot + 1;
	}
	snprintf(dst, cap, "%s", base);
	return 0;
}

struct keys_layout {
	uint64_t entries;
	uint64_t nentries;
	unsigned esize, koff, voff;
};

static int keys_layout(const struct pyreader *r, uint64_t keys, struct keys_layout *k)
{
	const struct py_offsets *o = r->off;
	int err = 0;
	k->nentries = pm_u64(r, keys + o->dk_nentries, &err);
	if (o->dk_size) {
		uint64_t size = pm_u64(r, keys + o->dk_size, &err);
		uint64_t ib = size <= 0xff ? 1 : size <= 0xffff ? 2 : size <= 0xffffffffULL ? 4 : 8;
		k->entries = keys + o->dk_indices + size * ib;
		k->esize = 24;
		k->koff = 8;
		k->voff = 16;
	} else {
		uint8_t log2_index = 0, kind = 0;
		if (pm_read(r, keys + o->dk_log2_index_bytes, &log2_index, 1) ||
		    pm_read(r, keys + o->dk_kind, &kind, 1))
			err = 1;
		k->entries = keys + o->dk_indices + (1ULL << (log2_index & 63));
		k->esize = kind ? 16 : 24;
		k->koff = kind ? 0 : 8;
		k->voff = kind ? 8 : 16;
	}
	if (k->nentries > (1u << 24))
		err = 1;
	return err ? -1 : 0;
}

/* values[i] of a split table; the array starts `values_off` into the values block. The
 * keys' entries and the values are read 64 at a time, as a combined table's entries are. */
static int split_items(const struct pyreader *r, uint64_t keys, uint64_t values,
		       unsigned values_off, dict_item_fn fn, void *arg)
{
	struct keys_layout k;
	if (keys_layout(r, keys, &k))
		return -1;
	uint8_t chunk[24 * 64];
	uint64_t vals[64];
	for (uint64_t i = 0; i < k.nentries; i += 64) {
		uint64_t n = k.nentries - i < 64 ? k.nentries - i : 64;
		if (pm_read(r, k.entries + i * k.esize, chunk, n * k.esize) ||
		    pm_read(r, values + values_off + i * 8, vals, n * 8))
			return -1;
		for (uint64_t j = 0; j < n; j++) {
			uint64_t key;
			memcpy(&key, chunk + j * k.esize + k.koff, 8);
			if (key && vals[j] && fn(arg, key, vals[j]))
				return 0;
		}
	}
	return 0;
}

int py_dict_items(const struct pyreader *r, uint64_t dict, dict_item_fn fn, void *arg)
{
	const struct py_offsets *o = r->off;
	int err = 0;
	uint64_t keys = pm_u64(r, dict + o->dict_keys, &err);
	uint64_t values = pm_u64(r, dict + o->dict_values, &err);
	if (err || !keys)
		return -1;
	if (values)
		return split_items(r, keys, values, o->dictvalues_values, fn, arg);
	struct keys_layout k;
	if (keys_layout(r, keys, &k))
		return -1;
	uint8_t chunk[24 * 64];
	for (uint64_t i = 0; i < k.nentries; i += 64) {
		uint64_t n = k.nentries - i < 64 ? k.nentries - i : 64;
		if (pm_read(r, k.entries + i * k.esize, chunk, n * k.esize))
			return -1;
		for (uint64_t j = 0; j < n; j++) {
			uint64_t key, val;
			memcpy(&key, chunk + j * k.esize + k.koff, 8);
			memcpy(&val, chunk + j * k.esize + k.voff, 8);
			if (key && val && fn(arg, key, val))
				return 0;
		}
	}
	return 0;
}

struct str_lookup {
	const struct pyreader *r;
	const char *want;
	uint64_t found;
	uint64_t *interned; /* the key object found before (0: none yet), or NULL */
	int by_ptr;         /* this pass compares key objects, not their text */
};

static int match_key(void *arg, uint64_t key, uint64_t value)
{
	struct str_lookup *l = arg;
	char text[128];
	if (l->by_ptr) {
		if (key != *l->interned)
			return 0;
	} else if (py_str(l->r, key, text, sizeof(text)) < 0 || strcmp(text, l->want)) {
		return 0;
	}
	l->found = value;
	if (l->interned)
		*l->interned = key;
	return 1;
}

/* The items of a dict (split: keys and values given; else the dict) through match_key:
 * first by the key object found before, when there is one (attribute names are interned:
 * the instances of a class share their names' str objects, and a match costs no read of
 * a name), then by text. */
static void lookup_items(const struct pyreader *r, uint64_t dict, uint64_t keys,
			 uint64_t values, unsigned values_off, struct str_lookup *l)
{
	for (int pass = l->interned && *l->interned ? 0 : 1; pass < 2 && !l->found; pass++) {
		l->by_ptr = !pass;
		if (dict)
			py_dict_items(r, dict, match_key, l);
		else
			split_items(r, keys, values, values_off, match_key, l);
	}
}

uint64_t py_dict_get_str(const struct pyreader *r, uint64_t dict, const char *key)
{
	struct str_lookup l = { r, key, 0, NULL, 0 };
	if (dict)
		lookup_items(r, dict, 0, 0, 0, &l);
	return l.found;
}

uint64_t py_type_lookup(const struct pyreader *r, uint64_t type, const char *name)
{
	int err = 0;
	uint64_t mro = pm_u64(r, type + r->off->tp_mro, &err);
	int64_t n = err || !mro ? 0 : (int64_t)pm_u64(r, mro + 16, &err);
	for (int64_t i = 0; !err && i < n && i < 64; i++) {
		uint64_t base = pm_u64(r, mro + r->off->tuple_items + 8 * (uint64_t)i, &err);
		uint64_t dict = err ? 0 : pm_u64(r, base + r->off->tp_dict, &err);
		uint64_t f = err || !dict ? 0 : py_dict_get_str(r, dict, name);
		if (f)
			return f;
	}
	return 0;
}

uint64_t py_instance_attr(const struct pyreader *r, uint64_t obj, const char *name)
{
	return py_instance_attr_k(r, obj, name, NULL);
}

uint64_t py_instance_attr_k(const struct pyreader *r, uint64_t obj, const char *name,
			    uint64_t *interned)
{
	const struct py_offsets *o = r->off;
	int err = 0;
	uint64_t type = py_type(r, obj);
	uint64_t flags = pm_u64(r, type + o->tp_flags, &err);
	if (err)
		return 0;
	struct str_lookup l = { r, name, 0, interned, 0 };

	if (!(flags & TPF_MANAGED_DICT) || o->version < 311) {
		int64_t dictoffset = (int64_t)pm_u64(r, type + o->tp_dictoffset, &err);
		if (err || dictoffset <= 0)
			return 0;
		uint64_t dict = pm_u64(r, obj + dictoffset, NULL);
		if (dict)
			lookup_items(r, dict, 0, 0, 0, &l);
		return l.found;
	}
	uint64_t slot = pm_u64(r, obj + o->managed_dict, &err);
	uint64_t keys = pm_u64(r, type + o->ht_cached_keys, &err);
	if (err)
		return 0;
	if (o->version == 311) {
		uint64_t values = slot ? 0 : pm_u64(r, obj + o->managed_values, &err);
		if (slot)
			lookup_items(r, slot, 0, 0, 0, &l);
		else if (!err && values && keys)
			lookup_items(r, 0, keys, values, 0, &l);
		return l.found;
	}
	if (o->version == 312) {
		/* the slot holds (values - 1) | 1: values = slot + 1; else the dict */
		if ((slot & 1) && keys)
			lookup_items(r, 0, keys, slot + 1, 0, &l);
		else if (slot && !(slot & 1))
			lookup_items(r, slot, 0, 0, 0, &l);
		return l.found;
	}
	/* 3.13+: the managed dict when one was made, else values inline after the object */
	if (slot) {
		lookup_items(r, slot, 0, 0, 0, &l);
		return l.found;
	}
	/* Py_TPFLAGS_INLINE_VALUES; the block is {capacity, size, embedded, valid, values[]} */
	if (!(flags & (1UL << 2)))
		return 0;
	uint64_t basicsize = pm_u64(r, type + o->tp_basicsize, &err);
	uint8_t valid[4];
	if (err || pm_read(r, obj + basicsize, valid, sizeof(valid)) || !valid[3] || !keys)
		return 0;
	lookup_items(r, 0, keys, obj + basicsize, o->dictvalues_values, &l);
	return l.found;
}

int py_instance_split(const struct pyreader *r, uint64_t obj, uint64_t *keys,
		      uint64_t *values)
{
	const struct py_offsets *o = r->off;
	int err = 0;
	uint64_t type = py_type(r, obj);
	uint64_t flags = pm_u64(r, type + o->tp_flags, &err);
	if (err || !(flags & TPF_MANAGED_DICT) || o->version < 311)
		return -1;
	uint64_t slot = pm_u64(r, obj + o->managed_dict, &err);
	*keys = pm_u64(r, type + o->ht_cached_keys, &err);
	if (err || !*keys)
		return -1;
	if (o->version == 311) {
		*values = slot ? 0 : pm_u64(r, obj + o->managed_values, &err);
	} else if (o->version == 312) {
		*values = (slot & 1) ? slot + 1 : 0;
	} else {
		uint64_t basicsize = pm_u64(r, type + o->tp_basicsize, &err);
		uint8_t valid[4];
		if (slot || !(flags & (1UL << 2)) || err ||
		    pm_read(r, obj + basicsize, valid, sizeof(valid)) || !valid[3])
			return -1;
		*values = obj + basicsize + o->dictvalues_values;
	}
	return err || !*values ? -1 : 0;
}

int py_keys_index(const struct pyreader *r, uint64_t keys, const char *name)
{
	struct keys_layout k;
	if (keys_layout(r, keys, &k))
		return -1;
	for (uint64_t i = 0; i < k.nentries && i < 256; i++) {
		char text[128];
		uint64_t key = pm_u64(r, k.entries + i * k.esize + k.koff, NULL);
		if (key && py_str(r, key, text, sizeof(text)) >= 0 && !strcmp(text, name))
			return (int)i;
	}
	return -1;
}
