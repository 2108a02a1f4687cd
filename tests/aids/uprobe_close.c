/* uprobe-close PATH PID helper|direct (aids.h): a uprobe_multi link on every function of
 * PATH named on stdin (one name a line, or a file offset as 0x..., at most 2,000) in
 * process PID, then closed on a thread of its own while the process SIGKILLs itself; the
 * link's file offsets on stdout, one a line, before the close. "helper" closes as evmbpf
 * does (exitclose.h), "direct" with a plain close(2). */
#include "aids.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "elfsym.h"
#include "exitclose.h"
#include "linkserver.h"
#include "uprobes.h"

#define PLACES_MAX 2000

static int link_fd, use_helper;
static atomic_int closing;

static void *closer(void *arg)
{
	(void)arg;
	struct exit_close *c = use_helper ? exit_close_begin() : NULL;
	if (use_helper && !c) {
		fprintf(stderr, "uprobe-close: no helper could be made\n");
		_exit(3);
	}
	atomic_store(&closing, 1);
	close(link_fd);
	exit_close_end(c);
	return NULL;
}

int uprobe_close_main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[2], "helper") && strcmp(argv[2], "direct"))) {
		fprintf(stderr, "usage: evmbpf-test-aids uprobe-close PATH PID helper|direct\n");
		return 2;
	}
	const char *path = argv[0];
	pid_t pid = (pid_t)atoi(argv[1]);
	use_helper = !strcmp(argv[2], "helper");
	struct elf_file *f = elf_file_open(path);
	if (!f) {
		fprintf(stderr, "uprobe-close: %s is not an ELF file\n", path);
		return 2;
	}
	static uint64_t offs[PLACES_MAX];
	int n = 0;
	char name[256];
	while (n < PLACES_MAX && fgets(name, sizeof(name), stdin)) {
		name[strcspn(name, "\n")] = 0;
		uint64_t vaddr, size, off;
		if (!strncmp(name, "0x", 2)) /* a file offset as it is */
			offs[n++] = strtoull(name, NULL, 16);
		else if (elf_file_symbol(f, name, &vaddr, &size) == 0 && size &&
		    elf_file_vaddr_to_offset(f, vaddr, &off) == 0)
			offs[n++] = off;
	}
	elf_file_close(f);
	int prog = uprobe_multi_empty_prog();
	if (prog < 0 || n == 0) {
		fprintf(stderr, "uprobe-close: no program (%d) or no place (%d)\n", prog, n);
		return 2;
	}
	link_fd = uprobe_multi_link(prog, path, offs, n, 0, pid);
	if (link_fd < 0) {
		perror("uprobe-close: uprobe_multi link");
		return 2;
	}
	for (int i = 0; i < n; i++)
		printf("%lu\n", (unsigned long)offs[i]);
	fflush(stdout);
	pthread_t t;
	pthread_create(&t, NULL, closer, NULL);
	while (!atomic_load(&closing))
		sched_yield();
	kill(getpid(), SIGKILL);
	for (;;)
		pause();
}
