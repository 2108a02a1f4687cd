// SPDX-License-Identifier: GPL-2.0
/* ablate: a profiling build that leaves one stage of a module call's work out.
 *
 * Built with -DEVMBPF_ABLATE=N (make BUILD=build-ablate-N ABLATE=N; scripts/
 * cost-breakdown.py builds and runs them side by side), call_enter and call_exit stop
 * short of what a full build does, so that the BPF run time a module call costs can be
 * split into its stages by difference (docs/design.md, "Where a module call's time
 * goes"). Its traces are incomplete by design, and evmbpf says so when it starts. N:
 *
 *   1  after the type: call_enter ends once self's type is judged a Module (no call is
 *      kept, so call_exit finds none)
 *   2  no records: calls are kept open (the bound-call check, the open-calls stack) and
 *      paired at their return, but no record is made (nor the first call's hold)
 *   3  no description: the records are made and handed to the ring buffer, with no
 *      node
 *   4  no output: the records are described, and not handed to the ring buffer (a held
 *      record still is: the target waits for it)
 *   5  no bound-call check (the rest as a full build)
 *   6  the bound-call check's known-frame test, no walk of the frames
 *   7  no enter output: an enter record is described and not handed to the ring
 *      buffer (a held one still is); exits are as a full build's (what one record a
 *      call instead of two could save at most)
 *
 * Without the flag (0) every switch below is false and the programs are unchanged. */
#ifndef EVMBPF_ABLATE_BPF_H
#define EVMBPF_ABLATE_BPF_H

#ifndef EVMBPF_ABLATE
#define EVMBPF_ABLATE 0
#endif

#define ABL_AFTER_TYPE 1
#define ABL_NO_RECORDS 2
#define ABL_NO_DESCRIBE 3
#define ABL_NO_OUTPUT 4
#define ABL_NO_BOUND 5
#define ABL_NO_WALK 6
#define ABL_NO_ENTER_OUTPUT 7

#define ABLATED(stage) (EVMBPF_ABLATE == (stage))

/* Return here in the build that leaves `stage` out. The condition is hidden from the
 * compiler, so the code after it stays, and a global function keeps the arguments its
 * callers pass (the verifier checks them against its signature). */
#define ABLATE_RETURN(stage, ...)                                    \
	do {                                                             \
		if (ABLATED(stage)) {                                        \
			__u64 abl_ = 0;                                          \
			asm volatile("" : "+r"(abl_));                           \
			if (!abl_)                                               \
				return __VA_ARGS__;                                  \
		}                                                            \
	} while (0)

#endif /* EVMBPF_ABLATE_BPF_H */
