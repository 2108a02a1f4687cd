/* evmbpf-test-aids AID [ARGS...]: the tests' entry to code of evmbpf that they check
 * apart from a traced process (aids.h). */
#include "aids.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "procmaps.h"
#include "procstate.h"

/* a line a mapping as procmaps.c reads it: start-end perms offset major:minor inode path */
static int print_mapping(void *arg, const struct proc_mapping *m)
{
	(void)arg;
	printf("%lx-%lx %s %lx %x:%x %lu %s\n", (unsigned long)m->start, (unsigned long)m->end,
	       m->perms, (unsigned long)m->offset, m->major, m->minor, (unsigned long)m->inode,
	       m->path);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "cupti-replay"))
		return cupti_replay_main();
	if (argc >= 3 && !strcmp(argv[1], "cupti-channel"))
		return cupti_channel_main(argc - 2, argv + 2);
	if (argc == 2 && !strcmp(argv[1], "cupti-stats"))
		return cupti_stats_main();
	if (argc == 2 && !strcmp(argv[1], "regex-test"))
		return regex_test_main();
	if ((argc == 4 || argc == 5) && !strcmp(argv[1], "x86-walk"))
		return x86_walk_main(argc - 2, argv + 2);
	if (argc >= 2 && !strcmp(argv[1], "uprobe-close"))
		return uprobe_close_main(argc - 2, argv + 2);
	if (argc == 3 && !strcmp(argv[1], "in-loader")) {
		printf("%d\n", proc_in_loader((pid_t)atoi(argv[2])));
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "maps")) {
		int rc = proc_each_mapping((pid_t)atoi(argv[2]), print_mapping, NULL);
		if (rc < 0)
			printf("error %s\n", strerror(errno));
		return 0;
	}
	fprintf(stderr, "usage: evmbpf-test-aids cupti-replay | cupti-channel [-v] HARNESS FILE... |\n"
			"       cupti-stats | regex-test | x86-walk FILE FUNCTION [CALLEE] |\n"
			"       uprobe-close PATH PID helper|direct |\n"
			"       in-loader PID | maps PID   (stdin to stdout; tests/aids/aids.h)\n");
	return 2;
}
