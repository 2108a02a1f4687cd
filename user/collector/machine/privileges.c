#include "privileges.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util.h"

/* The effective capabilities, from capget(2): root without them (a container's
 * restricted root) fails as surely as a plain user. CAP_BPF and CAP_PERFMON load and
 * attach the programs (CAP_SYS_ADMIN stands for both, and is the only way before Linux
 * 5.8); CAP_SYS_PTRACE reads the target's memory, its /proc/PID/root, and opens uprobes
 * on another user's process, and seizes its threads (PTRACE_SEIZE) for the holds. */
static uint64_t effective_caps;

int has_cap(int cap)
{
	return cap < 64 && (effective_caps >> cap) & 1;
}

int privileges_check(void)
{
	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2] = {{0}};
	if (syscall(SYS_capget, &hdr, data)) {
		warnx_("cannot read evmbpf's capabilities: %s", strerror(errno));
		return -1;
	}
	effective_caps = data[0].effective | (uint64_t)data[1].effective << 32;
	const int bpf_cap = 39 /* CAP_BPF */, perfmon = 38 /* CAP_PERFMON */;
	int admin = has_cap(CAP_SYS_ADMIN);
	char missing[96] = "";
	if (!has_cap(bpf_cap) && !admin)
		strcat(missing, ", CAP_BPF");
	if (!has_cap(perfmon) && !admin)
		strcat(missing, ", CAP_PERFMON");
	if (!has_cap(CAP_SYS_PTRACE))
		strcat(missing, ", CAP_SYS_PTRACE");
	if (missing[0]) {
		warnx_("evmbpf needs root, or the capabilities CAP_BPF, CAP_PERFMON and "
		       "CAP_SYS_PTRACE (missing: %s): run it with sudo", missing + 2);
		return -1;
	}
	return 0;
}
