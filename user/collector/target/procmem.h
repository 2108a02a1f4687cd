/* Reading the target's memory from user space (process_vm_readv; never writing it)
 * and the CPython objects in it that live long: types, modules, code. */
#ifndef EVMBPF_PROCMEM_H
#define EVMBPF_PROCMEM_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>

#include "pyoffsets.h"

struct pyreader {
	pid_t pid;
	const struct py_offsets *off;
};

/* 0 when all n bytes were read. */
int pm_read(const struct pyreader *r, uint64_t addr, void *dst, size_t n);
uint64_t pm_u64(const struct pyreader *r, uint64_t addr, int *err);

/* A str object's text as UTF-8 (compact strings), at most cap-1 bytes. -1 if not a
 * readable str. */
int py_str(const struct pyreader *r, uint64_t obj, char *dst, size_t cap);
/* type.__name__: tp_name after its last dot for static types, the whole for heap types. */
int py_type_name(const struct pyreader *r, uint64_t type, char *dst, size_t cap);
uint64_t py_type(const struct pyreader *r, uint64_t obj);

/* Iterate a dict's live items in insertion order. Handles combined and split tables
 * (split: keys from `keys`, values from `values`). Stops when fn returns non-zero.
 * Returns -1 when the dict could not be read. */
typedef int (*dict_item_fn)(void *arg, uint64_t key, uint64_t value);
int py_dict_items(const struct pyreader *r, uint64_t dict, dict_item_fn fn, void *arg);
/* dict[key] for a str key; 0 when absent. */
uint64_t py_dict_get_str(const struct pyreader *r, uint64_t dict, const char *key);
/* What type.name is: the first class of its MRO (the first 64) whose __dict__ has it;
 * 0 when none. */
uint64_t py_type_lookup(const struct pyreader *r, uint64_t type, const char *name);
/* getattr-free lookup of an instance attribute in obj.__dict__; 0 when absent. */
uint64_t py_instance_attr(const struct pyreader *r, uint64_t obj, const char *name);
/* The same, for a name looked up in many objects of one process: *interned (0 at first)
 * keeps the name's str object once found, and later look-ups compare the objects' keys
 * with it before their text (a name's text is read only where the object holds another
 * str for it). */
uint64_t py_instance_attr_k(const struct pyreader *r, uint64_t obj, const char *name,
			    uint64_t *interned);
/* 3.11+: obj's attributes as a split table (its class's shared keys, values[0]'s
 * address), when they are kept that way; -1 otherwise (a dict of its own). */
int py_instance_split(const struct pyreader *r, uint64_t obj, uint64_t *keys,
		      uint64_t *values);
/* The index of a str key among a keys object's entries; -1 when absent. */
int py_keys_index(const struct pyreader *r, uint64_t keys, const char *name);

#endif
