/* What --cupti's agent needs of its target, read without loading anything: the newest
 * glibc symbol version the agent's ELF asks for (its version needs, .gnu.version_r)
 * against the newest the target's libc defines (.gnu.version_d of the libc it has
 * mapped), and a libcupti of CUDA 12 or 13: mapped by the
 * target, or where the agent looks for one (the wheels under the site-packages the
 * target has mapped, a CUDA toolkit's). */
#include "agent_needs.h"

#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gelf.h>
#include <libelf.h>

#include "procmaps.h"
#include "util.h"

int cupti_agent_path(char *out, size_t size)
{
	const char *given = getenv("EVMBPF_CUPTI_AGENT");
	if (given && *given) {
		snprintf(out, size, "%s", given);
		return access(out, R_OK);
	}
	char exe[PATH_MAX - 64];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -1;
	exe[n] = 0;
	char *slash = strrchr(exe, '/');
	if (!slash)
		return -1;
	*slash = 0;
	snprintf(out, size, "%s/evmbpf-cupti.so", exe);
	if (!access(out, R_OK))
		return 0;
	snprintf(out, size, "%s/../lib/evmbpf/evmbpf-cupti.so", exe);
	return access(out, R_OK);
}

/* "GLIBC_2.34" -> 2034000 (major, minor, patch); 0 if not a GLIBC_ version */
static long glibc_rank(const char *name)
{
	unsigned a = 0, b = 0, c = 0;
	if (strncmp(name, "GLIBC_", 6) || sscanf(name + 6, "%u.%u.%u", &a, &b, &c) < 2)
		return 0;
	return (long)a * 1000000 + (long)b * 1000 + c;
}

/* The newest GLIBC_ version path defines (need 0) or needs of libc.so.6 (need 1):
 * its rank, 0 when none, -1 when the file cannot be read as ELF. */
static long glibc_version_of(const char *path, int need)
{
	int fd = open_regular(path); /* the target's libc, by its maps' name */
	if (fd < 0)
		return -1;
	elf_version(EV_CURRENT);
	Elf *e = elf_begin(fd, ELF_C_READ, NULL);
	long best = e ? 0 : -1;
	Elf_Scn *scn = NULL;
	while (e && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		if (!gelf_getshdr(scn, &sh) ||
		    sh.sh_type != (need ? SHT_GNU_verneed : SHT_GNU_verdef))
			continue;
		Elf_Data *d = elf_getdata(scn, NULL);
		size_t off = 0;
		for (unsigned i = 0; d && i < sh.sh_info; i++) {
			size_t aux;
			unsigned cnt, next;
			int want = 1;
			if (need) {
				GElf_Verneed vn;
				if (!gelf_getverneed(d, (int)off, &vn))
					break;
				const char *file = elf_strptr(e, sh.sh_link, vn.vn_file);
				want = file && !strcmp(file, "libc.so.6");
				aux = off + vn.vn_aux, cnt = vn.vn_cnt, next = vn.vn_next;
			} else {
				GElf_Verdef vd;
				if (!gelf_getverdef(d, (int)off, &vd))
					break;
				aux = off + vd.vd_aux, cnt = vd.vd_cnt > 1 ? 1 : vd.vd_cnt, next = vd.vd_next;
			}
			for (unsigned k = 0; want && k < cnt; k++) {
				size_t name;
				unsigned anext;
				if (need) {
					GElf_Vernaux a;
					if (!gelf_getvernaux(d, (int)aux, &a))
						break;
					name = a.vna_name, anext = a.vna_next;
				} else {
					GElf_Verdaux a;
					if (!gelf_getverdaux(d, (int)aux, &a))
						break;
					name = a.vda_name, anext = a.vda_next;
				}
				const char *s = elf_strptr(e, sh.sh_link, name);
				long r = s ? glibc_rank(s) : 0;
				if (r > best)
					best = r;
				aux += anext;
			}
			if (!next)
				break;
			off += next;
		}
	}
	if (e)
		elf_end(e);
	close(fd);
	return best;
}

/* glibc's release as its banner says it ("... release version 2.36."): its rank, or 0 */
static long glibc_release(const char *path)
{
	FILE *f = fopen(path, "re");
	static char buf[1 << 16];
	static const char key[] = "release version ";
	long r = 0;
	size_t n, keep = 0;
	while (f && !r && (n = fread(buf + keep, 1, sizeof(buf) - keep, f)) > 0) {
		n += keep;
		char *at = memmem(buf, n, key, sizeof(key) - 1);
		unsigned a, b;
		if (at && at + sizeof(key) + 8 < buf + n &&
		    sscanf(at + sizeof(key) - 1, "%u.%u", &a, &b) == 2)
			r = (long)a * 1000000 + (long)b * 1000;
		keep = n > 64 ? 64 : n;   /* a banner across two reads */
		memmove(buf, buf + n - keep, keep);
	}
	if (f)
		fclose(f);
	return r;
}

static void rank_text(long r, char *out, size_t size)
{
	if (r % 1000)
		snprintf(out, size, "%ld.%ld.%ld", r / 1000000, r / 1000 % 1000, r % 1000);
	else
		snprintf(out, size, "%ld.%ld", r / 1000000, r / 1000 % 1000);
}

/* the CUDA major of a libcupti's file name (libcupti.so.12, libcupti.so.13.0.48), or 0 */
static int cupti_major(const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (strncmp(base, "libcupti.so.", 12))
		return 0;
	return atoi(base + 12);
}

struct cupti_maps {
	char *lib;
	size_t size;
	const char **how;
	char sites[8][PATH_MAX]; /* the site-packages folders it maps files from */
	int nsites;
};

static int cupti_mapped(void *arg, const struct proc_mapping *m)
{
	struct cupti_maps *c = arg;
	if (m->path[0] != '/')
		return 0;
	int major = cupti_major(m->path);
	if (major == 12 || major == 13) {
		snprintf(c->lib, c->size, "%s", m->path);
		*c->how = " (mapped)";
		return 1;
	}
	const char *sp = strstr(m->path, "-packages/");
	if (sp && c->nsites < 8) {
		int n = (int)(sp - m->path) + 10, seen = 0; /* up to its slash */
		if (n >= PATH_MAX)
			return 0;
		for (int i = 0; i < c->nsites; i++)
			seen |= !strncmp(c->sites[i], m->path, n) && !c->sites[i][n];
		if (!seen)
			snprintf(c->sites[c->nsites++], PATH_MAX, "%.*s", n, m->path);
	}
	return 0;
}

/* A libcupti of CUDA 12 or 13 the process has mapped, else one where the agent looks:
 * under each site-packages it has mapped, then a toolkit's; how says which. */
static int find_cupti(pid_t pid, char *lib, size_t size, const char **how)
{
	struct cupti_maps c = { lib, size, how, {{0}}, 0 };
	int found = proc_each_mapping(pid, cupti_mapped, &c) > 0;
	char (*sites)[PATH_MAX] = c.sites;
	int nsites = c.nsites;
	if (found)
		return 1;
	static const char *const under_site[] = { "nvidia/cuda_cupti/lib/libcupti.so.1*",
		"nvidia/cu1*/lib/libcupti.so.1*", "torch/lib/libcupti.so.1*" };
	static const char *const toolkit[] = { "/usr/local/cuda*/lib*/libcupti.so.1*",
		"/usr/local/cuda*/extras/CUPTI/lib64/libcupti.so.1*" };
	char pattern[PATH_MAX + 128];
	for (int i = 0; !found && i < nsites + 2; i++) {
		for (size_t k = 0; !found && k < (i < nsites ? 3 : 1); k++) {
			/* the maps' paths are as this process sees them; a toolkit's, as the
			 * target does */
			if (i < nsites)
				snprintf(pattern, sizeof(pattern), "%.3900s%s", sites[i], under_site[k]);
			else
				snprintf(pattern, sizeof(pattern), "/proc/%d/root%s", pid,
					 toolkit[i - nsites]);
			glob_t g;
			if (glob(pattern, 0, NULL, &g))
				continue;
			for (size_t j = 0; !found && j < g.gl_pathc; j++) {
				int m = cupti_major(g.gl_pathv[j]);
				if (m == 12 || m == 13) {
					const char *name = g.gl_pathv[j];
					if (i >= nsites)   /* the name as the process sees it */
						name = strstr(name + 6, "/root/") + 5;
					snprintf(lib, size, "%s", name);
					*how = i < nsites ? " (in its wheels)"
							  : " (a toolkit's: EVMBPF_CUPTI_LIB=PATH unless "
							    "the loader finds it)";
					found = 1;
				}
			}
			globfree(&g);
		}
	}
	return found;
}

/* the path of the process's libc (libc.so.6, libc-2.N.so) into arg (PATH_MAX) */
static int libc_mapped(void *arg, const struct proc_mapping *m)
{
	if (m->path[0] != '/')
		return 0;
	const char *base = strrchr(m->path, '/') + 1;
	if (strcmp(base, "libc.so.6") && (strncmp(base, "libc-2.", 7) || !strstr(base, ".so")))
		return 0;
	snprintf(arg, PATH_MAX, "%s", m->path);
	return 1;
}

int agent_needs_line(pid_t pid, char *out, size_t size)
{
	char agent[PATH_MAX];
	if (cupti_agent_path(agent, sizeof(agent))) {
		snprintf(out, size, "CUPTI agent: no evmbpf-cupti.so beside evmbpf (nor "
			 "EVMBPF_CUPTI_AGENT): --cupti cannot run here (make static: build/evmbpf-gpu/)");
		return 0;
	}
	long need = glibc_version_of(agent, 1);
	/* the target's libc, as it has it mapped */
	char libc[PATH_MAX] = "";
	proc_each_mapping(pid, libc_mapped, libc);
	long have = -1, release = 0;   /* its newest symbol version; its release */
	if (libc[0]) {   /* the maps' path as this process sees it, else from the target's root */
		char inside[PATH_MAX + 32];
		snprintf(inside, sizeof(inside), "/proc/%d/root%s", pid, libc);
		const char *at = libc;
		have = glibc_version_of(at, 0);
		if (have <= 0)
			have = glibc_version_of(at = inside, 0);
		release = have > 0 ? glibc_release(at) : 0;
	}
	char needs[32] = "?", has[32] = "?", glibc[PATH_MAX + 160];
	/* a launch with --cupti loads it into the command: what it needs of that process */
	if (need > 0)
		rank_text(need, needs, sizeof(needs));
	if (have > 0)
		rank_text(release ? release : have, has, sizeof(has));
	int glibc_ok = need >= 0 && have > 0 && have >= need;
	if (need < 0)
		snprintf(glibc, sizeof(glibc), "cannot be read as ELF");
	else if (have <= 0)
		snprintf(glibc, sizeof(glibc), "needs glibc >= %s, the target's is not known (%s)",
			 needs, libc[0] ? libc : "no libc mapped");
	else
		snprintf(glibc, sizeof(glibc), "needs glibc >= %s, the target has %s (%s)%s", needs,
			 has, libc, glibc_ok ? "" : ": too old, the agent would not load");
	char lib[PATH_MAX];
	const char *how = "";
	int cupti_ok = find_cupti(pid, lib, sizeof(lib), &how);
	snprintf(out, size, "CUPTI agent: %s %s; %s%s%s", agent, glibc,
		 cupti_ok ? "libcupti " : "no libcupti of CUDA 12 or 13 mapped or found in its wheels "
					  "or a toolkit (EVMBPF_CUPTI_LIB=PATH)",
		 cupti_ok ? lib : "", cupti_ok ? how : "");
	return glibc_ok && cupti_ok;
}
