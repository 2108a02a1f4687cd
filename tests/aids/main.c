/* evmbpf-test-aids AID [ARGS...]: the tests' entry to code of evmbpf that they check
 * apart from a traced process (aids.h). */
#include "aids.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "procstate.h"

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
	if (argc == 3 && !strcmp(argv[1], "in-loader")) {
		printf("%d\n", proc_in_loader((pid_t)atoi(argv[2])));
		return 0;
	}
	fprintf(stderr, "usage: evmbpf-test-aids cupti-replay | cupti-channel [-v] HARNESS FILE... |\n"
			"       cupti-stats | regex-test | x86-walk FILE FUNCTION [CALLEE] |\n"
			"       in-loader PID   (stdin to stdout; tests/aids/aids.h)\n");
	return 2;
}
