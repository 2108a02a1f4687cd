/* libFuzzer harness for the offline readers: the line splitter, the JSON line parser,
 * the event decoder and the summarize / show / forwards / export logic, on an in-memory
 * trace.
 *
 * The first byte picks the command and its options; the rest is the trace file.
 *   make -C tests fuzz FUZZ_SECONDS=600
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "export.h"
#include "reader_cmds.h"
#include "reader_trace.h"

static FILE *sink;
static struct pyre *layers, *alternation;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	char why[256];

	rd_warn_silent = 1;
	rd_read_chunk = 61;     /* lines split across reads, \r\n split across reads */
	sink = fopen("/dev/null", "w");
	layers = pyre_compile("layers\\.\\d+\\.(?:mlp|attn)$", why, sizeof(why));
	alternation = pyre_compile("^<root>|guard", why, sizeof(why));
	if (!layers || !alternation)
		abort();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned mode;
	char *copy;
	FILE *in;

	if (size < 2)
		return 0;
	mode = data[0];
	copy = malloc(size - 1);
	memcpy(copy, data + 1, size - 1);
	in = fmemopen(copy, size - 1, "r");
	if (!in) {
		free(copy);
		return 0;
	}
	switch (mode % 4) {
	case 0:
		rd_summarize(in, "fuzz", "fuzz", (long long)((mode >> 2) % 5) - 1, sink);
		break;
	case 1:
		rd_show(in, "fuzz", (mode >> 2) % 4, NULL, NULL, sink);
		break;
	case 2:
		rd_show(in, "fuzz", (mode >> 3) % 4, "re", (mode & 4) ? layers : alternation, sink);
		break;
	default:
		if (mode & 8)
			rd_export(in, "fuzz", (mode & 16) ? RD_EXPORT_SPEEDSCOPE : RD_EXPORT_CHROME,
				  sink);
		else
			rd_forwards(in, "fuzz", (mode >> 2) & 1, sink);
	}
	fclose(in);
	free(copy);
	return 0;
}
