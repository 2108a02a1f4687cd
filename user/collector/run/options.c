/* The options the tracer and the recorder share (options.h). */
#include "options.h"

#include "modfilter.h"
#include "util.h"

int option_shared(int c, const char *arg, struct tracer_opts *opts)
{
	long v;
	switch (c) {
	case 'm':
		/* compiled now, so that a bad pattern is said before anything is traced (the
		 * recorder would fail every process of the node on it) */
		if (modfilter_check(arg))
			return -1;
		opts->trace.modules = arg;
		return 1;
	case 't':
		if (parse_long(arg, "--tail", 1, 100000000, &v))
			return -1;
		opts->trace.tail = v;
		return 1;
	case 'R':
		if (parse_long(arg, "--ringbuf-mb", 1, 1024, &v))
			return -1;
		if (v & (v - 1)) {
			warnx_("--ringbuf-mb must be a power of two, not %ld", v);
			return -1;
		}
		opts->ringbuf_mb = v;
		return 1;
	case 'N':
		opts->trace.numeric = 1;
		return 1;
	case 'X':
		opts->trace.stop_on_nonfinite = 1;
		opts->trace.numeric = 1; /* it implies --numeric */
		return 1;
	case 'v':
		verbose++;
		return 1;
	}
	return 0;
}
