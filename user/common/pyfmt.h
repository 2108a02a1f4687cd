/* Python-compatible text for numbers and strings.
 *
 * The trace is read by Python (the reference reader) and by evmbpf; both must print
 * the same bytes. These helpers reproduce CPython 3.11's formatting:
 *   pyfmt_float_repr  repr(float): shortest round-trip digits, '1.0', '1e-05', 'inf'
 *   pyfmt_float_fmt   format(float, '.3g') / '.2f' / '.1f' ...
 *   pyfmt_str_repr    repr(str): quote choice and escapes as Python does
 * (json.dumps(str) is jsonw.h's jw_str.)
 *
 * Every function writes like snprintf: at most n-1 bytes and a NUL when n > 0, and
 * returns the length the full text needs. Strings are UTF-8; invalid sequences are
 * escaped byte by byte rather than trusted.
 */
#ifndef EVMBPF_PYFMT_H
#define EVMBPF_PYFMT_H

#include <stddef.h>
#include <stdint.h>

/* Enough for any pyfmt_float_repr result ('-2.2250738585072014e-308' is 24). */
#define PYFMT_FLOAT_MAX 32

size_t pyfmt_float_repr(char *buf, size_t n, double v);

/* format(v, f'.{prec}{type}') for type 'g', 'f' or 'e'. Non-finite values print as
 * Python does: 'inf', '-inf', 'nan' (never '-nan'). prec is clamped to 0..340. */
size_t pyfmt_float_fmt(char *buf, size_t n, double v, char type, int prec);

size_t pyfmt_str_repr(char *buf, size_t n, const char *s, size_t len);

/* Code points in s (a UTF-8 string): what Python's len() and padding count. */
size_t pyfmt_utf8_len(const char *s, size_t len);

/* Byte length of the first `count` code points of s: Python's s[:count]. */
size_t pyfmt_utf8_prefix(const char *s, size_t len, size_t count);

/* evmbpf's one UTF-8 decoder. Decode one code point at s (len > 0); returns its byte
 * length. An invalid byte is returned as 0xDC00 + byte, with length 1: Python's
 * surrogateescape, how Python reads bytes from outside that are not UTF-8 (sys.argv,
 * file names). A trace line that is not UTF-8 the readers refuse (reader_json.c), as
 * the reference reader's open(), strict UTF-8, fails on it.
 *
 * The three-byte form of a surrogate (ED A0..BF xx) is invalid UTF-8, so by default
 * three invalid bytes. With pass_surrogates it is that surrogate, as Python's
 * surrogatepass reads it: for text evmbpf itself encoded from a str's code points (the
 * collector's reads of the target's str objects), where it is a lone surrogate the
 * str holds, which json.dumps writes as one \uDXXX (jsonw.c). */
size_t pyfmt_utf8_next(const char *s, size_t len, uint32_t *cp, int pass_surrogates);
/* pyfmt_utf8_next without pass_surrogates: text from outside evmbpf. */
size_t pyfmt_utf8_decode(const char *s, size_t len, uint32_t *cp);
/* evmbpf's one UTF-8 encoder: a code point (a surrogate too, in its three-byte form) into
 * out; its byte length, 1 to 4. */
size_t pyfmt_utf8_encode(uint32_t cp, char out[4]);

/* Python's str.isprintable() for one code point (Unicode 14, CPython 3.11). */
int pyfmt_isprintable(uint32_t cp);

/* Python's str.isspace() for one code point. */
int pyfmt_isspace(uint32_t cp);

/* Byte length of the first line of s as str.splitlines()[0] cuts it (\n, \r, \v, \f,
 * \x1c-\x1e, \x85, U+2028, U+2029). */
size_t pyfmt_first_line(const char *s, size_t len);

#endif
