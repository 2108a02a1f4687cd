#include "status.h"

#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util.h"

/* the one status line on the screen, for clear_line() from warnx_()/debugx() */
static struct status *on_screen;

static double now_s(void)
{
	return mono_ns() / 1e9;
}

static const char *plural(uint64_t n)
{
	return n == 1 ? "" : "s";
}

static void clear_line(void)
{
	if (on_screen && on_screen->shown) {
		fputs("\r\033[K", stderr);
		on_screen->shown = 0;
	}
}

static void human_bytes(char *dst, size_t n, double v)
{
	static const char *units[] = { "B", "kB", "MB", "GB", "TB" };
	int u = 0;
	while (v >= 1000 && u < 4) {
		v /= 1000;
		u++;
	}
	snprintf(dst, n, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

/* The trace file's size now, or -1 (stdout, or not a file). */
static long long out_size(const struct status *st, const struct trace *t)
{
	struct stat sb;
	if (!strcmp(st->out, "-"))
		return -1;
	int fd = trace_out_fd(t);
	if (fd >= 0 ? fstat(fd, &sb) : stat(st->out, &sb))
		return -1;
	return S_ISREG(sb.st_mode) ? (long long)sb.st_size : -1;
}

static const char *current_phase(struct status *st, const struct trace *t)
{
	snprintf(st->phase, sizeof(st->phase), "%s", trace_current_phase(t));
	return st->phase[0] ? st->phase : "-";
}

void status_start(struct status *st, int quiet, const char *out)
{
	memset(st, 0, sizeof(*st));
	st->quiet = quiet;
	st->out = out ? out : "-";
	st->live = !quiet && isatty(STDERR_FILENO);
	st->t0 = st->last = now_s();
	if (st->live) {
		on_screen = st;
		diagnostic_hook = clear_line;
	}
}

void status_tick(struct status *st, const struct trace *t, uint64_t dropped)
{
	if (!st->live)
		return;
	double now = now_s();
	if (now - st->last < 1.0)
		return;
	double rate = (double)(trace_events(t) - st->last_events) / (now - st->last);
	st->last = now;
	st->last_events = trace_events(t);

	char line[512], size[32];
	int n = snprintf(line, sizeof(line), "%llu event%s (%.0f/s), %lld forward%s, phase %s, "
			 "%llu dropped", (unsigned long long)trace_events(t), plural(trace_events(t)), rate,
			 (long long)trace_forward_id(t), plural((uint64_t)trace_forward_id(t)),
			 current_phase(st, t), (unsigned long long)dropped);
	long long bytes = out_size(st, t);
	if (trace_tail_lines(t) > 0)
		n += snprintf(line + n, sizeof(line) - (size_t)n, ", last %ld kept in memory",
			      trace_tail_lines(t));
	else if (bytes >= 0) {
		human_bytes(size, sizeof(size), (double)bytes);
		n += snprintf(line + n, sizeof(line) - (size_t)n, ", %s", size);
	}
	/* never wider than the terminal: a wrapped line could not be redrawn by \r */
	struct winsize ws;
	size_t width = !ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) && ws.ws_col ? ws.ws_col : 80;
	if (strlen(line) > width - 1)
		line[width - 1] = 0;
	fprintf(stderr, "\r%s\033[K", line);
	fflush(stderr);
	st->shown = 1;
}

void status_end(struct status *st, const struct trace *t, uint64_t dropped)
{
	clear_line();
	if (on_screen == st) {
		on_screen = NULL;
		diagnostic_hook = NULL;
	}
	if (st->quiet)
		return;
	char size[40] = "";
	long long bytes = out_size(st, t);
	if (bytes >= 0) {
		strcpy(size, ", ");
		human_bytes(size + 2, sizeof(size) - 2, (double)bytes);
	}
	char tail[48] = "";
	if (trace_tail_lines(t) > 0 && trace_events(t) > (uint64_t)trace_tail_lines(t))
		snprintf(tail, sizeof(tail), " (the last %ld written)", trace_tail_lines(t));
	fprintf(stderr, "evmbpf: %llu event%s%s, %lld forward%s, %llu dropped%s in %.1f s to %s\n",
		(unsigned long long)trace_events(t), plural(trace_events(t)), tail, (long long)trace_forward_id(t),
		plural((uint64_t)trace_forward_id(t)), (unsigned long long)dropped, size, now_s() - st->t0,
		strcmp(st->out, "-") ? st->out : "stdout");
}
