/* evmbpf doctor: the checks a trace depends on, one line each: ✓ (fine), ✗ (a trace
 * would not work, or not wholly: what to do follows), or · (works, with the limitation
 * said). Exit 0 only when there is no ✗. Nothing is attached to the target: its memory
 * is only read. */
#include "doctor.h"
#include "cudamem.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <bpf/libbpf.h>
#include <linux/bpf.h>

#include "agent_needs.h"
#include "dump.h"
#include "elfsym.h"
#include "hold.h"
#include "hwwatch.h"
#include "preempt.h"
#include "target.h"
#include "procmaps.h"
#include "procstate.h"
#include "tracer.h"
#include "uprobes.h"

static int failures;
static int partial; /* of them: a trace works, without what the line says */

__attribute__((format(printf, 2, 3)))
static void line(int mark, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs(mark == 1 ? "✓ " : mark == 0 ? "✗ " : "· ", stdout);
	vprintf(fmt, ap);
	putchar('\n');
	va_end(ap);
	if (mark == 0)
		failures++;
}

static uint64_t caps;

static int has(int cap)
{
	return (caps >> cap) & 1;
}

static int read_file(const char *path, char *dst, size_t cap)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t n = fread(dst, 1, cap - 1, f);
	fclose(f);
	dst[n] = 0;
	dst[strcspn(dst, "\n")] = 0;
	return 0;
}

static int libbpf_quiet(enum libbpf_print_level level, const char *fmt, va_list args)
{
	return 0;
}

/* Can a uprobe perf event be opened with these privileges? (Some kernels want
 * CAP_SYS_ADMIN for it whatever CAP_PERFMON says.) One on evmbpf's own entry point,
 * opened and closed at once: nothing is placed in any other process. */
static void check_uprobe_event(void)
{
	if (uprobe_multi_usable()) {
		line(1, "uprobe events: uprobe_multi links can be made with these privileges "
			"(evmbpf places each probe as one)");
		return;
	}
	char type[16], self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (read_file("/sys/bus/event_source/devices/uprobe/type", type, sizeof(type)) || n <= 0)
		return;
	self[n] = 0;
	struct elf_file *f = elf_file_open(self);
	uint64_t off = 0;
	if (!f || elf_file_vaddr_to_offset(f, elf_file_entry(f), &off)) {
		if (f)
			elf_file_close(f);
		line(2, "uprobe events: not checked (cannot read %s)", self);
		return;
	}
	elf_file_close(f);
	struct perf_event_attr attr = { .size = sizeof(attr), .type = (uint32_t)atoi(type) };
	attr.config1 = (uint64_t)(uintptr_t)self;
	attr.config2 = off;
	int fd = (int)syscall(SYS_perf_event_open, &attr, getpid(), -1, -1, PERF_FLAG_FD_CLOEXEC);
	int err = errno;
	if (fd >= 0) {
		close(fd);
		line(1, "uprobe events: can be opened with these privileges");
	} else if ((err == EACCES || err == EPERM) && !has(21)) {
		line(0, "uprobe events: refused (%s): this kernel allows uprobes only with "
			"CAP_SYS_ADMIN (CAP_PERFMON is not enough here): add it, or run as root",
		     strerror(err));
	} else {
		line(0, "uprobe events: cannot open one (%s)%s", strerror(err),
		     err == EACCES || err == EPERM ? ": run evmbpf as root" : "");
	}
}

/* The self-test the tracer runs (hwwatch.c): a breakpoint on evmbpf's own memory. */
static void check_breakpoints(void)
{
	char why[256];
	hw_watch_why(why, sizeof(why));
	if (hw_watch_works())
		line(1, "hardware breakpoints: fire (%s): documents in flight and modules called "
			"through their bound __call__ are followed", why);
	else
		partial++, line(0, "hardware breakpoints: do not fire on this machine (%s): %s. To have them, "
			"trace on another machine: bare metal, or a guest whose kernel or hypervisor "
			"passes the debug registers through (KVM does; a PVM guest, `Hypervisor "
			"detected: PVM` in dmesg, does not)", why, HW_WATCH_LOST);
}

static int check_machine(void)
{
	struct utsname u;
	uname(&u);
	int major = 0, minor = 0;
	sscanf(u.release, "%d.%d", &major, &minor);
	int kernel_ok = major > 5 || (major == 5 && minor >= 17);
	if (kernel_ok)
		line(1, "kernel: Linux %s (5.17 or later: BPF ring buffers, bpf_loop)", u.release);
	else
		line(0, "kernel: Linux %s; evmbpf needs 5.17 or later (BPF ring buffers, bpf_loop): "
			"upgrade the kernel", u.release);
	struct stat st;
	if (!stat("/sys/kernel/btf/vmlinux", &st))
		line(1, "BTF: /sys/kernel/btf/vmlinux");
	else
		line(0, "BTF: no /sys/kernel/btf/vmlinux; use a kernel built with CONFIG_DEBUG_INFO_BTF=y");
	if (!stat("/sys/bus/event_source/devices/uprobe", &st))
		line(1, "uprobes: the uprobe event source is there");
	else
		line(0, "uprobes: no /sys/bus/event_source/devices/uprobe; use a kernel built with "
			"CONFIG_UPROBE_EVENTS=y");

	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2] = {{0}};
	if (!syscall(SYS_capget, &hdr, data))
		caps = data[0].effective | (uint64_t)data[1].effective << 32;
	static const struct { int cap; const char *name; } names[] = {
		{ 21, "CAP_SYS_ADMIN" }, { 39, "CAP_BPF" }, { 38, "CAP_PERFMON" },
		{ 19, "CAP_SYS_PTRACE" }, { 5, "CAP_KILL" },
	};
	char present[128] = "", absent[128] = "";
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		char *to = has(names[i].cap) ? present : absent;
		if (*to)
			strcat(to, ", ");
		strcat(to, names[i].name);
	}
	int admin = has(21);
	int can_bpf = admin || (has(39) && has(38));
	int priv_ok = can_bpf && has(19);
	if (priv_ok && (admin || !absent[0]))
		line(1, "privileges: %s%s%s", geteuid() ? "" : "root, ", present,
		     has(5) ? "" : " (no CAP_KILL: another user's process is never held while its "
				  "model is read)");
	else if (priv_ok)
		line(1, "privileges: %s; missing %s (some kernels, this project's 6.18 among them, "
			"allow uprobes only with CAP_SYS_ADMIN)", present, absent);
	else
		line(0, "privileges: %s%s; missing %s: run evmbpf with sudo, or with CAP_BPF, "
			"CAP_PERFMON and CAP_SYS_PTRACE (docs/operations.md: Privileges)",
		     present[0] ? "present " : "none of the needed capabilities", present, absent);

	libbpf_set_print(libbpf_quiet);
	if (!can_bpf) {
		line(0, "BPF: not checked (loading BPF programs needs CAP_BPF + CAP_PERFMON, or root)");
	} else {
		int rb = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, NULL);
		int loop = libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_loop, NULL);
		if (rb == 1 && loop == 1)
			line(1, "BPF: ring buffers and bpf_loop load");
		else
			line(0, "BPF: %s%s%s (errors %d, %d): Linux 5.17 or later is needed",
			     rb == 1 ? "" : "ring buffers refused", rb == 1 || loop == 1 ? "" : ", ",
			     loop == 1 ? "" : "bpf_loop refused", rb, loop);
	}
	check_uprobe_event();
	check_breakpoints();
	char how[160];
	int k = kernel_preemption(how, sizeof(how));
	line(k == KPREEMPT_NO ? 1 : 2, "kernel preemption: %s: %s", how,
	     k == KPREEMPT_NO ? "a probe's program runs to its end on its CPU"
	     : "a probe's program may be preempted: each record is checked, and one built while "
	       "another thread's probes ran on its CPU is dropped and counted (docs/design.md)");
	char v[32];
	if (read_file("/proc/sys/kernel/bpf_stats_enabled", v, sizeof(v)))
		line(2, "BPF stats: kernel.bpf_stats_enabled cannot be read");
	else
		line(2, "BPF stats: kernel.bpf_stats_enabled = %s (only `make bench` reads them: "
			"sysctl -w kernel.bpf_stats_enabled=1)", v);
	if (!read_file("/proc/sys/kernel/yama/ptrace_scope", v, sizeof(v)) && atoi(v) > 0 &&
	    !has(19))
		line(0, "ptrace: kernel.yama.ptrace_scope = %s and no CAP_SYS_PTRACE: another "
			"process's memory cannot be read; run with sudo", v);
	return 0;
}

/* A tensor of the model: a parameter of a module running on a thread, else of a module
 * or tensor found among the running frames' first locals. */
struct first_param {
	struct target *t;
	uint64_t found;
};

static int param_item(void *arg, uint64_t key, uint64_t value)
{
	struct first_param *x = arg;
	if (value && value != x->t->none_obj && dump_kind(x->t, value) == 1) {
		x->found = value;
		return 1;
	}
	return 0;
}

static uint64_t first_parameter(struct target *t, uint64_t module)
{
	uint64_t params = py_instance_attr(&t->reader, module, "_parameters");
	struct first_param f = { t, 0 };
	if (params)
		py_dict_items(&t->reader, params, param_item, &f);
	return f.found;
}

struct tensor_search {
	struct target *t;
	uint64_t tensor;
	char where[600];
};

/* Every module of the tree under root, until one has a parameter. */
static void search_tree(struct tensor_search *s, uint64_t root, const char *what)
{
	struct modtree tree = {0};
	if (modtree_build(&tree, &s->t->reader, root) < 0) {
		modtree_free(&tree);
		return;
	}
	for (size_t i = 0; i < tree.cap && !s->tensor; i++) {
		if (!tree.slots[i].obj)
			continue;
		s->tensor = first_parameter(s->t, tree.slots[i].obj);
		if (s->tensor)
			snprintf(s->where, sizeof(s->where), "a parameter of %s %s (%s)", what,
				 tree.slots[i].path, tree.slots[i].type_name);
	}
	modtree_free(&tree);
}

static void find_tensor(struct tensor_search *s, const struct dump_snapshot *snap)
{
	for (int i = 0; i < snap->n && !s->tensor; i++)
		if (snap->threads[i].nmods)
			search_tree(s, snap->threads[i].mods[0].self, "the running model:");
	if (s->tensor)
		return;
	/* no forward running: the frames' locals (the harness's `model`, a batch) */
	const struct pyreader *r = &s->t->reader;
	const struct py_offsets *o = s->t->off;
	uint64_t interp = pm_u64(r, s->t->runtime + o->runtime_interp_head, NULL);
	uint64_t ts = interp ? pm_u64(r, interp + o->interp_threads_head, NULL) : 0;
	for (int n = 0; ts && n < 256 && !s->tensor; n++, ts = pm_u64(r, ts + o->tstate_next, NULL)) {
		uint64_t f = pm_u64(r, ts + o->tstate_frame, NULL);
		if (o->tstate_cframe && f)
			f = pm_u64(r, f + o->cframe_frame, NULL);
		for (int d = 0; f && d < 256 && !s->tensor; d++, f = pm_u64(r, f + o->frame_back, NULL)) {
			uint64_t locals[16];
			if (pm_read(r, f + o->iframe_localsplus, locals, sizeof(locals)))
				continue;
			for (int k = 0; k < 16 && !s->tensor; k++) {
				uint64_t obj = locals[k] & ~7ULL;
				int kind = obj > 4096 ? dump_kind(s->t, obj) : 0;
				if (kind == 1) {
					s->tensor = obj;
					snprintf(s->where, sizeof(s->where), "a tensor in a local of a running frame");
				} else if (kind == 2) {
					search_tree(s, obj, "a model in a running frame:");
				}
			}
		}
	}
}

/* The allocator's DeviceStats, as the tracer would find them (docs/cudamem.md). */
static void check_cudamem(pid_t pid)
{
	static struct cudamem cm; /* large: the last counters of 64 threads */
	memset(&cm, 0, sizeof(cm));
	cm.available = -1;
	enum cudamem_state st = cudamem_scan(&cm, pid);
	int avail = cudamem_available(&cm);
	if (st == CM_READY)
		line(1, "CUDA memory: %d device(s), DeviceStats validated: `mem` is read%s", cm.ndev,
		     avail ? "" : " (but no device is visible: torch.cuda.is_available() is False "
				  "there, so `mem` is null as the reference writes it)");
	else if (st == CM_PENDING)
		line(1, "CUDA memory: the allocator is there, CUDA not initialised yet (`mem` null "
			"until it is, as the reference writes it)%s", avail ? "" : "; no device visible");
	else if (st == CM_UNSUPPORTED)
		line(2, "CUDA memory: %s: `mem` stays null", cm.why);
}

struct mapped {
	const char *const *names;
	char *which;
	size_t cap;
};

static int mapped_name(void *arg, const struct proc_mapping *m)
{
	const struct mapped *w = arg;
	for (int i = 0; w->names[i]; i++)
		if (strstr(m->path, w->names[i])) {
			snprintf(w->which, w->cap, "%s", m->path);
			return 1;
		}
	return 0;
}

/* The first file the process maps whose name holds one of names (NULL-ended). */
static int mapped(pid_t pid, const char *const *names, char *which, size_t cap)
{
	struct mapped w = { names, which, cap };
	return proc_each_mapping(pid, mapped_name, &w) > 0;
}

static void check_process(pid_t pid)
{
	char path[64];
	struct stat st;
	snprintf(path, sizeof(path), "/proc/%d", pid);
	if (stat(path, &st)) {
		line(0, "process %d: there is no such process; check the pid (as the host sees it: "
			"`ps -e`)", pid);
		return;
	}
	static struct target t;
	t.root_fd = -1;
	if (target_inspect_quiet(&t, pid)) {
		line(0, "%s", t.why[0] ? t.why : "the process cannot be read");
		return;
	}
	int shared = strstr(t.py_path, "libpython") != NULL;
	line(1, "Python %d.%d.%d, a release build with the GIL, %s %s", t.major, t.minor,
	     t.micro, shared ? "in" : "linked into", t.py_path);
	line(1, "slot_tp_call: at %#lx (found by %s), probed at file offset %#lx", (unsigned long)t.slot_tp_call,
	     t.slot_tp_call_found_by ? "the slotdefs table" : "its symbol",
	     (unsigned long)t.slot_tp_call_off);
	if (!t.torch_version[0]) {
		line(0, "torch: not imported in process %d (yet); evmbpf traces torch.nn.Module calls: "
			"attach once the job has imported torch", pid);
	} else {
		line(1, "torch %s: %s", t.torch_version, t.torch_lib);
		/* the tensor layout, on a live tensor */
		struct dump_snapshot snap = {0};
		dump_read(&t, &snap);
		struct tensor_search s = { .t = &t };
		if (t.runtime)
			find_tensor(&s, &snap);
		dump_snapshot_free(&snap);
		struct buf desc = {0};
		if (!s.tensor)
			line(2, "tensor layout: not checked, no live tensor found (no model running or "
				"in a local of a running frame)");
		else if (dump_tensor(&t, s.tensor, &desc))
			line(1, "tensor layout: validates on %s: %s", s.where, desc.data);
		else
			line(0, "tensor layout: torch %s's TensorImpl is not one evmbpf knows (%s did "
				"not validate): its tensors would be written as {\"type\": \"Tensor\"}",
			     t.torch_version, s.where);
		buf_free(&desc);
	}
	if (t.gen_type) {
		uint64_t interp = pm_u64(&t.reader, t.runtime + t.off->runtime_interp_head, NULL);
		uint64_t modules = interp ? pm_u64(&t.reader, interp + t.off->interp_modules, NULL) : 0;
		int imported = modules && py_dict_get_str(&t.reader, modules, "evalmetry.debug");
		line(1, "phase markers: followed (evalmetry's phase(); %s)",
		     imported ? "evalmetry.debug is imported" : "evalmetry.debug is not imported: "
								  "events get phase \"other\", or --phase rules");
	} else {
		line(2, "phase markers: not followed on this Python; name phases with --phase rules");
	}
	if (!t.runtime)
		line(2, "frames: no _PyRuntime symbol; --phase rules, a mid-forward attach and "
			"evmbpf dump are not available");
	char why[192];
	if (!hold_refusal(pid, why, sizeof(why)))
		line(1, "hold: %d's threads may be held (a ptrace stop, seen by evmbpf alone) for "
			"the milliseconds its model is read", pid);
	else
		line(2, "hold: %s: it is never held, its model is read while it runs (a short job "
			"may free it first)", why);
	static const char *const cuda[] = { "libc10_cuda.so", "libcudart", NULL };
	char which[PATH_MAX];
	if (mapped(pid, cuda, which, sizeof(which))) {
		line(1, "CUDA: %s is mapped (tensors on cuda:N are described as such)", which);
		check_cudamem(pid);
	} else
		line(2, "CUDA: not loaded (libc10_cuda.so, libcudart not mapped): a CPU job");
	char needs[2 * PATH_MAX + 512];
	int ok = agent_needs_line(pid, needs, sizeof(needs));
	line(ok ? 1 : 2, "%s", needs);
}

static const char doctor_usage[] =
	"USAGE\n"
	"  evmbpf doctor [--pid PID]\n"
	"\n"
	"Can this machine (and this process) be traced? One line per check: \xe2\x9c\x93 fine,\n"
	"\xe2\x9c\x97 a trace would not work, or not wholly (what to do follows), \xc2\xb7 works with\n"
	"the limitation said. Exit status 0 only when no check failed. Nothing is attached to the process.\n"
	"\n"
	"OPTIONS\n"
	"  -p, --pid PID   check this process too (its pid as the host sees it)\n"
	"  -h, --help      this text\n";

int doctor_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	pid_t pid = 0;
	int c;
	opterr = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":p:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 'p':
			if (parse_pid(optarg, &pid))
				return 2;
			break;
		case 'v':
			verbose++;
			break;
		case 'h':
			fputs(doctor_usage, stdout);
			return 0;
		default:
			return bad_option("doctor", c, argv);
		}
	}
	if (optind < argc) {
		warnx_("doctor takes no argument '%s': give a process as --pid PID", argv[optind]);
		return 2;
	}
	check_machine();
	if (pid)
		check_process(pid);
	fflush(stdout);
	if (failures && failures == partial)
		warnx_("%d check failed: a trace works, without what the \xe2\x9c\x97 line says",
		       failures);
	else if (failures)
		warnx_("%d check%s failed: a trace would not work (see the \xe2\x9c\x97 line%s)",
		       failures, failures > 1 ? "s" : "", failures > 1 ? "s" : "");
	return failures ? 1 : 0;
}
