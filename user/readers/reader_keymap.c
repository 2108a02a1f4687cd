/* Python's dict keys and a map keyed by them: see reader_keymap.h. */
#include "reader_keymap.h"

#include <stdlib.h>
#include <string.h>

#include "reader_pyv.h"
#include "util.h"

int pykey_of(const cJSON *v, struct pykey *k)
{
	memset(k, 0, sizeof(*k));
	switch (pyv_kind(v)) {
	case PYV_MISSING:
	case PYV_NONE:
		k->kind = PYKEY_NONE;
		return 1;
	case PYV_BOOL:
	case PYV_INT:
		if (pyv_int(v, &k->i)) {
			k->kind = PYKEY_INT;
		} else {
			k->kind = PYKEY_BIGINT;
			k->s = v->valuestring;
			k->n = strlen(v->valuestring);
		}
		return 1;
	case PYV_FLOAT:
		if (pyv_float_as_int(v->valuedouble, &k->i)) {
			k->kind = PYKEY_INT;
		} else {
			k->kind = PYKEY_FLOAT;
			k->d = v->valuedouble;
		}
		return 1;
	case PYV_STR:
		k->kind = PYKEY_STR;
		k->s = v->valuestring;
		k->n = strlen(v->valuestring);
		return 1;
	default:
		return 0;
	}
}

int pykey_eq(const struct pykey *a, const struct pykey *b)
{
	if (a->kind != b->kind)
		return 0;
	switch (a->kind) {
	case PYKEY_NONE: return 1;
	case PYKEY_INT: return a->i == b->i;
	case PYKEY_FLOAT: return a->d == b->d;
	default: return a->n == b->n && memcmp(a->s, b->s, a->n) == 0;
	}
}

static uint64_t fnv(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

uint64_t pykey_hash(const struct pykey *k)
{
	uint64_t h = fnv(14695981039346656037ULL, &k->kind, sizeof(k->kind));

	switch (k->kind) {
	case PYKEY_NONE: return h;
	case PYKEY_INT: return fnv(h, &k->i, sizeof(k->i));
	case PYKEY_FLOAT: return fnv(h, &k->d, sizeof(k->d));
	default: return fnv(h, k->s, k->n);
	}
}

struct rd_keyslot {
	int used;
	int pair;
	uint64_t hash;
	struct pykey k[2];
	size_t value;
};

static uint64_t pair_hash(const struct pykey *k1, const struct pykey *k2)
{
	uint64_t h = pykey_hash(k1);

	return k2 ? (h * 31) ^ pykey_hash(k2) ^ 0x9e3779b97f4a7c15ULL : h;
}

static struct rd_keyslot *find_slot(const struct rd_keymap *m, uint64_t h,
				    const struct pykey *k1, const struct pykey *k2)
{
	size_t i = h & (m->cap - 1);

	for (;;) {
		struct rd_keyslot *s = &m->slots[i];

		if (!s->used)
			return s;
		if (s->hash == h && s->pair == (k2 != NULL) && pykey_eq(&s->k[0], k1) &&
		    (!k2 || pykey_eq(&s->k[1], k2)))
			return s;
		i = (i + 1) & (m->cap - 1);
	}
}

size_t rd_keymap_get(const struct rd_keymap *m, const struct pykey *k1, const struct pykey *k2)
{
	struct rd_keyslot *s;

	if (!m->cap)
		return (size_t)-1;
	s = find_slot(m, pair_hash(k1, k2), k1, k2);
	return s->used ? s->value : (size_t)-1;
}

static void grow(struct rd_keymap *m)
{
	struct rd_keymap bigger = { NULL, m->cap ? m->cap * 2 : 64, m->count };

	bigger.slots = xcalloc(bigger.cap, sizeof(*bigger.slots));
	for (size_t i = 0; i < m->cap; i++) {
		struct rd_keyslot *s = &m->slots[i];

		if (s->used)
			*find_slot(&bigger, s->hash, &s->k[0], s->pair ? &s->k[1] : NULL) = *s;
	}
	free(m->slots);
	*m = bigger;
}

static void own_key(struct pykey *dst, const struct pykey *src)
{
	*dst = *src;
	if (src->kind == PYKEY_STR || src->kind == PYKEY_BIGINT)
		dst->s = xstrndup(src->s, src->n);
}

void rd_keymap_put(struct rd_keymap *m, const struct pykey *k1, const struct pykey *k2, size_t v)
{
	uint64_t h = pair_hash(k1, k2);
	struct rd_keyslot *s;

	if ((m->count + 1) * 2 > m->cap)
		grow(m);
	s = find_slot(m, h, k1, k2);
	if (!s->used) {
		s->used = 1;
		s->pair = k2 != NULL;
		s->hash = h;
		own_key(&s->k[0], k1);
		if (k2)
			own_key(&s->k[1], k2);
		m->count++;
	}
	s->value = v;
}

void rd_keymap_free(struct rd_keymap *m)
{
	for (size_t i = 0; i < m->cap; i++) {
		if (!m->slots[i].used)
			continue;
		for (int k = 0; k < 2; k++)
			if (m->slots[i].k[k].kind == PYKEY_STR || m->slots[i].k[k].kind == PYKEY_BIGINT)
				free((char *)m->slots[i].k[k].s);
	}
	free(m->slots);
	memset(m, 0, sizeof(*m));
}
