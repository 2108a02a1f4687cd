/* Attaching a uprobe to a traced process, saying why when it cannot be: the one way every
 * part that places probes (probes.c, cudamem.c, samples.c, launch.c, job.c) attaches. */
#include "uprobes.h"

#include <errno.h>
#include <string.h>
#include <linux/capability.h>

#include "privileges.h"
#include "procstate.h"
#include "util.h"

struct bpf_link *attach_uprobe(struct bpf_program *prog, int ret, pid_t pid,
				      const char *path, uint64_t off, const char *what)
{
	LIBBPF_OPTS(bpf_uprobe_opts, uo, .retprobe = ret);
	struct bpf_link *l = bpf_program__attach_uprobe_opts(prog, pid, path, off, &uo);
	int err = errno;
	if (!l && process_gone(pid))
		warnx_("process %d exited while evmbpf was attaching; nothing traced", pid);
	else if (!l && (err == EACCES || err == EPERM) && !has_cap(CAP_SYS_ADMIN))
		warnx_("cannot attach a uprobe to %s: %s; this kernel allows uprobes only with "
		       "CAP_SYS_ADMIN (CAP_PERFMON is not enough here): add it, or run evmbpf as root",
		       what, strerror(err));
	else if (!l)
		warnx_("cannot attach a uprobe to %s in %s: %s", what, path, strerror(err));
	return l;
}
