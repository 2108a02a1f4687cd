/* JSON output as Python's json.dumps writes it: ", " and ": " separators, ASCII only
 * (\uXXXX escapes), floats as repr() (so 1.0 reads back as a float), and the non-finite
 * values as the strings "nan", "inf", "-inf" (the reference's _jsonable). */
#ifndef EVMBPF_JSONW_H
#define EVMBPF_JSONW_H

#include <stdint.h>
#include "util.h"

/* A UTF-8 string, escaped. Invalid bytes become U+FFFD. */
void jw_str(struct buf *b, const char *s, size_t n);
void jw_cstr(struct buf *b, const char *s);
/* Code points, escaped. */
void jw_codepoints(struct buf *b, const uint32_t *cp, size_t n);
void jw_float(struct buf *b, double v);
void jw_int(struct buf *b, int64_t v);
void jw_bool(struct buf *b, int v);
void jw_null(struct buf *b);
/* `"key": ` preceded by ", " unless *first. */
void jw_key(struct buf *b, int *first, const char *key);

#endif
