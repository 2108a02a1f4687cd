/* Names and messages a reader prints come from the traced process: a module called
 * "x\033]0;title\007" or an exception whose message clears the screen would reach the
 * terminal as commands. On a terminal, stdout goes through a filter that writes control
 * characters as escapes, as ls and git do: C0 controls but newline and tab as \xNN, DEL
 * as \x7f, C1 controls (UTF-8 U+0080-U+009F) as \uNNNN. A pipe or a file gets the bytes
 * as they are, as the reference's readers write them. */
#include "reader_tty.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static FILE *terminal;   /* the real stdout */
static int pending_c2;   /* a 0xC2 byte at the end of the last write: its next byte decides */

static void put(const char *s, size_t n)
{
	fwrite(s, 1, n, terminal);
}

static ssize_t escape_write(void *cookie, const char *buf, size_t size)
{
	(void)cookie;
	size_t run = 0; /* the start of the bytes written as they are */
	char esc[16];
	for (size_t i = 0; i < size; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (pending_c2) {
			pending_c2 = 0;
			if (c >= 0x80 && c <= 0x9f) {
				snprintf(esc, sizeof(esc), "\\u%04x", c);
				put(esc, strlen(esc));
			} else {
				put("\xc2", 1);
				i--; /* this byte again, on its own */
			}
			run = i + 1;
			continue;
		}
		int control = (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f;
		if (!control && c != 0xc2)
			continue;
		put(buf + run, i - run);
		run = i + 1;
		if (c == 0xc2) {
			pending_c2 = 1;
			continue;
		}
		snprintf(esc, sizeof(esc), "\\x%02x", c);
		put(esc, strlen(esc));
	}
	put(buf + run, size - run);
	return (ssize_t)size;
}

static int escape_close(void *cookie)
{
	(void)cookie;
	if (pending_c2)
		put("\xc2", 1);
	pending_c2 = 0;
	return fflush(terminal);
}

void rd_stdout_for_terminal(void)
{
	if (terminal || !isatty(STDOUT_FILENO))
		return;
	cookie_io_functions_t io = { .write = escape_write, .close = escape_close };
	FILE *f = fopencookie(NULL, "w", io);
	if (!f)
		return;
	terminal = stdout;
	stdout = f;
}
