/* Diagnostics and small helpers shared by the collector and the readers. */
#ifndef EVMBPF_UTIL_H
#define EVMBPF_UTIL_H

#include <sys/types.h>
#include <stddef.h>
#include <stdbool.h>

extern int verbose;

/* "evmbpf: ..." on stderr. */
void warnx_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void debugx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Called before each diagnostic, when set (the collector's status line clears itself). */
extern void (*diagnostic_hook)(void);

void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);

/* Growable byte buffer. */
struct buf {
	char *data;
	size_t len, cap;
};
void buf_putc(struct buf *b, char c);
void buf_put(struct buf *b, const char *s, size_t n);
void buf_puts(struct buf *b, const char *s);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_free(struct buf *b);

/* --pid's value: a whole number from 1 to INT_MAX; -1 (said on stderr) otherwise. */
int parse_pid(const char *text, pid_t *out);

/* A subcommand's getopt_long() returned `c` ('?' or ':'; opterr = 0 and ":" first in
 * the option string): said on stderr; returns 2, the exit status of a bad command line. */
int bad_option(const char *cmd, int c, char *const argv[]);

#endif
