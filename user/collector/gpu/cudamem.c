/* cudamem: the CUDA caching allocator's own counters, found from outside.
 *
 * torch.cuda.memory_stats_as_nested_dict() reads DeviceCachingAllocator::stats of the
 * current device. The chain to it, all read from the target (never written):
 *   - c10::cuda::CUDACachingAllocator::allocator, exported by libc10_cuda.so: a
 *     std::atomic<CUDAAllocator *>, set when the library loads;
 *   - the object's dynamic type, by the RTTI name under its vtable (vtable[-1] is the
 *     typeinfo, whose +8 is the mangled name): NativeCachingAllocator keeps the stats,
 *     CudaMallocAsyncAllocator (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync) does not;
 *   - NativeCachingAllocator::device_allocator, a std::vector<DeviceCachingAllocator *>
 *     (unique_ptrs) at a build-specific offset, empty until CUDA's lazy init: found as a
 *     {begin, end, capacity} triple whose elements each start with a glibc recursive
 *     mutex (kind 1 at +16) followed by a DeviceStats whose StatArrays add up
 *     (AGGREGATE = SMALL_POOL + LARGE_POOL, 0 <= current <= peak);
 *   - DeviceStats at +40 of each: allocated_bytes[AGGREGATE] {current, peak} at +384,
 *     reserved_bytes[AGGREGATE].current at +480.
 * The BPF side (bpf/cudamem.bpf.h) reads those two places at each module call. */
#include "cudamem.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "elfsym.h"
#include "ldso.h"
#include "procstate.h"
#include "jsonw.h"
#include "procmem.h"

#define SYM_ALLOCATOR "_ZN3c104cuda20CUDACachingAllocator9allocatorE"
#define RTTI_NATIVE "N3c104cuda20CUDACachingAllocator6Native22NativeCachingAllocatorE"
#define RTTI_ASYNC_PART "CudaMallocAsync"

/* c10::cuda's functions that change the thread's current device (DeviceIndex first) */
static const char *const set_device_syms[] = {
	"_ZN3c104cuda9SetDeviceEa",         /* SetDevice(DeviceIndex) */
	"_ZN3c104cuda9SetDeviceEab",        /* SetDevice(DeviceIndex, bool force) */
	"_ZN3c104cuda14ExchangeDeviceEa",
	"_ZN3c104cuda19MaybeExchangeDeviceEa",
	"_ZN3c104cuda14MaybeSetDeviceEa",
	"_ZN3c104cuda10set_deviceEa",       /* torch.cuda.set_device, if SetDevice is inlined */
	"_ZN3c104cuda10set_deviceEab",
};
#define SYM_GET_DEVICE "_ZN3c104cuda9GetDeviceEPa"               /* GetDevice(DeviceIndex *) */
#define SYM_INIT "_ZN3c104cuda28device_count_ensure_non_zeroEv" /* CUDA's lazy init */

#define STAT_BYTES 32                 /* Stat: current, peak, allocated, freed */
#define STATARRAY_BYTES (3 * STAT_BYTES) /* AGGREGATE, SMALL_POOL, LARGE_POOL */
#define STATARRAYS 6                  /* allocation ... reserved_bytes */
#define SCAN_BYTES 0x10000
#define STATS_TRIES 8                 /* reads of a DeviceStats that does not add up */

int cudamem_read(pid_t pid, uint64_t addr, void *dst, size_t n)
{
	struct pyreader r = { .pid = pid };
	return pm_read(&r, addr, dst, n);
}

/* libc10_cuda.so in the target's mappings: its path, how to open it, its load bias. */
static int find_library(struct cudamem *c)
{
	int found = maps_find_object(c->pid, "libc10_cuda.so", c->lib_path, c->lib_open, sizeof(c->lib_open),
				 &c->lib_bias); /* bias adjusted by the ELF's lowest PT_LOAD below */
	if (found <= 0)
		return found;
	struct elf_file *e = elf_file_open(c->lib_open);
	if (!e) {
		snprintf(c->why, sizeof(c->why), "cannot open %s: %s", c->lib_path, strerror(errno));
		return -1;
	}
	c->lib_bias -= elf_file_base_vaddr(e);
	uint64_t v;
	if (elf_file_symbol(e, SYM_ALLOCATOR, &v, NULL)) {
		elf_file_close(e);
		snprintf(c->why, sizeof(c->why), "%s exports no c10::cuda::CUDACachingAllocator::allocator",
			 c->lib_path);
		return -1;
	}
	c->allocator_sym = v + c->lib_bias;
	c->nset_device = 0;
	for (size_t i = 0; i < sizeof(set_device_syms) / sizeof(set_device_syms[0]); i++) {
		uint64_t off;
		if (!elf_file_symbol(e, set_device_syms[i], &v, NULL) && !elf_file_vaddr_to_offset(e, v, &off))
			c->set_device_off[c->nset_device++] = off;
	}
	c->get_device_off = c->init_off = 0;
	if (elf_file_symbol(e, SYM_GET_DEVICE, &v, NULL) || elf_file_vaddr_to_offset(e, v, &c->get_device_off))
		c->get_device_off = 0;
	if (elf_file_symbol(e, SYM_INIT, &v, NULL) || elf_file_vaddr_to_offset(e, v, &c->init_off))
		c->init_off = 0;
	elf_file_close(e);
	return 1;
}

/* Does this DeviceStats look like one: every StatArray adds up, 0 <= current <= peak? */
static int stats_plausible(const int64_t *st)
{
	for (int a = 0; a < STATARRAYS; a++) {
		const int64_t *s = st + a * (STATARRAY_BYTES / 8);
		for (int p = 0; p < 3; p++) {
			int64_t cur = s[p * 4], peak = s[p * 4 + 1];
			if (cur < 0 || peak < cur)
				return 0;
		}
		if (s[0] != s[4] + s[8])
			return 0;
	}
	return 1;
}

/* A DeviceStats at addr that validates; a read that does not is done again a few times
 * (the counters are read without the allocator's lock: a concurrent allocation can be
 * seen half written). */
static int stats_valid_at(pid_t pid, uint64_t addr)
{
	int64_t st[STATARRAYS * STATARRAY_BYTES / 8];
	for (int tries = 0; tries < STATS_TRIES; tries++) {
		if (cudamem_read(pid, addr, st, sizeof(st)))
			return 0;
		if (stats_plausible(st))
			return 1;
		struct timespec ts = { 0, 200 * 1000 };
		nanosleep(&ts, NULL);
	}
	return 0;
}

/* Is elem a DeviceCachingAllocator of this layout: a glibc recursive mutex first (kind 1
 * at +16), or a vtable pointer then the mutex (kind at +24)? */
static int looks_like_allocator(pid_t pid, uint64_t elem, int vtable_first)
{
	int32_t kind;
	if (!elem || elem % 8 || cudamem_read(pid, elem + (vtable_first ? 24 : 16), &kind, sizeof(kind)) || kind != 1)
		return 0;
	if (vtable_first) {
		uint64_t vt, slot;
		if (cudamem_read(pid, elem, &vt, 8) || !vt || vt % 8 || cudamem_read(pid, vt, &slot, 8) || !slot)
			return 0; /* a vtable: a readable table of code addresses */
	}
	return 1;
}

/* One candidate vector: 1 devices found, 0 not a vector of allocators, -1 allocators
 * whose DeviceStats do not validate. The layout of torch's DeviceCachingAllocator first,
 * then the same with a vtable pointer before it (a polymorphic allocator class), each
 * accepted only when every element's DeviceStats validate. */
static int try_vector(struct cudamem *c, const uint64_t *w)
{
	uint64_t begin = w[0], end = w[1], cap = w[2];
	if (!begin || end <= begin || cap < end || (end - begin) % 8 || begin % 8)
		return 0;
	uint64_t n = (end - begin) / 8;
	if (n > CUDA_MAX_DEVICES || (cap - begin) / 8 > 4096)
		return 0;
	uint64_t elems[CUDA_MAX_DEVICES];
	if (cudamem_read(c->pid, begin, elems, n * 8))
		return 0;
	int result = 0;
	for (int vtable_first = 0; vtable_first < 2; vtable_first++) {
		uint64_t in_device = vtable_first ? CUDA_STATS_IN_DEVICE_VTABLE : CUDA_STATS_IN_DEVICE;
		int all = 1, bad = 0;
		for (uint64_t i = 0; i < n && all; i++)
			all = looks_like_allocator(c->pid, elems[i], vtable_first);
		if (!all)
			continue;
		for (uint64_t i = 0; i < n && !bad; i++)
			bad = !stats_valid_at(c->pid, elems[i] + in_device);
		if (bad) {
			result = -1;
			continue;
		}
		c->ndev = (int)n;
		c->vtable_first = vtable_first;
		for (uint64_t i = 0; i < n; i++)
			c->stats[i] = elems[i] + in_device;
		return 1;
	}
	return result;
}

static void unsupported(struct cudamem *c, const char *fmt, const char *arg)
{
	c->state = CM_UNSUPPORTED;
	snprintf(c->why, sizeof(c->why), fmt, arg);
}

enum cudamem_state cudamem_scan(struct cudamem *c, pid_t pid)
{
	c->pid = pid;
	if (c->state == CM_READY || c->state == CM_UNSUPPORTED)
		return c->state;
	if (c->state == CM_NO_LIBRARY) {
		int r = find_library(c);
		if (r < 0) {
			c->state = CM_UNSUPPORTED;
			return c->state;
		}
		if (!r)
			return c->state;
		c->state = CM_PENDING;
	}
	uint64_t obj = 0, vtable = 0, ti = 0, name = 0;
	if (cudamem_read(pid, c->allocator_sym, &obj, 8) || !obj)
		return c->state; /* not set yet (the library's initialisers run at load) */
	char tn[sizeof(c->type_name)] = "";
	if (cudamem_read(pid, obj, &vtable, 8) || cudamem_read(pid, vtable - 8, &ti, 8) || cudamem_read(pid, ti + 8, &name, 8) ||
	    cudamem_read(pid, name, tn, sizeof(tn) - 1)) {
		unsupported(c, "the CUDA allocator's type cannot be read (at %s)", c->lib_path);
		return c->state;
	}
	tn[sizeof(tn) - 1] = 0;
	snprintf(c->type_name, sizeof(c->type_name), "%s", tn);
	c->allocator = obj;
	if (strstr(tn, RTTI_ASYNC_PART)) {
		unsupported(c, "the cudaMallocAsync allocator (%s) keeps no such counters", "backend:cudaMallocAsync");
		return c->state;
	}
	if (strcmp(tn, RTTI_NATIVE)) {
		unsupported(c, "an unknown CUDA allocator (%.120s)", tn);
		return c->state;
	}
	/* the vector: 8-aligned words of the object, read up to the first page boundary and
	 * then a page at a time, so that a mapping ending within the range is read to its
	 * end */
	static uint64_t buf[SCAN_BYTES / 8 + 2];
	size_t have = 0;
	while (have < SCAN_BYTES) {
		size_t n = 4096 - ((obj + have) & 4095);
		if (n > SCAN_BYTES - have)
			n = SCAN_BYTES - have;
		if (cudamem_read(pid, obj + have, (char *)buf + have, n))
			break;
		have += n;
	}
	int bad = 0;
	for (size_t i = 1; i + 2 < have / 8; i++) {
		int r = try_vector(c, buf + i);
		if (r > 0) {
			c->vector_off = i * 8;
			c->state = CM_READY;
			return c->state;
		}
		if (r < 0)
			bad = 1;
	}
	if (bad)
		unsupported(c, "the CUDA allocator's DeviceStats do not have the layout evmbpf knows "
			       "(torch at %s)", c->lib_path);
	return c->state; /* pending: CUDA not initialised yet */
}

/* /dev/nvidiaN in the target's root, as CUDA_VISIBLE_DEVICES of its environment limits them */
static int visible_devices(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/root/dev", pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		if (!strncmp(e->d_name, "nvidia", 6) && e->d_name[6] && isdigit((unsigned char)e->d_name[6]) &&
		    strspn(e->d_name + 6, "0123456789") == strlen(e->d_name + 6))
			n++;
	closedir(d);
	if (!n)
		return 0;
	char var[4096];
	if (!proc_getenv(pid, "CUDA_VISIBLE_DEVICES", var, sizeof(var)))
		return n;
	/* CUDA stops at the first entry that is not a device: "", "-1", "none" */
	const char *v = var;
	int k = 0;
	while (*v && (isdigit((unsigned char)*v) || !strncmp(v, "GPU-", 4) || !strncmp(v, "MIG-", 4))) {
		k++;
		v += strcspn(v, ",");
		if (*v == ',')
			v++;
	}
	return k < n ? k : n;
}

int cudamem_available(struct cudamem *c)
{
	if (c->available >= 0)
		return c->available;
	const char *force = getenv("EVMBPF_TEST_ASSUME_CUDA"); /* tests only: no device here */
	if (c->state == CM_NO_LIBRARY)
		cudamem_scan(c, c->pid);
	if (c->state == CM_NO_LIBRARY)
		c->available = 0; /* a CPU build, or torch without CUDA loaded: False */
	else if (force && *force == '1')
		c->available = 1;
	else
		c->available = visible_devices(c->pid) > 0;
	return c->available;
}

void cudamem_record(struct cudamem *c, const struct rec_mem *r)
{
	if (!c->first_mem_ns && !(r->flags & MEM_F_LOADED))
		c->first_mem_ns = mono_ns(); /* a module call */
	if (r->flags & MEM_F_UNKNOWN) {
		/* no counters: the thread's next event has `mem` null */
		for (int i = 0; i < CUDAMEM_TIDS; i++)
			if (c->last[i].tid == r->hdr.tid)
				c->last[i].valid = 0;
		c->unknown_calls++;
		if (!c->warned_unknown) {
			c->warned_unknown = 1;
			warnx_("warning: CUDA memory: thread %u was there before evmbpf and has not shown its "
			       "CUDA device since (c10::cuda::GetDevice, SetDevice, a device guard): `mem` "
			       "null on its module calls until it does", r->hdr.tid);
		}
		return;
	}
	if (r->flags & (MEM_F_INIT | MEM_F_LOADED))
		return;
	int slot = -1;
	for (int i = 0; i < CUDAMEM_TIDS; i++) {
		if (c->last[i].tid == r->hdr.tid) {
			slot = i;
			break;
		}
		if (slot < 0 && !c->last[i].valid)
			slot = i;
	}
	if (slot < 0)
		slot = (int)(r->hdr.tid % CUDAMEM_TIDS);
	c->last[slot].tid = r->hdr.tid;
	c->last[slot].valid = 1;
	c->last[slot].allocated = r->allocated;
	c->last[slot].max_allocated = r->max_allocated;
	c->last[slot].reserved = r->reserved;
}

int cudamem_take(struct cudamem *c, uint32_t tid, int64_t v[3])
{
	for (int i = 0; c && i < CUDAMEM_TIDS; i++) {
		if (c->last[i].tid != tid || !c->last[i].valid)
			continue;
		c->last[i].valid = 0; /* one record, one event */
		v[0] = c->last[i].allocated;
		v[1] = c->last[i].reserved;
		v[2] = c->last[i].max_allocated;
		return 1;
	}
	return 0;
}

void cudamem_json_values(struct buf *b, int valid, const int64_t v[3])
{
	if (!valid) {
		jw_null(b);
		return;
	}
	int first = 1;
	buf_putc(b, '{');
	jw_key(b, &first, "allocated"), jw_int(b, v[0]);
	jw_key(b, &first, "reserved"), jw_int(b, v[1]);
	jw_key(b, &first, "max_allocated"), jw_int(b, v[2]);
	buf_putc(b, '}');
}

void cudamem_json(struct cudamem *c, uint32_t tid, struct buf *b)
{
	int64_t v[3];
	int valid = cudamem_take(c, tid, v);
	cudamem_json_values(b, valid, v);
}
