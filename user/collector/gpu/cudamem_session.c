/* The CUDA allocator's counters, the session's side: probes on c10::cuda's device
 * setters once libc10_cuda.so is mapped (a probe on the dynamic loader's
 * _dl_debug_state until then), GetDevice for the threads there before them, and the
 * counters read while a thread is held. The counters themselves are cudamem.c's. */
#include "cudamem_session.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "closer.h"
#include "cudamem.h"
#include "elfsym.h"
#include "ldso.h"
#include "jsonw.h"
#include "procmem.h"
#include "procstate.h"
#include "uprobes.h"
#include "hold.h"

/* how long GetDevice stays probed after the first module call seen, at most */
#define REVEAL_WINDOW_NS (5ull * 1000000000ull)
/* CUDA's init seen and still no devices: said once after this long */
#define INIT_GRACE_NS (1000ull * 1000000ull)

static void cudamem_reveal_end(struct session *s);

/* CUDA's init was seen (c10's lazy init ran) and the allocator's devices are still not
 * found: no layout evmbpf knows validates. Said once, `grace` after the init (the
 * allocator's own init follows c10's at once; a poll can fall between them). */
static void init_seen(struct cudamem *c, const char *sign)
{
	if (c->init_seen_ns)
		return;
	c->init_seen_ns = mono_ns();
	c->init_sign = sign;
}

static void pending_warn(struct cudamem *c, uint64_t grace)
{
	if (c->state != CM_PENDING || !c->init_seen_ns || c->warned_pending ||
	    mono_ns() - c->init_seen_ns < grace)
		return;
	c->warned_pending = 1;
	if (!cudamem_available(c))
		return; /* no device: null as the reference's anyway */
	warnx_("warning: CUDA memory: CUDA was initialised (%s) but torch's CUDA allocator (%s) "
	       "has no per-device allocators of a layout evmbpf knows (a mutex, then DeviceStats "
	       "that add up; or a vtable pointer before them); `mem` stays null", c->init_sign,
	       c->lib_path);
}

/* The threads there now may have set a device already: none is assumed for them until
 * they show it (cuda_unknown). Threads that come later start on device 0, CUDA's
 * default, and every change of theirs is seen by the probes. */
static void list_unknown(struct session *s)
{
	struct cudamem *c = &s->cuda;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", s->target.pid);
	DIR *d = opendir(path);
	if (!d)
		return;
	int fd = bpf_map__fd(s->skel->maps.cuda_unknown), dev_fd = bpf_map__fd(s->skel->maps.cuda_device);
	struct dirent *e;
	while ((e = readdir(d))) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		uint32_t tid = (uint32_t)strtoul(e->d_name, NULL, 10);
		int32_t dev;
		if (!bpf_map_lookup_elem(dev_fd, &tid, &dev))
			continue; /* set since the probes were placed: known */
		struct cuda_unknown_v v = { 0 };
		if (!bpf_map_update_elem(fd, &tid, &v, BPF_NOEXIST))
			c->nunknown++;
	}
	closedir(d);
	if (c->nunknown)
		__atomic_store_n(&s->ps->cuda_unknown_on, 1, __ATOMIC_RELEASE);
	debugx("CUDA: %d thread(s) of %d there before the device probes: device unknown until shown",
	       c->nunknown, s->target.pid);
}

/* Until libc10_cuda.so is mapped: a probe on the dynamic loader's _dl_debug_state()
 * stops the target at the dlopen's RT_CONSISTENT that mapped it (none of its code run
 * yet; the BPF side looks at the r_map entries that dlopen added), so that the device
 * probes are placed before any c10 function can run. Only where
 * a stop is allowed (never a terminal's foreground job, nor under --numeric's ptrace). */
static void ld_hook(struct session *s)
{
	struct cudamem *c = &s->cuda;
	if (!session_may_hold(s))
		return;
	static char open_path[PATH_MAX];
	uint64_t off, r_debug;
	if (ldso_debug_find(s->target.pid, open_path, sizeof(open_path), &off, &r_debug))
		return;
	c->ld_link = attach_uprobe(s->skel->progs.cuda_dlopen_probe, 0, s->target.pid, open_path, off,
				   "_dl_debug_state");
	if (!c->ld_link)
		return;
	__atomic_store_n(&s->ps->cuda_ld_debug, r_debug, __ATOMIC_RELEASE);
	debugx("CUDA: %s's _dl_debug_state probed until libc10_cuda.so is mapped", open_path);
}

static void ld_unhook(struct session *s)
{
	struct cudamem *c = &s->cuda;
	if (!c->ld_link)
		return;
	s->ps->cuda_ld_debug = 0;
	closer_put(c->ld_link);
	c->ld_link = NULL;
}

static void place_probes(struct session *s)
{
	struct cudamem *c = &s->cuda;
	struct evmbpf_bpf *skel = s->skel;
	for (int i = 0; i < c->nset_device && c->nlinks < (int)(sizeof(c->links) / sizeof(c->links[0])); i++) {
		struct probe *l = attach_uprobe(skel->progs.cuda_set_device_probe, 0, s->target.pid,
						c->lib_open, c->set_device_off[i], "c10::cuda::SetDevice");
		if (l)
			c->links[c->nlinks++] = l;
	}
	if (c->init_off) {
		/* CUDA's init between two module calls: the next one stops the target until the
		 * devices are found (never a terminal's foreground job, nor under --numeric's ptrace) */
		struct probe *l = attach_uprobe(skel->progs.cuda_init_probe, 0, s->target.pid, c->lib_open,
						c->init_off, "c10::cuda::device_count_ensure_non_zero");
		if (l) {
			c->links[c->nlinks++] = l;
			if (session_may_hold(s))
				s->ps->cuda_init_hold = 1;
		}
	}
	if (c->get_device_off) {
		struct probe *l = attach_uprobe(skel->progs.cuda_get_device_enter, 0, s->target.pid,
						c->lib_open, c->get_device_off, "c10::cuda::GetDevice");
		if (l)
			c->reveal[c->nreveal++] = l;
		l = attach_uprobe(skel->progs.cuda_get_device_exit, 1, s->target.pid, c->lib_open,
				  c->get_device_off, "c10::cuda::GetDevice (return)");
		if (l)
			c->reveal[c->nreveal++] = l;
	}
	debugx("CUDA: %s mapped, %d device-setting functions probed%s%s", c->lib_path, c->nset_device,
	       c->init_off ? ", its lazy init" : "", c->get_device_off ? ", GetDevice for a while" : "");
	if (!c->in_load_stop) /* else mapped just now: no code of it has run */
		list_unknown(s); /* after the probes: a thread that sets its device from now on is seen */
	if (!c->nunknown)
		cudamem_reveal_end(s);
}

/* GetDevice goes once no thread listed unknown is left (shown, or gone), or some time
 * after the first module call: it is called by every CUDA operation. */
static void reveal_step(struct session *s)
{
	struct cudamem *c = &s->cuda;
	if (!c->nreveal)
		return;
	int fd = bpf_map__fd(s->skel->maps.cuda_unknown), left = 0;
	uint32_t key, next, *prev = NULL;
	while (!bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		char path[64];
		snprintf(path, sizeof(path), "/proc/%d/task/%u", s->target.pid, key);
		if (access(path, F_OK) && errno == ENOENT) {
			bpf_map_delete_elem(fd, &key);
			prev = NULL; /* start over: the walk's place is gone */
			left = 0;
			continue;
		}
		left++;
		prev = &key;
	}
	if (!left || (c->first_mem_ns && mono_ns() - c->first_mem_ns > REVEAL_WINDOW_NS)) {
		debugx("CUDA: GetDevice no longer probed (%d thread(s) with their device unknown)", left);
		cudamem_reveal_end(s);
	}
}

static void cudamem_reveal_end(struct session *s)
{
	struct cudamem *c = &s->cuda;
	for (int i = 0; i < c->nreveal; i++)
		closer_put(c->reveal[i]);
	c->nreveal = 0;
}

void cudamem_session_detach(struct session *s)
{
	struct cudamem *c = &s->cuda;
	pending_warn(c, 0); /* the run ended before the grace passed */
	cudamem_reveal_end(s);
	ld_unhook(s);
	for (int i = 0; i < c->nlinks; i++)
		closer_put(c->links[i]);
	c->nlinks = 0;
}

/* The session's part: probes on the device-setting functions once the library is
 * there, the DeviceStats handed to the BPF side once found. Called at the attach and
 * then from the session's loop until the chain is found or refused. */
void cudamem_session_step(struct session *s)
{
	struct cudamem *c = &s->cuda;
	if (s->skel && c->nreveal)
		reveal_step(s);
	if (!s->skel || c->state == CM_READY || c->state == CM_UNSUPPORTED || c->cpu_torch)
		return;
	enum cudamem_state before = c->state;
	int torch_known = s->target.torch_version[0] != 0;
	int first = 0;
	if (c->state == CM_NO_LIBRARY && !c->ld_tried) {
		/* before the first look: a library mapped after it stops the target */
		static char name[PATH_MAX], open_path[PATH_MAX];
		uint64_t start;
		c->ld_tried = first = 1;
		if (!maps_find_object(s->target.pid, "libc10_cuda.so", name, open_path, sizeof(open_path), &start))
			ld_hook(s);
	}
	if (c->state == CM_NO_LIBRARY && !first && !c->in_load_stop) {
		/* the library awaited: with the loader's probe, its dlopen says when (the look
		 * above and the one in the step the probe went in cover what came before); else
		 * looked for once a second. The maps of every Python of the node read at every
		 * round of the loop were most of the recorder's CPU in a burst. */
		uint64_t now = mono_ns();
		if (c->ld_link || now < c->next_look_ns)
			return;
		c->next_look_ns = now + 1000000000ull;
	}
	cudamem_scan(c, s->target.pid);
	if (c->state == CM_NO_LIBRARY && torch_known)
		c->cpu_torch = 1; /* torch is imported without libc10_cuda.so: look no more */
	if (c->state != CM_NO_LIBRARY || c->cpu_torch)
		ld_unhook(s);
	if (before == CM_NO_LIBRARY && c->state != CM_NO_LIBRARY)
		place_probes(s);
	if (c->state == CM_UNSUPPORTED && !c->warned) {
		c->warned = 1;
		s->ps->cuda_init_hold = 0;
		if (!cudamem_available(c))
			return; /* no device: null as the reference's anyway, nothing to warn of */
		warnx_("warning: CUDA memory: %s; `mem` stays null", c->why);
		return;
	}
	if (c->state == CM_PENDING && s->ps && __atomic_load_n(&s->ps->cuda_init_armed, __ATOMIC_ACQUIRE))
		init_seen(c, "c10::cuda::device_count_ensure_non_zero ran");
	pending_warn(c, INIT_GRACE_NS);
	if (c->state != CM_READY)
		return;
	s->ps->cuda_init_hold = 0;
	debugx("CUDA: allocator %s at %#lx, device_allocator at +%#lx (%s), %d device(s)", c->type_name,
	       (unsigned long)c->allocator, (unsigned long)c->vector_off,
	       c->vtable_first ? "a vtable pointer, then the mutex" : "the mutex first", c->ndev);
	if (!cudamem_available(c))
		return; /* torch.cuda.is_available() is False: the reference writes null */
	struct proc_state *bss = s->ps;
	for (int i = 0; i < c->ndev; i++)
		bss->cuda_stats[i] = c->stats[i];
	bss->cuda_alloc_off = CUDA_ALLOCATED_OFF;
	bss->cuda_reserved_off = CUDA_RESERVED_OFF;
	__atomic_store_n(&bss->cuda_ndev, (uint32_t)c->ndev, __ATOMIC_RELEASE);
}

/* The counters of thread tid's device, read from here (the thread is stopped), as the
 * probe would have read them; nothing when its device is unknown. */
static void read_now(struct session *s, uint32_t tid)
{
	struct cudamem *c = &s->cuda;
	if (c->state != CM_READY || !s->ps->cuda_ndev)
		return; /* not found, or torch.cuda.is_available() is False there */
	int32_t dev = 0;
	if (bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.cuda_device), &tid, &dev)) {
		struct cuda_unknown_v u;
		dev = 0;
		if (!bpf_map_lookup_elem(bpf_map__fd(s->skel->maps.cuda_unknown), &tid, &u)) {
			struct rec_mem r = { .hdr = { .kind = REC_MEM, .size = sizeof(r), .tid = tid },
					     .device = -1, .flags = MEM_F_UNKNOWN };
			cudamem_record(c, &r);
			return;
		}
	}
	if (dev < 0 || dev >= c->ndev)
		return;
	int64_t cp[2], reserved;
	if (cudamem_read(c->pid, c->stats[dev] + CUDA_ALLOCATED_OFF, cp, sizeof(cp)) ||
	    cudamem_read(c->pid, c->stats[dev] + CUDA_RESERVED_OFF, &reserved, sizeof(reserved)))
		return;
	struct rec_mem r = { .hdr = { .kind = REC_MEM, .size = sizeof(r), .tid = tid }, .device = dev,
			     .allocated = cp[0], .max_allocated = cp[1], .reserved = reserved };
	cudamem_record(c, &r);
}

/* A record that holds its thread (the first module call, stopped until the model is
 * read) came before the collector had found the allocator (CUDA initialised just before
 * it): look now, and read the counters from here while the thread is stopped, so that
 * they are what the probe would have read. */
void cudamem_session_held(struct session *s, uint32_t tid)
{
	struct cudamem *c = &s->cuda;
	for (int i = 0; i < CUDAMEM_TIDS; i++)
		if (c->last[i].tid == tid && c->last[i].valid)
			return;
	if (c->state != CM_READY)
		cudamem_session_step(s);
	read_now(s, tid);
}

void cudamem_session_record(struct session *s, const struct rec_mem *r)
{
	/* held (hold.bpf.h): looked at in its stop, continued once looked at */
	int held = (r->flags & MEM_F_HELD) && !hold_wait((pid_t)r->hdr.tid);
	cudamem_record(&s->cuda, r);
	if (r->flags & MEM_F_LOADED) {
		/* a dlopen mapped its objects, the target is stopped before any of their code */
		if (s->cuda.ld_link) {
			s->cuda.in_load_stop = 1;
			cudamem_session_step(s);
			s->cuda.in_load_stop = 0;
			debugx("CUDA: stopped at a dlopen (%d so far): %s", ++s->cuda.load_stops,
			       s->cuda.state == CM_NO_LIBRARY ? "no libc10_cuda.so yet" : "libc10_cuda.so mapped");
		}
		if (held)
			hold_continue_thread((pid_t)r->hdr.tid);
		return;
	}
	if (!(r->flags & MEM_F_INIT)) {
		if (held)
			hold_continue_thread((pid_t)r->hdr.tid);
		return;
	}
	/* CUDA's lazy init ran before this module call: its thread is held (MEM_F_HELD) */
	init_seen(&s->cuda, "c10::cuda::device_count_ensure_non_zero ran");
	cudamem_session_step(s);
	pending_warn(&s->cuda, 0); /* the allocator's init is done by now */
	if (++s->cuda.init_holds >= CUDAMEM_INIT_HOLDS)
		s->ps->cuda_init_hold = 0; /* called again and again without an init: stop no more */
	debugx("CUDA: initialised before a module call of thread %u: %s", r->hdr.tid,
	       s->cuda.state == CM_READY ? "devices found" : "devices not found yet");
	read_now(s, r->hdr.tid);
	if (held)
		hold_continue_thread((pid_t)r->hdr.tid);
}
