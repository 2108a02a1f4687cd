/* Attaching a uprobe (uprobes.c). */
#ifndef EVMBPF_UPROBES_H
#define EVMBPF_UPROBES_H

#include <stdint.h>
#include <sys/types.h>
#include <bpf/libbpf.h>

/* A uprobe (ret: a uretprobe) on prog at off in path, for process pid (-1: any); NULL
 * when it cannot be, said on stderr with what it was for (`what`). */
struct bpf_link *attach_uprobe(struct bpf_program *prog, int ret, pid_t pid, const char *path,
			       uint64_t off, const char *what);

#endif
