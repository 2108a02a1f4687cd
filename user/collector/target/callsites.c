/* Call sites of a function in a compiled one: its bytes, from the ELF file, decoded from
 * its first instruction to its last (a linear sweep: compilers put no data in x86-64
 * code); a call is one only where an instruction starts, and the walk must end exactly at
 * the function's end, or nothing is said. */
#include "callsites.h"

#include <stdlib.h>

int elf_function_walk(struct elf_file *f, uint64_t fn, uint64_t size,
		      void (*each)(void *arg, uint64_t at, const struct x86_insn *in), void *arg)
{
	if (!size || size > (64u << 20))
		return -1;
	uint8_t *code = malloc(size);
	if (!code)
		return -1;
	int rc = -1;
	if (!elf_file_is_code(f, fn) || elf_file_read(f, fn, code, size))
		goto out;
	uint64_t i = 0;
	while (i < size) {
		struct x86_insn in;
		int len = x86_decode(code + i, size - i, fn + i, &in);
		if (len <= 0)
			goto out;
		if (each)
			each(arg, fn + i, &in);
		i += (uint64_t)len;
	}
	rc = i == size ? 0 : -1;
out:
	free(code);
	return rc;
}

struct sites {
	uint64_t callee, stubs[CALL_SITES_MAX], slots[CALL_SITES_MAX];
	int nstubs, nslots;
	uint64_t rsi;  /* the constant in rsi since the last jump or call, or 0 */
	struct call_site *out;
	int n, max;
};

static int among(uint64_t v, const uint64_t *set, int n)
{
	for (int i = 0; i < n; i++)
		if (set[i] == v)
			return 1;
	return 0;
}

static void each_site(void *arg, uint64_t at, const struct x86_insn *in)
{
	struct sites *s = arg;
	int hit = (in->kind == X86_CALL_REL &&
		   (in->target == s->callee || among(in->target, s->stubs, s->nstubs))) ||
		  (in->kind == X86_CALL_SLOT && among(in->target, s->slots, s->nslots));
	if (hit) {
		if (s->n < s->max)
			s->out[s->n] = (struct call_site){ .at = at, .rsi = s->rsi };
		s->n++;
	}
	if (in->kind == X86_SET_RSI)
		s->rsi = in->target;
	else if (in->kind != X86_OTHER)
		s->rsi = 0;
}

int elf_call_sites(struct elf_file *f, uint64_t fn, uint64_t size, const char *callee,
		   struct call_site *out, int max)
{
	struct sites s = { .out = out, .max = max };
	if (elf_file_symbol(f, callee, &s.callee, NULL))
		return -1;
	s.nstubs = elf_file_plt(f, callee, s.slots, &s.nslots, s.stubs, CALL_SITES_MAX);
	if (elf_function_walk(f, fn, size, each_site, &s))
		return -1;
	return s.n;
}
