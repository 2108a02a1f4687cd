/* evmbpf record: its options, and --flush, the request to a running recorder
 * (docs/record.md). The recording itself is job.c's loop with record.c's source. */
#include "record.h"
#include "record_cli.h"
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "retention.h"
#include "tracer_run.h"
#include "util.h"

static const char usage[] =
	"USAGE\n"
	"  evmbpf record --dir DIR [--tail N] [--match REGEX] [--cgroup PATH]\n"
	"                [--max-memory SIZE] [--max-disk SIZE] [--max-dir-size SIZE]\n"
	"                [--keep-free SIZE] [--keep-all] [--hang-after SECONDS]\n"
	"                [--stop-on-nonfinite] [-v]\n"
	"  evmbpf record --flush [--pid PID]\n"
	"\n"
	"A flight recorder for the whole node: every Python process (those running now, and\n"
	"each later one a moment after its exec) is traced, its last N events kept in\n"
	"memory, and a trace written to DIR only for a process that ends badly: an uncaught\n"
	"exception, a signal (the OOM killer named), a non-zero exit status, a non-finite\n"
	"output (--stop-on-nonfinite). A process that exits 0 leaves nothing. Runs until\n"
	"SIGTERM or SIGINT; every target runs on. See docs/record.md.\n"
	"\n"
	"OPTIONS\n"
	"      --dir DIR          where traces go: DIR/evmbpf-PID[-rankR]@HOST.jsonl, a job's\n"
	"                         ranks in DIR/job-ID/ (TORCHELASTIC_RUN_ID, else port-MASTER_PORT)\n"
	"  -t, --tail N           events kept a process (default 5000)\n"
	"      --match REGEX      only processes whose command line the Python regular\n"
	"                         expression finds (re.search)\n"
	"      --cgroup PATH      only processes in this cgroup (v2) or below it\n"
	"      --max-memory SIZE  every tail together (default 512M; K, M, G): each live\n"
	"                         process keeps its share, the oldest events go first\n"
	"      --max-disk SIZE    the traces this recorder writes (default 4G; K, M, G): a\n"
	"                         user's processes at most half of it\n"
	"      --max-dir-size SIZE  the recorder's files in DIR, old and new (default 10% of\n"
	"                         DIR's file system, at most 4G): the oldest removed first\n"
	"      --keep-free SIZE   what DIR's file system keeps free once a trace is written\n"
	"                         (default 15% of it, at most 4G; 0: not looked at): the\n"
	"                         oldest files removed first; a trace with no room is not written\n"
	"      --keep-all         write every process's tail at its end, whatever the end\n"
	"      --hang-after SECONDS  a thread inside a module call that long with no module\n"
	"                         event of its own (a hang): its process's live tail written\n"
	"                         once (DIR/...flush-K.jsonl, as --flush), and said\n"
	"      --numeric          tensor stats of CPU tensors (see evmbpf --help)\n"
	"      --stop-on-nonfinite  a process whose module output holds a NaN or an Inf: its\n"
	"                         trace ends there and is written, the process is stopped\n"
	"  -m, --modules REGEX    trace only modules whose path matches\n"
	"      --ringbuf-mb N     each process's BPF ring buffer, MiB, a power of two (default 2)\n"
	"      --flush            ask the running recorder to write the live tails now\n"
	"                         (DIR/...evmbpf-PID@HOST.flush-K.jsonl): for a hang\n"
	"  -p, --pid PID          with --flush: that process's alone\n"
	"  -v, --verbose          say more (repeat for more)\n"
	"  -h, --help             this text\n";

/* DIR: a directory evmbpf may write in, made when its parent exists. */
/* The recorder writes every user's traces into --dir as root: a folder anyone else can
 * write (or any folder above it that anyone else can rename it in) would let them take
 * a trace's name first, or put another folder in its place. Each of dir and the folders
 * above it: owned by root, and written by no one else (a folder above it may be
 * sticky: /tmp). 0, or -1 with the reason said. */
static int check_dir_owner(const char *dir)
{
	char path[PATH_MAX];
	if (!realpath(dir, path)) {
		warnx_("--dir %s: %s", dir, strerror(errno));
		return -1;
	}
	for (int first = 1;; first = 0) {
		struct stat st;
		if (lstat(path, &st)) {
			warnx_("--dir %s: %s: %s", dir, path, strerror(errno));
			return -1;
		}
		int others = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
		if (st.st_uid != 0 || (others && (first || !(st.st_mode & S_ISVTX)))) {
			warnx_("--dir %s: %s is %s: whoever can write there can take a trace's name "
			       "first, or put another folder in its place; use a folder that only "
			       "root can write (chown root, chmod go-w)", dir, path,
			       st.st_uid != 0 ? "not owned by root" : "writable by others than root");
			return -1;
		}
		char *slash = strrchr(path, '/');
		if (!slash || slash == path) {
			if (slash && path[1]) { /* the root folder itself is the last one */
				path[1] = 0;
				continue;
			}
			return 0;
		}
		*slash = 0;
	}
}

static int check_dir(const char *dir)
{
	struct stat st;
	if (stat(dir, &st) && errno == ENOENT && mkdir(dir, 0700) == 0)
		return check_dir_owner(dir);
	if (stat(dir, &st)) {
		warnx_("--dir %s: %s", dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		warnx_("--dir %s is not a directory (name a directory for the traces)", dir);
		return -1;
	}
	if (access(dir, W_OK | X_OK)) {
		warnx_("--dir %s cannot be written: %s", dir, strerror(errno));
		return -1;
	}
	return check_dir_owner(dir);
}

/* The recorder's attaches hold each new Python at its exec until its probes are placed:
 * on a node whose CPUs its workloads fill, the recorder must not wait behind them (64
 * processes started together on 2 CPUs: the last attached 65 s after its start at nice 0,
 * 12.7 s at -10; the recorder's CPU in all, 4 s). Its own CPU is small, so it runs at
 * nice RECORD_NICE, unless it was started at another nice than 0 (systemd's Nice=, nice
 * -n): that one is kept. */
#define RECORD_NICE -10
static void record_priority(void)
{
	errno = 0;
	int now = getpriority(PRIO_PROCESS, 0);
	if (errno || now != 0)
		return;
	if (setpriority(PRIO_PROCESS, 0, RECORD_NICE))
		warnx_("warning: cannot run at nice %d: %s (new processes then wait behind the "
		       "node's work for their attach)", RECORD_NICE, strerror(errno));
	else
		debugx("running at nice %d", RECORD_NICE);
}

enum { OPT_DIR = 256, OPT_MATCH, OPT_CGROUP, OPT_MAXMEM, OPT_MAXDISK, OPT_MAXDIR, OPT_KEEPFREE,
       OPT_KEEP, OPT_FLUSH, OPT_HANG };

int record_main(int argc, char **argv)
{
	/* the recorder's files hold every user's processes: they stay root's (0600), never
	 * given to whoever ran sudo (sink.c gives a --pid or launched trace to that user) */
	unsetenv("SUDO_UID");
	unsetenv("SUDO_GID");
	static const struct option longopts[] = {
		OPTIONS_SHARED,
		{ "dir", required_argument, NULL, OPT_DIR },
		{ "match", required_argument, NULL, OPT_MATCH },
		{ "cgroup", required_argument, NULL, OPT_CGROUP },
		{ "max-memory", required_argument, NULL, OPT_MAXMEM },
		{ "max-disk", required_argument, NULL, OPT_MAXDISK },
		{ "max-dir-size", required_argument, NULL, OPT_MAXDIR },
		{ "keep-free", required_argument, NULL, OPT_KEEPFREE },
		{ "keep-all", no_argument, NULL, OPT_KEEP },
		{ "hang-after", required_argument, NULL, OPT_HANG },
		{ "flush", no_argument, NULL, OPT_FLUSH },
		{ "pid", required_argument, NULL, 'p' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct tracer_opts opts = { .mode = TRACE_NODE, .ringbuf_mb = RINGBUF_MB_RECORDER,
				    .quiet = 1 };
	opts.trace.tail = 5000;
	opts.record.max_memory = 512ull << 20;
	opts.record.max_disk = 4ull << 30;
	int flush = 0, c;
	int64_t max_dir = -1, keep_free = -1;
	long v;
	pid_t pid = 0;
	optind = 1;
	while ((c = getopt_long(argc, argv, ":t:m:p:vh", longopts, NULL)) != -1) {
		int shared = option_shared(c, optarg, &opts);
		if (shared < 0)
			return 2;
		if (shared)
			continue;
		switch (c) {
		case OPT_DIR: opts.record.dir = optarg; break;
		case OPT_MATCH: opts.record.match = optarg; break;
		case OPT_CGROUP: opts.record.cgroup = optarg; break;
		case OPT_MAXMEM:
		case OPT_MAXDISK: {
			int64_t size = record_parse_size(optarg);
			if (size <= 0) {
				warnx_("%s must be a size (a whole number of bytes, or with K, M or G), "
				       "not '%s'", c == OPT_MAXMEM ? "--max-memory" : "--max-disk", optarg);
				return 2;
			}
			*(c == OPT_MAXMEM ? &opts.record.max_memory : &opts.record.max_disk) =
				(uint64_t)size;
			break;
		}
		case OPT_MAXDIR:
		case OPT_KEEPFREE: {
			/* --keep-free 0: the free space is not looked at */
			int64_t size = c == OPT_KEEPFREE && !strcmp(optarg, "0") ? 0
				: record_parse_size(optarg);
			if (size < 0) {
				warnx_("%s must be a size (a whole number of bytes, or with K, M or G), "
				       "not '%s'", c == OPT_MAXDIR ? "--max-dir-size" : "--keep-free",
				       optarg);
				return 2;
			}
			*(c == OPT_MAXDIR ? &max_dir : &keep_free) = size;
			break;
		}
		case OPT_KEEP: opts.record.keep_all = 1; break;
		case OPT_HANG: {
			char *end;
			errno = 0;
			double s = strtod(optarg, &end);
			if (end == optarg || *end || errno || !(s > 0) || s > 1e6) {
				warnx_("--hang-after must be a number of seconds above 0 (at most a "
				       "million), not '%s'", optarg);
				return 2;
			}
			opts.record.hang_after_ns = (uint64_t)(s * 1e9);
			break;
		}
		case OPT_FLUSH: flush = 1; break;
		case 'p':
			if (parse_long(optarg, "--pid", 1, INT_MAX, &v))
				return 2;
			pid = (pid_t)v;
			break;
		case 'h': fputs(usage, stdout); return 0;
		default: return bad_option("record", c, argv);
		}
	}
	if (optind < argc) {
		warnx_("record takes no arguments (%s): see evmbpf record --help", argv[optind]);
		return 2;
	}
	if (flush)
		return record_flush_send(pid);
	if (pid) {
		warnx_("record: --pid goes with --flush (the recorder traces every process)");
		return 2;
	}
	if (!opts.record.dir) {
		warnx_("record needs --dir DIR: where the traces of the processes that end badly go");
		return 2;
	}
	if (check_dir(opts.record.dir))
		return 1;
	retention_set(max_dir, keep_free);
	record_priority();
	return tracer_run(&opts);
}
