/* Symbols and bytes of an ELF file on disk (libelf). */
#ifndef EVMBPF_ELFSYM_H
#define EVMBPF_ELFSYM_H

#include <stdint.h>
#include <stddef.h>

struct elf_file;

/* NULL with errno set when the file cannot be opened or is not ELF. */
struct elf_file *elf_file_open(const char *path);
void elf_file_close(struct elf_file *f);

/* A defined symbol's value (link-time address): .dynsym first, then .symtab. */
int elf_file_symbol(struct elf_file *f, const char *name, uint64_t *vaddr, uint64_t *size);
int elf_file_vaddr_to_offset(struct elf_file *f, uint64_t vaddr, uint64_t *offset);
/* Copy n bytes at a link-time address (from the file image). */
int elf_file_read(struct elf_file *f, uint64_t vaddr, void *dst, size_t n);
uint64_t elf_file_entry(struct elf_file *f);
/* Lowest PT_LOAD address, page aligned: load bias = mapping start - this. */
uint64_t elf_file_base_vaddr(struct elf_file *f);
/* Link-time addresses where needle occurs in loaded segments; returns the count. */
int elf_file_find(struct elf_file *f, const void *needle, size_t n, uint64_t *out, int max);
/* Is vaddr inside an executable PT_LOAD? */
int elf_file_is_code(struct elf_file *f, uint64_t vaddr);
/* The parts of a function as .symtab names them: `name` and the compiler's `name.SUFFIX`
 * (.cold, .part.N, .isra.N...), each address once. Their count (at most max kept), -1
 * when the file has no .symtab (stripped: parts may exist unnamed). */
int elf_file_function_parts(struct elf_file *f, const char *name, uint64_t *vaddr,
			    uint64_t *size, int max);
/* Where a call to the exported function `name` may go, in a file whose calls to it go
 * through the PLT (x86-64; a library linked without -fno-semantic-interposition): the GOT
 * slots the dynamic linker fills with its address (*nslots, for `call *slot(%rip)`), and
 * the PLT entries jumping through them (returned: their count). At most max of each. */
int elf_file_plt(struct elf_file *f, const char *name, uint64_t *slots, int *nslots,
		 uint64_t *stubs, int max);
/* DT_NEEDED entries containing `part` (e.g. "libpython"); copies the first. */
int elf_file_needed(struct elf_file *f, const char *part, char *dst, size_t cap);

#endif
