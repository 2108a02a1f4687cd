/* evmbpf-test-aids: what the tests drive the collector's and the common code through
 * without a target, one subcommand an aid (main.c). Not part of evmbpf: the Makefile
 * links these files with evmbpf's own objects (all but user/main.c) into
 * build/evmbpf-test-aids. Each reads stdin (or its arguments) and writes stdout; 0, or 2 on bad input. */
#ifndef EVMBPF_TEST_AIDS_H
#define EVMBPF_TEST_AIDS_H

/* cupti-replay (cupti_replay.c): a recorded sequence of module calls and agent records
 * through the agent's ring and gpu_calls' attribution; the gpu events on stdout. */
int cupti_replay_main(void);
/* cupti-channel [-v] HARNESS FILE... (cupti_channel.c): --numeric's channel to the
 * agent without a device (tests/cupti/). */
int cupti_channel_main(int argc, char **argv);
/* cupti-stats (cupti_stats.c): the agent's stats kernels run on the host. */
int cupti_stats_main(void);
/* regex-test (regex_test.c): Python's `re` dialect (pyre.c) on hex-encoded patterns
 * and texts. */
int regex_test_main(void);
/* x86-walk FILE FUNCTION [CALLEE] (x86_walk.c): the instructions x86insn.c finds in a
 * function of an ELF file, and its calls to CALLEE (callsites.c). */
int x86_walk_main(int argc, char **argv);
/* uprobe-close PATH PID helper|direct (uprobe_close.c): a link of many uprobes in PID
 * closed while the aid SIGKILLs itself, by evmbpf's way (exitclose.h) or a plain close. */
int uprobe_close_main(int argc, char **argv);
/* in-loader PID (main.c): proc_in_loader's answer for PID, 1, 0 or -1 (procstate.h). */

#endif
