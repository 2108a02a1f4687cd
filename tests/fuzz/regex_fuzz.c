/* libFuzzer harness for the Python re front end over PCRE2 (user/common/pyre.c):
 * any bytes as a pattern, then a search in a module path and in the pattern itself. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pyre.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char msg[512];
	char *pattern;
	struct pyre *re;

	if (size > 4096)
		return 0;
	pattern = malloc(size + 1);
	memcpy(pattern, data, size);
	pattern[size] = '\0';
	re = pyre_compile(pattern, msg, sizeof(msg));
	if (re) {
		pyre_search(re, "model.layers.10.self_attn", 25);
		pyre_search(re, pattern, strlen(pattern));
		pyre_free(re);
	} else if (!memchr(msg, '\0', sizeof(msg)) || !msg[0]) {
		abort();   /* every refusal says why */
	}
	free(pattern);
	return 0;
}
