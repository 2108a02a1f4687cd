/* One trace line as the Python reference sees it.
 *
 * rd_json_parse() accepts exactly the JSON that Python's json.loads() accepts (less
 * NaN/Infinity literals, which the tracers never write, and lone surrogates, which
 * Python could not print), parses it with cJSON, and then restores what cJSON drops:
 *   - int or float: `1` is a Python int and prints `1`; `1.0` is a float and prints
 *     `1.0`. Each number node's valueint is set to RD_NUM_INT or RD_NUM_FLOAT, and an
 *     int too long for a double keeps its digits in valuestring.
 *   - duplicate keys: Python keeps the first position and the last value.
 *
 * The tree is then read with Python's semantics by reader_pyv.h, and its values used
 * as dict keys by reader_keymap.h.
 */
#ifndef EVMBPF_READER_JSON_H
#define EVMBPF_READER_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

/* what the parsed tree is read with */
#include "reader_keymap.h"
#include "reader_pyv.h"

/* Deepest nesting a line may have; Python's own recursion limit is about 1000. */
#define RD_JSON_DEPTH 500

/* A top-level member of the scanned line: where its key and its value lie. */
struct rd_member {
	size_t koff;
	size_t klen;
	size_t voff;
	size_t vlen;
};

struct rd_json {
	struct rd_numtok *toks;
	size_t ntoks;
	size_t cap;
	struct rd_member *members;
	size_t nmembers;
	size_t mcap;
	int escaped_keys;  /* a top-level key is written with escapes: use the full tree */
	char why[96];      /* why the last line was refused */
};

/* The line as a JSON object, or NULL with p->why set. Free with cJSON_Delete. */
cJSON *rd_json_parse(struct rd_json *p, const char *line, size_t len);

/* The two halves of rd_json_parse, so that a reader can look at a few members of a
 * line without building all of it: rd_json_scan validates the line and notes where
 * its numbers and top-level members are (1, or 0 with p->why set); rd_json_build
 * builds the whole tree, rd_json_value one member's value (both after a scan of the
 * same line). rd_json_member finds the member a dict lookup would return (the last
 * of that key), or -1. */
int rd_json_scan(struct rd_json *p, const char *line, size_t len);
cJSON *rd_json_build(struct rd_json *p, const char *line, size_t len);
long rd_json_member(const struct rd_json *p, const char *line, const char *key);
cJSON *rd_json_value(struct rd_json *p, const char *line, long member);
void rd_json_free(struct rd_json *p);

#endif
