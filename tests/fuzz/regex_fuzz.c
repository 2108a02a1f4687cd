/* libFuzzer harness for the --module translation (Python re -> POSIX ERE). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reader_cmds.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rd_buf err = { 0 };
	regex_t re;
	char *pattern;

	if (size > 24)                 /* regcomp itself is exponential in some patterns */
		return 0;
	pattern = malloc(size + 1);
	memcpy(pattern, data, size);
	pattern[size] = '\0';
	if (!strchr(pattern, '{') && rd_regex_compile(pattern, &re, &err) == 0) {
		rd_regex_search(&re, "model.layers.10.self_attn");
		rd_regex_free(&re);
	}
	rd_buf_free(&err);
	free(pattern);
	return 0;
}
