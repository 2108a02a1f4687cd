/* Where a compiled function calls another (callsites.c): its call instructions, found by
 * decoding it whole (x86insn.c), for uprobes placed on them rather than on the callee. */
#ifndef EVMBPF_CALLSITES_H
#define EVMBPF_CALLSITES_H

#include <stdint.h>

#include "elfsym.h"
#include "x86insn.h"

#define CALL_SITES_MAX 16

struct call_site {
	uint64_t at;  /* the call instruction (link-time address) */
	uint64_t rsi; /* the constant the instructions before it put in rsi (the second
		       * argument), 0 when they do not say */
};

/* Each instruction of the function [fn, fn + size) of f, first to last: 0 when they end
 * exactly at its end, -1 when one is not known to x86insn.c or runs past it (then none of
 * what was said may be trusted). each may be NULL. */
int elf_function_walk(struct elf_file *f, uint64_t fn, uint64_t size,
		      void (*each)(void *arg, uint64_t at, const struct x86_insn *in), void *arg);
/* The calls (call rel32 to it or to its PLT entry, call *slot(%rip) through its GOT slot)
 * the function [fn, fn + size) makes to the function `callee` of the same file: their
 * count, at most max kept in out; -1 when the function cannot be decoded exactly. */
int elf_call_sites(struct elf_file *f, uint64_t fn, uint64_t size, const char *callee,
		   struct call_site *out, int max);

#endif
