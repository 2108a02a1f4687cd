/* Python's `re` dialect, for --modules (the tracer) and show --module (the reader).
 *
 * A pattern is parsed as CPython 3.11's re parser parses it (the same errors, with the
 * same messages and positions), and what it means is written out as a PCRE2 pattern
 * that matches the same strings: `.` not matching a newline, `$` before a final
 * newline, `\Z` the absolute end, `\d \w \s \b` as Unicode, inline flags, lookarounds,
 * lazy and possessive quantifiers, atomic groups, backreferences by number and name,
 * conditional groups. Searching is re.search(pattern, text) is not None.
 *
 * What Python accepts and PCRE2 cannot do the same way is refused by name, never run
 * differently; see docs/regex.md.
 */
#ifndef EVMBPF_PYRE_H
#define EVMBPF_PYRE_H

#include <stddef.h>

struct pyre;

/* Compile a pattern. NULL when it cannot be used; msg then holds one line that
 * follows the option's name: "is not a valid regular expression: <what Python's
 * re.compile says>", or "is valid in Python, but evmbpf cannot honour it: ...". */
struct pyre *pyre_compile(const char *pattern, char *msg, size_t cap);

/* re.search(pattern, text) is not None: 1 or 0; -1 when the matcher gave up (its
 * backtracking limit, or text that is not UTF-8). */
int pyre_search(const struct pyre *re, const char *text, size_t len);

/* The PCRE2 pattern it runs as (for -v and tests). */
const char *pyre_pcre2(const struct pyre *re);

void pyre_free(struct pyre *re);

#endif
