/* Python's dict keys (struct pykey: hashable values of a parsed line, compared and
 * hashed as Python does, so that 1, 1.0 and True are one key) and a map keyed by them. */
#ifndef EVMBPF_READER_KEYMAP_H
#define EVMBPF_READER_KEYMAP_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* A hashable Python value, as a dict or set key. */
enum pykey_kind { PYKEY_NONE, PYKEY_INT, PYKEY_FLOAT, PYKEY_STR, PYKEY_BIGINT };

struct pykey {
	enum pykey_kind kind;
	long long i;
	double d;
	const char *s;     /* PYKEY_STR / PYKEY_BIGINT text, not owned */
	size_t n;
};

/* 0 when v cannot be a key (a list or dict: Python raises TypeError). A missing v
 * is None, as dict.get returns it. */
int pykey_of(const cJSON *v, struct pykey *k);
int pykey_eq(const struct pykey *a, const struct pykey *b);
uint64_t pykey_hash(const struct pykey *k);

/* A map from one or two pykeys to a size_t, with its own copies of key strings. */
struct rd_keymap {
	struct rd_keyslot *slots;
	size_t cap;
	size_t count;
};

/* The value for key (k2 may be NULL), or (size_t)-1. */
size_t rd_keymap_get(const struct rd_keymap *m, const struct pykey *k1, const struct pykey *k2);
/* Insert or replace. */
void rd_keymap_put(struct rd_keymap *m, const struct pykey *k1, const struct pykey *k2, size_t v);
void rd_keymap_free(struct rd_keymap *m);

#endif
