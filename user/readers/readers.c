/* evmbpf summarize | show | forwards | export: read a trace after the fact, no root
 * needed.
 *
 * Argument parsing and finding the trace file; the work is in reader_summary.c,
 * reader_show.c, reader_forwards.c and export.c. The first three print the reference
 * reader's text (evalmetry/debug.py), byte for byte; diagnostics go to stderr. */
#include "readers.h"
#include "reader_tty.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "reader_cmds.h"
#include "reader_dir.h"
#include "reader_job.h"
#include "reader_trace.h"

#define EXIT_USAGE 2

struct opts {
	const char *cmd;
	const char *trace;
	long long tail;
	long long forward;
	int have_forward;
	const char *module;
	int json;
	enum rd_export_format format;
	const char *output;
	int force;
	int help;
	char *traces[256]; /* summarize: every TRACE given (a job's, reader_job.c) */
	int ntraces;
};

static const char usage_text[] =
	"USAGE:\n"
	"  evmbpf summarize TRACE|DIR [TRACE...] [--tail N]\n"
	"  evmbpf show TRACE --forward N [--module REGEX]\n"
	"  evmbpf forwards TRACE [--json]\n"
	"  evmbpf export TRACE [--format chrome|speedscope] [-o FILE [--force]]\n"
	"\n"
	"TRACE is a trace .jsonl file, or a run directory holding debug/*.jsonl\n"
	"(debug/trace.jsonl first).\n"
	"\n"
	"  summarize   how far the run got, where it stopped, and on whose behalf\n"
	"    -n, --tail N        module events listed before the failure (default 10)\n"
	"                a job's traces (several TRACEs, or a DIR of them): a line a process,\n"
	"                the one that failed first, where each other was when it ended\n"
	"                a DIR `evmbpf record` wrote: what died on the node, first failure\n"
	"                first, each with its summary; the live tails (--flush) apart\n"
	"  show        every module one forward ran, with what went in and out\n"
	"    -f, --forward N     the forward to show (see `evmbpf forwards`)\n"
	"    -m, --module REGEX  only modules matching this Python regular expression\n"
	"  forwards    the forwards in the trace: number, modules, phase, documents\n"
	"    --json              as JSON, one object a forward\n"
	"  export      the trace as a timeline: one slice a module call, per thread\n"
	"    --format chrome     Trace Event JSON, for Perfetto (ui.perfetto.dev) and\n"
	"                        chrome://tracing (the default)\n"
	"    --format speedscope speedscope's evented format (speedscope.app, or the\n"
	"                        `speedscope` npm package)\n"
	"    -o, --output FILE   write it here (mode 0600) instead of to stdout; never over\n"
	"                        an existing file unless --force\n"
	"\n"
	"EXAMPLES:\n"
	"  evmbpf summarize run/debug/trace.jsonl\n"
	"  evmbpf show run --forward 3 --module 'layers\\.0\\.'\n"
	"  evmbpf forwards run --json\n"
	"  evmbpf export run/debug/trace.jsonl -o trace.json          then open it in Perfetto\n"
	"  evmbpf export trace.jsonl --format speedscope -o trace.speedscope.json\n";

static int usage_error(const char *fmt, const char *arg)
{
	fputs("evmbpf: ", stderr);
	fprintf(stderr, fmt, arg);
	fputs("\n", stderr);
	fputs(usage_text, stderr);
	return EXIT_USAGE;
}

static int parse_int(const char *text, long long *out)
{
	char *end;

	errno = 0;
	*out = strtoll(text, &end, 10);
	return errno == 0 && end != text && *end == '\0';
}

/* The value of --name VALUE or --name=VALUE at argv[*i], or NULL. */
static const char *value_of(int argc, char **argv, int *i, const char *lng, const char *shrt)
{
	const char *a = argv[*i];
	size_t n = strlen(lng);

	if (strncmp(a, lng, n) == 0 && a[n] == '=')
		return a + n + 1;
	if (strcmp(a, lng) != 0 && !(shrt && strcmp(a, shrt) == 0))
		return NULL;
	if (*i + 1 >= argc)
		return "";
	return argv[++*i];
}

static int parse_option(struct opts *o, int argc, char **argv, int *i)
{
	const char *v;

	if ((v = value_of(argc, argv, i, "--tail", "-n")) && strcmp(o->cmd, "summarize") == 0) {
		if (!parse_int(v, &o->tail))
			return usage_error("--tail wants a whole number, not '%s'", v);
	} else if ((v = value_of(argc, argv, i, "--forward", "-f")) && strcmp(o->cmd, "show") == 0) {
		if (!parse_int(v, &o->forward))
			return usage_error("--forward wants a forward number, not '%s'", v);
		o->have_forward = 1;
	} else if ((v = value_of(argc, argv, i, "--module", "-m")) && strcmp(o->cmd, "show") == 0) {
		o->module = v;
	} else if (strcmp(argv[*i], "--json") == 0 && strcmp(o->cmd, "forwards") == 0) {
		o->json = 1;
	} else if ((v = value_of(argc, argv, i, "--format", NULL)) &&
		   strcmp(o->cmd, "export") == 0) {
		if (rd_export_format_of(v, &o->format) < 0)
			return usage_error("--format is chrome or speedscope, not '%s'", v);
	} else if ((v = value_of(argc, argv, i, "--output", "-o")) &&
		   strcmp(o->cmd, "export") == 0) {
		if (!*v)
			return usage_error("%s", "--output wants a file name (or - for stdout)");
		o->output = v;
	} else if (strcmp(argv[*i], "--force") == 0 && strcmp(o->cmd, "export") == 0) {
		o->force = 1;
	} else if (strcmp(argv[*i], "-h") == 0 || strcmp(argv[*i], "--help") == 0) {
		o->help = 1;
	} else {
		return usage_error("unknown option '%s' (see the usage below)", argv[*i]);
	}
	return 0;
}

static int parse_args(struct opts *o, int argc, char **argv)
{
	int rc;

	memset(o, 0, sizeof(*o));
	o->cmd = argv[0];
	o->tail = 10;
	for (int i = 1; i < argc; i++) {
		if (argv[i][0] == '-' && argv[i][1] != '\0' && strcmp(argv[i], "--") != 0) {
			if ((rc = parse_option(o, argc, argv, &i)) != 0)
				return rc;
			continue;
		}
		if (strcmp(argv[i], "--") == 0 && i + 1 < argc)
			i++;
		if (o->trace && strcmp(o->cmd, "summarize") != 0)
			return usage_error("one TRACE only; '%s' is a second one", argv[i]);
		if (!o->trace)
			o->trace = argv[i];
		if (o->ntraces < (int)(sizeof(o->traces) / sizeof(o->traces[0])))
			o->traces[o->ntraces++] = argv[i];
	}
	if (o->help)
		return 0;
	if (!o->trace)
		return usage_error("%s needs a TRACE: a .jsonl file or a run directory", o->cmd);
	if (strcmp(o->cmd, "show") == 0 && !o->have_forward)
		return usage_error("%s needs --forward N (`evmbpf forwards TRACE` lists them)",
				   o->cmd);
	return 0;
}

static int run(const struct opts *o, FILE *in, const char *file)
{
	struct pyre *re;
	char why[512];
	int rc;

	if (strcmp(o->cmd, "summarize") == 0)
		return rd_summarize(in, file, o->trace, o->tail, stdout);
	if (strcmp(o->cmd, "forwards") == 0)
		return rd_forwards(in, file, o->json, stdout);
	if (strcmp(o->cmd, "export") == 0)
		return rd_export_to(in, file, o->format, o->output, o->force);
	if (!o->module || !*o->module)
		return rd_show(in, file, o->forward, o->module, NULL, stdout);
	if (!(re = pyre_compile(o->module, why, sizeof(why)))) {
		warnx_("--module %s", why);
		return EXIT_USAGE;
	}
	rc = rd_show(in, file, o->forward, o->module, re, stdout);
	pyre_free(re);
	return rc;
}

int readers_main(int argc, char **argv)
{
	struct opts o;
	char *file, *err;
	FILE *in;
	int rc;

	if (argc < 1)
		return usage_error("%s", "no command");
	if ((rc = parse_args(&o, argc, argv)) != 0)
		return rc;
	if (o.help) {
		fputs(usage_text, stdout);
		return 0;
	}
	rd_stdout_for_terminal(); /* what the target named reaches a terminal escaped */
	/* a testing knob: small reads split lines (and \r\n) across reads */
	if (getenv("EVMBPF_READ_CHUNK"))
		rd_read_chunk = (size_t)strtoul(getenv("EVMBPF_READ_CHUNK"), NULL, 10);
	if (strcmp(o.cmd, "summarize") == 0 && o.ntraces == 1 &&
	    (rc = rd_dir_main(o.trace, o.tail)) >= 0) /* a recorder's DIR (reader_dir.c) */
		return rc;
	if (strcmp(o.cmd, "summarize") == 0) { /* a job's traces (reader_job.c) */
		rc = rd_job_main(o.traces, o.ntraces, o.tail);
		if (rc >= 0)
			return rc;
	}
	file = rd_resolve_trace(o.trace, &err);
	if (!file) {
		fprintf(stderr, "%s\n", err);
		free(err);
		return 1;
	}
	in = rd_open_trace(file);
	if (!in) {
		free(file);
		return 1;
	}
	rc = run(&o, in, file);
	if (fflush(stdout) != 0 && rc == 0) {
		warnx_("writing the output failed: %s", strerror(errno));
		rc = 1;
	}
	fclose(in);
	free(file);
	return rc;
}
