/* On a terminal, the readers' stdout writes control characters as escapes (reader_tty.c). */
#ifndef EVMBPF_READER_TTY_H
#define EVMBPF_READER_TTY_H

/* When stdout is a terminal, replace it by a filter that escapes control characters. */
void rd_stdout_for_terminal(void);

#endif
