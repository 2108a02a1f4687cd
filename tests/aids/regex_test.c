/* `evmbpf-test-aids regex-test` (tests/test_regex.py): Python's `re` dialect (pyre.c)
 * for the differential tests. Each stdin line is a pattern and texts, hex-encoded
 * UTF-8 ("-": empty), space-separated; each output line is "E <message>" (the pattern
 * refused), or "M ", one digit a text (1 match, 0 none, 2 the matcher gave up), a space
 * and the PCRE2 pattern it runs as. A pattern holding a NUL, or hex that does not
 * decode, is "E bad test input". */
#include "aids.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pyre.h"

struct bytes {
	char *p;
	size_t len, cap;
};

/* tok's hex into out (NUL-terminated); -1 when it does not decode, or holds a NUL and
 * nul_ok is 0 */
static int unhex(const char *tok, struct bytes *out, int nul_ok)
{
	size_t n = strlen(tok);
	out->len = 0;
	if (out->cap < n / 2 + 1) {
		out->cap = n / 2 + 1;
		out->p = realloc(out->p, out->cap);
		if (!out->p) {
			perror("regex-test");
			exit(1);
		}
	}
	out->p[0] = 0;
	if (!strcmp(tok, "-"))
		return 0;
	if (n % 2)
		return -1;
	for (size_t i = 0; i < n; i += 2) {
		unsigned v;
		if (sscanf(tok + i, "%2x", &v) != 1 || (!v && !nul_ok))
			return -1;
		out->p[out->len++] = (char)v;
	}
	out->p[out->len] = 0;
	return 0;
}

int regex_test_main(void)
{
	char *line = NULL;
	size_t cap = 0;
	struct bytes pat = { 0 }, text = { 0 };
	while (getline(&line, &cap, stdin) > 0) {
		char *save = NULL, *tok = strtok_r(line, " \n", &save);
		char msg[512];
		if (!tok || unhex(tok, &pat, 0) < 0) {
			printf("E bad test input\n");
			continue;
		}
		struct pyre *re = pyre_compile(pat.p, msg, sizeof(msg));
		if (!re) {
			printf("E %s\n", msg);
			continue;
		}
		fputs("M ", stdout);
		while ((tok = strtok_r(NULL, " \n", &save))) {
			int rc = unhex(tok, &text, 1) < 0 ? -1 : pyre_search(re, text.p, text.len);
			putchar(rc < 0 ? '2' : '0' + rc);
		}
		printf(" %s\n", pyre_pcre2(re));
		pyre_free(re);
	}
	free(line);
	free(pat.p);
	free(text.p);
	return 0;
}
