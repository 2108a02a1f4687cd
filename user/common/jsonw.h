/* JSON text: evmbpf's one writer of JSON strings, and the scalars of the trace.
 *
 * As Python's json.dumps writes it: ", " and ": " separators, ASCII only (\uXXXX
 * escapes), floats as repr() (so 1.0 reads back as a float), and the non-finite values
 * as the strings "nan", "inf", "-inf" (the reference's _jsonable). The timeline exports
 * (the readers' export_*.c) write their strings in UTF-8 instead: jw_str_utf8. */
#ifndef EVMBPF_JSONW_H
#define EVMBPF_JSONW_H

#include <stdint.h>
#include "util.h"

/* A UTF-8 string, escaped as json.dumps does. An invalid byte is written as the lone
 * surrogate Python's surrogateescape makes of it (\udcXX), and the three-byte form of
 * a surrogate as that surrogate: the text of a str read from the target, whose lone
 * surrogates json.dumps writes so (pyfmt.h, pyfmt_utf8_next). */
void jw_str(struct buf *b, const char *s, size_t n);
void jw_cstr(struct buf *b, const char *s);
/* A string for the timeline exports: its bytes from 0x80 up as they are (UTF-8 for
 * the viewers), '"' and '\\' escaped, \n and \t by their short escapes, every other
 * control character and DEL as \u00XX. */
void jw_str_utf8(struct buf *b, const char *s, size_t n);
/* Code points, escaped. */
void jw_codepoints(struct buf *b, const uint32_t *cp, size_t n);
void jw_float(struct buf *b, double v);
void jw_int(struct buf *b, int64_t v);
void jw_bool(struct buf *b, int v);
void jw_null(struct buf *b);
/* `"key": ` preceded by ", " unless *first. */
void jw_key(struct buf *b, int *first, const char *key);

#endif
