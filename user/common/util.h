/* Diagnostics, allocation that fails loudly, and a growable text buffer: shared by the
 * collector and the readers. */
#ifndef EVMBPF_UTIL_H
#define EVMBPF_UTIL_H

#include <sys/types.h>
#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>

extern int verbose;
/* Set, diagnostics are not written: the fuzzers set it, whose inputs are mostly damaged. */
extern int warn_silent;

/* "evmbpf: ..." on stderr. */
void warnx_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void debugx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Called before each diagnostic, when set (the collector's status line clears itself). */
extern void (*diagnostic_hook)(void);

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
/* The first n bytes of s, NUL-terminated. */
char *xstrndup(const char *s, size_t n);
/* Does s end with tail? */
bool str_ends_with(const char *s, const char *tail);

/* Growable byte buffer; its data is NUL-terminated once anything was appended. */
struct buf {
	char *data;
	size_t len, cap;
};
void buf_putc(struct buf *b, char c);
void buf_put(struct buf *b, const char *s, size_t n);
void buf_puts(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append `count` copies of s. */
void buf_repeat(struct buf *b, const char *s, size_t count);
/* Pad with spaces what was appended since `start` to `width` code points, on the
 * right (align '<') or on the left (align '>'), as Python's format spec does. */
void buf_align(struct buf *b, size_t start, char align, size_t width);
/* Write b to out followed by a newline, then empty it. */
void buf_line(struct buf *b, FILE *out);
/* Empty b, keeping its memory. */
void buf_clear(struct buf *b);
void buf_free(struct buf *b);
/* NUL-terminated view of the contents, "" when empty (valid until the next append). */
const char *buf_str(struct buf *b);

/* --pid's value: a whole number from 1 to INT_MAX; -1 (said on stderr) otherwise. */
int parse_pid(const char *text, pid_t *out);
/* An option's whole number in [min, max]; -1 (said, naming the option `what`) else. */
int parse_long(const char *text, const char *what, long min, long max, long *out);

/* A subcommand's getopt_long() returned `c` ('?' or ':'; opterr = 0 and ":" first in
 * the option string): said on stderr; returns 2, the exit status of a bad command line. */
int bad_option(const char *cmd, int c, char *const argv[]);

/* CLOCK_MONOTONIC in nanoseconds: the one clock for timeouts, graces and intervals. */
uint64_t mono_ns(void);

/* A regular file opened for reading, looked at before it is opened: path_fd (O_PATH,
 * closed here) is reopened only when it is a regular file, without blocking and never as
 * a terminal, so a name another user controls cannot make evmbpf open a FIFO or a
 * device. A descriptor, or -1 (errno EINVAL: not a regular file). */
int reopen_regular(int path_fd);
/* The same for a path: open(path, O_PATH), then reopen_regular. */
int open_regular(const char *path);

#endif
