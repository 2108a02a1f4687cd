/* evmbpf forwards: the reference's forward_index(), one line a forward or JSON. */
#include <stdlib.h>
#include <string.h>

#include "reader_cmds.h"
#include "reader_index.h"
#include "reader_trace.h"

static int read_index(struct rd_trace *t, struct rd_index *x)
{
	struct rd_event ev = { 0 };
	int got;

	while ((got = rd_trace_next(t, &ev)) == 1)
		rd_index_add(x, &ev);
	rd_ev_clear(&ev);
	return got;
}

static void print_lines(struct rd_fwd **index, size_t n, const char *file, int unobservable,
			FILE *out)
{
	struct buf b = { 0 };

	if (n == 0)
		warnx_("%s: no forward recorded in this trace", file);
	for (size_t i = 0; i < n; i++) {
		rd_index_line(&b, index[i], unobservable);
		buf_line(&b, out);
	}
	buf_free(&b);
}

int rd_forwards(FILE *in, const char *file, int json, FILE *out)
{
	struct rd_trace t;
	struct rd_index x;
	struct rd_fwd **index;
	size_t n;
	int rc = 0;

	memset(&x, 0, sizeof(x));
	rd_trace_init(&t, in, file);
	if (read_index(&t, &x) < 0) {
		rc = 1;
	} else if (t.events == 0 && t.bad > 0) {
		warnx_("%s: no usable event in the trace (%lld corrupt line%s); no forward to "
			"list", file, t.bad, t.bad == 1 ? "" : "s");
		rc = 1;
	} else {
		n = rd_index_sorted(&x, &index);
		if (json)
			rd_index_json(out, index, n);
		else
			print_lines(index, n, file, t.samples_unobservable, out);
		free(index);
	}
	rd_index_free(&x);
	rd_trace_free(&t);
	return rc;
}
