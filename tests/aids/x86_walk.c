/* x86-walk FILE FUNCTION [CALLEE]: the instruction boundaries x86insn.c finds in an ELF
 * file's function (callsites.c's walk), one hex address a line, then `site ADDR RSI` for
 * each of its calls to CALLEE; `refused` when the walk is refused. tests/test_phases.py
 * compares them with objdump's. */
#include "aids.h"
#include "callsites.h"

#include <inttypes.h>
#include <stdio.h>

static void print_insn(void *arg, uint64_t at, const struct x86_insn *in)
{
	printf("%" PRIx64 "\n", at);
}

int x86_walk_main(int argc, char **argv)
{
	struct elf_file *f = elf_file_open(argv[0]);
	uint64_t fn, size;
	if (!f || elf_file_symbol(f, argv[1], &fn, &size)) {
		fprintf(stderr, "x86-walk: no %s in %s\n", argv[1], argv[0]);
		return 2;
	}
	if (elf_function_walk(f, fn, size, print_insn, NULL)) {
		printf("refused\n");
	} else if (argc > 2) {
		struct call_site cs[CALL_SITES_MAX];
		int n = elf_call_sites(f, fn, size, argv[2], cs, CALL_SITES_MAX);
		for (int i = 0; i < n && i < CALL_SITES_MAX; i++)
			printf("site %" PRIx64 " %" PRIx64 "\n", cs[i].at, cs[i].rsi);
	}
	elf_file_close(f);
	return 0;
}
