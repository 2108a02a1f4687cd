/* evmbpf: trace the torch.nn.Module calls of a running Python process from outside. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/libbpf.h>

#include "doctor.h"
#include "dump.h"
#include "gpu_calls.h"
#include "options.h"
#include "outpattern.h"
#include "pyre.h"
#include "readers.h"
#include "record_cli.h"
#include "tracer_run.h"
#include "util.h"
#include "version.h"

static const char usage[] =
	"USAGE\n"
	"  evmbpf --pid PID[,PID...] --out FILE [--follow] [--modules REGEX] [--tail N] [-v]\n"
	"  evmbpf --out FILE [--follow] [--modules REGEX] [--tail N] [-v] -- COMMAND [ARGS...]\n"
	"  evmbpf summarize TRACE|DIR [TRACE...] [--tail N]\n"
	"  evmbpf show TRACE --forward N [--module REGEX]\n"
	"  evmbpf forwards TRACE [--json]\n"
	"  evmbpf export TRACE [--format chrome|speedscope] [-o FILE]\n"
	"  evmbpf dump --pid PID [--json]\n"
	"  evmbpf doctor [--pid PID]\n"
	"  evmbpf record --dir DIR [--tail N] [--match REGEX] [--cgroup PATH] [--keep-all]\n"
	"  evmbpf record --flush [--pid PID]\n"
	"\n"
	"Traces the torch.nn.Module calls of an unmodified CPython + PyTorch process with\n"
	"eBPF uprobes and writes the module trace (schema 1.1) that the in-process tracer\n"
	"would have written. The target is only read, never changed; when evmbpf stops,\n"
	"every probe is gone and the target runs on.\n"
	"\n"
	"OPTIONS\n"
	"  -p, --pid PID        attach to a running process (its pid as the host sees it);\n"
	"                       repeat it or give a comma-separated list for several\n"
	"                       (a pid given twice is traced once)\n"
	"  -o, --out FILE       write the trace here (\"-\" for stdout); created with mode\n"
	"                       0600, never over an existing file unless --force. A pattern:\n"
	"                       %p the pid, %r the rank (RANK, else LOCAL_RANK, of the\n"
	"                       process's environment; empty without), %% a %; one file a\n"
	"                       process, so several processes need %p or %r\n"
	"  -f, --follow         trace every Python process the command (or the --pid targets)\n"
	"                       starts, at any depth, from its first instruction: exec'd ones\n"
	"                       and forks that call modules (DataLoader workers)\n"
	"      --force          overwrite FILE if it exists\n"
	"  -m, --modules REGEX  trace only modules whose path matches: a Python regular\n"
	"                       expression, as the in-process tracer's --debug-modules, with\n"
	"                       re.search on the dotted path (the model itself is <root>)\n"
	"  -t, --tail N         keep only the last N events in memory and write them at the end\n"
	"      --numeric        tensor stats (NaN/Inf counts, min/max/mean/std/median) of CPU\n"
	"                       tensors, read while their thread is held at the call\n"
	"      --stop-on-nonfinite  at the first module whose output holds a NaN or an Inf:\n"
	"                       end the trace, stop the target (SIGSTOP), exit 3; implies --numeric\n"
	"      --cupti          launch mode: CUPTI inside the command (an agent CUDA loads at\n"
	"                       cuInit): each module call's kernels and GPU time, copies, sets,\n"
	"                       device memory events and failed allocations\n"
	"      --ringbuf-mb N   BPF ring buffer size in MiB, a power of two (default 16)\n"
	"      --phase NAME=[MODULE:]QUALNAME\n"
	"                       name the phase of a forward by a Python function on the stack\n"
	"                       when it starts (globs; MODULE matches the file's dotted path\n"
	"                       from any component on). The innermost matching frame decides,\n"
	"                       the first rule given wins on a tie; the host's own phase()\n"
	"                       markers beat rules. Repeatable. On 3.9/3.10 a\n"
	"                       method's class is found from its first argument's type.\n"
	"      --stats FILE     at the end, write the collector's counters (records, events,\n"
	"                       drops) and its own CPU time and peak RSS as JSON to FILE\n"
	"      --probe-floor[=WHAT]  benchmarking aid: attach empty probes and write no trace\n"
	"                       (what the kernel alone charges; no --out). WHAT: pair (the\n"
	"                       default: a uprobe and a uretprobe where evmbpf's go), entry\n"
	"                       (the uprobe alone), at:ADDRESS (a uprobe at an address of the\n"
	"                       target's interpreter, e.g. a static C function's)\n"
	"  -q, --quiet          no status line while tracing, no summary line at the end\n"
	"  -v, --verbose        say more on stderr (twice: libbpf's debug output too)\n"
	"  -V, --version        print evmbpf's version (and libbpf's, and the trace schema's)\n"
	"  -h, --help           this text\n"
	"\n"
	"Needs root, or CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE. Supports CPython 3.9 to 3.14\n"
	"(release builds with the GIL) and the torch versions listed in docs/tracing.md.\n"
	"\n"
	"EXAMPLES\n"
	"  sudo evmbpf --pid 1234 --out trace.jsonl        attach; Ctrl-C or the target's exit ends it\n"
	"  sudo evmbpf --out trace.jsonl -- python3 eval.py  launch and trace from the first call\n"
	"  sudo evmbpf -p 1234 -o t.jsonl --modules 'layers\\.\\d+$' --tail 5000\n"
	"  sudo evmbpf -p 1234 -o t.jsonl --phase model_forward='lm_eval.models.huggingface:HFLM._model_call'\n"
	"  evmbpf summarize trace.jsonl                    where it stopped, what each module saw\n"
	"  evmbpf show trace.jsonl --forward 3 --module 'layers\\.0\\.'\n"
	"  sudo evmbpf dump --pid 1234                     what each thread is running, in modules\n"
	"  sudo evmbpf doctor --pid 1234                   can it be traced, and if not, why\n"
	"  evmbpf export trace.jsonl -o trace.json          a timeline for Perfetto / chrome://tracing\n";

static int is_reader(const char *cmd)
{
	return !strcmp(cmd, "summarize") || !strcmp(cmd, "show") || !strcmp(cmd, "forwards") ||
	       !strcmp(cmd, "export");
}

/* --probe-floor[=pair|entry|at:ADDRESS] */
static int parse_floor(const char *arg, struct tracer_opts *opts)
{
	opts->probe_floor = FLOOR_PAIR;
	if (!arg || !strcmp(arg, "pair"))
		return 0;
	if (!strcmp(arg, "entry")) {
		opts->probe_floor = FLOOR_ENTRY;
		return 0;
	}
	if (!strncmp(arg, "at:", 3)) {
		char *end;
		errno = 0;
		opts->probe_floor_at = strtoull(arg + 3, &end, 0);
		if (!errno && end != arg + 3 && !*end && opts->probe_floor_at) {
			opts->probe_floor = FLOOR_AT;
			return 0;
		}
	}
	warnx_("--probe-floor=%s: give pair, entry or at:ADDRESS", arg);
	return -1;
}

/* The subcommands, each with its own options: 0 with *rc set when argv names one. */
static int run_subcommand(int argc, char **argv, int *rc)
{
	if (argc < 2)
		return -1;
	if (is_reader(argv[1]))
		*rc = readers_main(argc - 1, argv + 1);
	else if (!strcmp(argv[1], "dump"))
		*rc = dump_main(argc - 1, argv + 1);
	else if (!strcmp(argv[1], "doctor"))
		*rc = doctor_main(argc - 1, argv + 1);
	else if (!strcmp(argv[1], "record"))
		*rc = record_main(argc - 1, argv + 1);
	else
		return -1;
	return 0;
}

/* --pid PID[,PID...], repeatable: into opts->pids (room for 256) */
static int parse_pids(char *arg, struct tracer_opts *opts)
{
	long v;
	for (char *tok = strtok(arg, ","); tok; tok = strtok(NULL, ",")) {
		if (parse_long(tok, "--pid", 1, INT_MAX, &v))
			return -1;
		int seen = 0;
		for (int i = 0; i < opts->npids && !seen; i++)
			seen = opts->pids[i] == (pid_t)v;
		if (seen) {
			/* one session a process: two would probe it twice and race for its file */
			warnx_("--pid %ld is given more than once: it is traced once", v);
			continue;
		}
		if (opts->npids == 256) {
			warnx_("at most 256 --pid");
			return -1;
		}
		opts->pids[opts->npids++] = (pid_t)v;
	}
	if (!opts->npids && parse_long(arg, "--pid", 1, INT_MAX, &v))
		return -1;
	opts->pid = opts->pids[0];
	return 0;
}

/* --phase NAME=[MODULE:]QUALNAME, repeatable */
static int parse_phase(const char *arg, struct tracer_opts *opts)
{
	static struct phase_rule rules[32];
	if (opts->trace.nrules == 32) {
		warnx_("at most 32 --phase rules");
		return -1;
	}
	if (phase_rule_parse(arg, &rules[opts->trace.nrules])) {
		warnx_("--phase wants NAME=[MODULE:]QUALNAME, e.g. "
		       "model_forward='lm_eval.models.huggingface:HFLM._model_call', not '%s'",
		       arg);
		return -1;
	}
	opts->trace.rules = rules;
	opts->trace.nrules++;
	return 0;
}

/* what getopt_long could not take: one line, what was wrong, and where to look */
static void say_bad_option(int c, char **argv)
{
	if (c == ':')
		warnx_("%s needs a value (see evmbpf --help)", argv[optind - 1]);
	else if (!strncmp(argv[optind - 1], "--", 2))
		warnx_("unknown option, or a value it does not take: '%s' (see evmbpf "
		       "--help)", argv[optind - 1]);
	else
		warnx_("unknown option -%c (see evmbpf --help)", optopt);
}

/* One option of the tracer's (c as getopt_long gives it): -1 to go on, else the exit
 * status evmbpf ends with (0 after --version and --help, 2 for a bad option). */
static int take_option(int c, char **argv, struct tracer_opts *opts)
{
	int shared = option_shared(c, optarg, opts);
	if (shared)
		return shared > 0 ? -1 : 2;
	switch (c) {
	case 'p':
		return parse_pids(optarg, opts) ? 2 : -1;
	case 'f':
		opts->follow = 1;
		return -1;
	case 'o':
		if (!*optarg) {
			warnx_("--out must name a file");
			return 2;
		}
		opts->out = optarg;
		return -1;
	case 'F':
		opts->force = 1;
		return -1;
	case 'P':
		return parse_phase(optarg, opts) ? 2 : -1;
	case 'S':
		opts->stats = optarg;
		return -1;
	case 'B':
		return parse_floor(optarg, opts) ? 2 : -1;
	case 'q':
		opts->quiet = 1;
		return -1;
	case 'C':
		opts->cupti = 1;
		return -1;
	case 'V':
		printf("evmbpf %s (libbpf %u.%u, trace schema 1.1)\n", EVMBPF_VERSION,
		       libbpf_major_version(), libbpf_minor_version());
		return 0;
	case 'h':
		fputs(usage, stdout);
		return 0;
	default:
		say_bad_option(c, argv);
		return 2;
	}
}

/* The options taken together: 0 when they make a session, -1 (said) when not. */
static int check_options(const struct tracer_opts *opts)
{
	if (!opts->out && !opts->probe_floor) {
		warnx_("--out FILE is required (see evmbpf --help)");
		return -1;
	}
	if (!opts->pid == !opts->command) {
		warnx_(opts->pid ? "give either --pid or a command after --, not both"
				 : "give --pid PID, or a command after -- (see evmbpf --help)");
		return -1;
	}
	if (opts->out) {
		const char *problem = out_pattern_problem(opts->out,
							  opts->follow || opts->npids > 1);
		if (problem) {
			warnx_("%s", problem);
			return -1;
		}
	}
	if (opts->trace.numeric && opts->follow) {
		warnx_("--numeric and --stop-on-nonfinite take several --pid, not --follow (a "
		       "followed process is held at its exec, where its threads cannot be seized)");
		return -1;
	}
	if (opts->cupti && opts->pid) {
		warnx_("--cupti works in launch mode only (the CUPTI agent is loaded by CUDA at the "
		       "command's start): give a command after --; --pid still gives each call's mem");
		return -1;
	}
	if (opts->cupti && opts->follow) {
		warnx_("--cupti traces one launched command: leave out --follow");
		return -1;
	}
	if (opts->probe_floor && (opts->follow || opts->npids > 1)) {
		warnx_("--probe-floor takes one --pid, without --follow");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int rc;
	if (!run_subcommand(argc, argv, &rc))
		return rc;

	static const struct option longopts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "follow", no_argument, NULL, 'f' },
		{ "out", required_argument, NULL, 'o' },
		OPTIONS_SHARED,
		{ "force", no_argument, NULL, 'F' },
		{ "phase", required_argument, NULL, 'P' },
		{ "stats", required_argument, NULL, 'S' },
		{ "probe-floor", optional_argument, NULL, 'B' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "cupti", no_argument, NULL, 'C' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct tracer_opts opts = { .ringbuf_mb = RINGBUF_MB_TRACER };
	int c;
	opterr = 0;
	static pid_t pids[256];
	opts.pids = pids;
	while ((c = getopt_long(argc, argv, "+:p:o:m:t:fqvVh", longopts, NULL)) != -1)
		if ((rc = take_option(c, argv, &opts)) >= 0)
			return rc;
	if (optind < argc)
		opts.command = argv + optind;
	if (check_options(&opts))
		return 2;
	/* the mode, once: the drivers and what they run take it from here */
	opts.mode = opts.follow || opts.npids > 1 ? TRACE_JOB : opts.command ? TRACE_COMMAND
									 : TRACE_PID;
	opts.launched = opts.command != NULL;
	return tracer_run(&opts);
}
