#include "elfsym.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

struct elf_file {
	int fd;
	Elf *elf;
	const uint8_t *map;
	size_t size;
};

struct elf_file *elf_file_open(const char *path)
{
	if (elf_version(EV_CURRENT) == EV_NONE) {
		errno = ENOSYS;
		return NULL;
	}
	int fd = open_regular(path); /* a name from the target's maps: no FIFO, no device */
	if (fd < 0)
		return NULL;
	struct stat st;
	if (fstat(fd, &st) || st.st_size < 64) {
		close(fd);
		errno = ENOEXEC;
		return NULL;
	}
	void *map = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
	if (map == MAP_FAILED || !elf || elf_kind(elf) != ELF_K_ELF) {
		if (elf)
			elf_end(elf);
		if (map != MAP_FAILED)
			munmap(map, st.st_size);
		close(fd);
		errno = ENOEXEC;
		return NULL;
	}
	struct elf_file *f = calloc(1, sizeof(*f));
	if (!f) {
		elf_end(elf);
		munmap(map, st.st_size);
		close(fd);
		return NULL;
	}
	f->fd = fd;
	f->elf = elf;
	f->map = map;
	f->size = st.st_size;
	return f;
}

void elf_file_close(struct elf_file *f)
{
	if (!f)
		return;
	elf_end(f->elf);
	munmap((void *)f->map, f->size);
	close(f->fd);
	free(f);
}

static int lookup_in(struct elf_file *f, Elf64_Word type, const char *name, uint64_t *vaddr,
		     uint64_t *size)
{
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(f->elf, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != type || !sh.sh_entsize)
			continue;
		Elf_Data *data = elf_getdata(scn, NULL);
		if (!data)
			continue;
		size_t n = sh.sh_size / sh.sh_entsize;
		for (size_t i = 0; i < n; i++) {
			GElf_Sym sym;
			if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF)
				continue;
			const char *s = elf_strptr(f->elf, sh.sh_link, sym.st_name);
			if (s && !strcmp(s, name)) {
				*vaddr = sym.st_value;
				if (size)
					*size = sym.st_size;
				return 0;
			}
		}
	}
	return -1;
}

int elf_file_symbol(struct elf_file *f, const char *name, uint64_t *vaddr, uint64_t *size)
{
	if (!lookup_in(f, SHT_DYNSYM, name, vaddr, size))
		return 0;
	return lookup_in(f, SHT_SYMTAB, name, vaddr, size);
}

static int each_load(struct elf_file *f, GElf_Phdr *out, size_t i)
{
	size_t n;
	if (elf_getphdrnum(f->elf, &n) || i >= n)
		return -1;
	return gelf_getphdr(f->elf, (int)i, out) ? 0 : -1;
}

int elf_file_vaddr_to_offset(struct elf_file *f, uint64_t vaddr, uint64_t *offset)
{
	GElf_Phdr ph;
	for (size_t i = 0; !each_load(f, &ph, i); i++) {
		if (ph.p_type == PT_LOAD && vaddr >= ph.p_vaddr && vaddr < ph.p_vaddr + ph.p_filesz) {
			*offset = vaddr - ph.p_vaddr + ph.p_offset;
			return 0;
		}
	}
	return -1;
}

int elf_file_read(struct elf_file *f, uint64_t vaddr, void *dst, size_t n)
{
	uint64_t off;
	if (elf_file_vaddr_to_offset(f, vaddr, &off) || off + n > f->size)
		return -1;
	memcpy(dst, f->map + off, n);
	return 0;
}

uint64_t elf_file_entry(struct elf_file *f)
{
	GElf_Ehdr eh;
	return gelf_getehdr(f->elf, &eh) ? eh.e_entry : 0;
}

uint64_t elf_file_base_vaddr(struct elf_file *f)
{
	GElf_Phdr ph;
	uint64_t lowest = UINT64_MAX;
	for (size_t i = 0; !each_load(f, &ph, i); i++)
		if (ph.p_type == PT_LOAD && ph.p_vaddr < lowest)
			lowest = ph.p_vaddr;
	return lowest == UINT64_MAX ? 0 : lowest & ~0xfffULL;
}

int elf_file_find(struct elf_file *f, const void *needle, size_t n, uint64_t *out, int max)
{
	GElf_Phdr ph;
	int found = 0;
	for (size_t i = 0; !each_load(f, &ph, i) && found < max; i++) {
		if (ph.p_type != PT_LOAD || ph.p_offset + ph.p_filesz > f->size)
			continue;
		const uint8_t *start = f->map + ph.p_offset, *p = start;
		const uint8_t *end = start + ph.p_filesz;
		while (found < max && p < end) {
			const uint8_t *hit = memmem(p, end - p, needle, n);
			if (!hit)
				break;
			out[found++] = ph.p_vaddr + (hit - start);
			p = hit + 1;
		}
	}
	return found;
}

int elf_file_is_code(struct elf_file *f, uint64_t vaddr)
{
	GElf_Phdr ph;
	for (size_t i = 0; !each_load(f, &ph, i); i++)
		if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && vaddr >= ph.p_vaddr &&
		    vaddr < ph.p_vaddr + ph.p_memsz)
			return 1;
	return 0;
}

int elf_file_needed(struct elf_file *f, const char *part, char *dst, size_t cap)
{
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(f->elf, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNAMIC)
			continue;
		Elf_Data *data = elf_getdata(scn, NULL);
		for (size_t i = 0; data && i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Dyn dyn;
			if (!gelf_getdyn(data, (int)i, &dyn) || dyn.d_tag != DT_NEEDED)
				continue;
			const char *s = elf_strptr(f->elf, sh.sh_link, dyn.d_un.d_val);
			if (s && strstr(s, part)) {
				snprintf(dst, cap, "%s", s);
				return 0;
			}
		}
	}
	return -1;
}

/* The GOT slots the dynamic linker fills with name's address: .rela.plt's JUMP_SLOT and
 * .rela.dyn's GLOB_DAT relocations naming it (x86-64). */
static int got_slots(struct elf_file *f, const char *name, uint64_t *slots, int max)
{
	int n = 0;
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(f->elf, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_RELA || !sh.sh_entsize)
			continue;
		Elf_Scn *symscn = elf_getscn(f->elf, sh.sh_link);
		GElf_Shdr symsh;
		Elf_Data *data = elf_getdata(scn, NULL);
		Elf_Data *syms = symscn ? elf_getdata(symscn, NULL) : NULL;
		if (!data || !syms || !gelf_getshdr(symscn, &symsh))
			continue;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize && n < max; i++) {
			GElf_Rela r;
			GElf_Sym sym;
			if (!gelf_getrela(data, (int)i, &r) ||
			    (GELF_R_TYPE(r.r_info) != R_X86_64_JUMP_SLOT &&
			     GELF_R_TYPE(r.r_info) != R_X86_64_GLOB_DAT) ||
			    !gelf_getsym(syms, (int)GELF_R_SYM(r.r_info), &sym))
				continue;
			const char *s = elf_strptr(f->elf, symsh.sh_link, sym.st_name);
			if (s && !strcmp(s, name))
				slots[n++] = r.r_offset;
		}
	}
	return n;
}

/* Is there `jmp *slot(%rip)` at a PLT entry's start (after an endbr64, a bnd prefix)?
 * The slot it jumps through, or 0. */
static uint64_t plt_entry_slot(const uint8_t *p, size_t n, uint64_t at)
{
	static const uint8_t endbr64[4] = { 0xf3, 0x0f, 0x1e, 0xfa };
	size_t i = n >= 4 && !memcmp(p, endbr64, 4) ? 4 : 0;
	if (i < n && p[i] == 0xf2)
		i++;
	if (i + 6 > n || p[i] != 0xff || p[i + 1] != 0x25)
		return 0;
	int32_t disp;
	memcpy(&disp, p + i + 2, 4);
	return at + i + 6 + (int64_t)disp;
}

int elf_file_plt(struct elf_file *f, const char *name, uint64_t *slots, int *nslots,
		 uint64_t *stubs, int max)
{
	int nstubs = 0;
	*nslots = got_slots(f, name, slots, max);
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	if (!*nslots || elf_getshdrstrndx(f->elf, &shstrndx))
		return 0;
	while ((scn = elf_nextscn(f->elf, scn))) {
		GElf_Shdr sh;
		const char *sname;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_PROGBITS ||
		    !(sname = elf_strptr(f->elf, shstrndx, sh.sh_name)) ||
		    (strcmp(sname, ".plt") && strcmp(sname, ".plt.sec") && strcmp(sname, ".plt.got")) ||
		    sh.sh_offset + sh.sh_size > f->size)
			continue;
		/* entries of 16 bytes (.plt, .plt.sec, an IBT .plt.got) or 8 (.plt.got) */
		size_t step = sh.sh_entsize == 8 || sh.sh_entsize == 16 ? sh.sh_entsize : 16;
		for (size_t at = 0; at + step <= sh.sh_size && nstubs < max; at += step) {
			uint64_t slot = plt_entry_slot(f->map + sh.sh_offset + at, step,
						       sh.sh_addr + at);
			for (int k = 0; slot && k < *nslots && nstubs < max; k++)
				if (slot == slots[k]) {
					stubs[nstubs++] = sh.sh_addr + at;
					break;
				}
		}
	}
	return nstubs;
}

int elf_file_function_parts(struct elf_file *f, const char *name, uint64_t *vaddr,
			    uint64_t *size, int max)
{
	size_t len = strlen(name);
	int n = -1;
	Elf_Scn *scn = NULL;
	while ((scn = elf_nextscn(f->elf, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_SYMTAB || !sh.sh_entsize)
			continue;
		Elf_Data *data = elf_getdata(scn, NULL);
		if (!data)
			continue;
		n = n < 0 ? 0 : n;
		for (size_t i = 0; i < sh.sh_size / sh.sh_entsize; i++) {
			GElf_Sym sym;
			if (!gelf_getsym(data, (int)i, &sym) || sym.st_shndx == SHN_UNDEF ||
			    GELF_ST_TYPE(sym.st_info) != STT_FUNC || !sym.st_size)
				continue;
			const char *s = elf_strptr(f->elf, sh.sh_link, sym.st_name);
			if (!s || strncmp(s, name, len) || (s[len] && s[len] != '.'))
				continue;
			int seen = 0;
			for (int k = 0; k < n && k < max; k++)
				seen |= vaddr[k] == sym.st_value;
			if (seen)
				continue;
			if (n < max) {
				vaddr[n] = sym.st_value;
				size[n] = sym.st_size;
			}
			n++;
		}
	}
	return n;
}
