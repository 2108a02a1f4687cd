/* What both formats of evmbpf export write with: see export_timeline.h. */
#include "export_timeline.h"

#include <string.h>

#include "jsonw.h"

void export_jstr(struct buf *b, const char *s)
{
	jw_str_utf8(b, s, strlen(s));
}

void export_emit(FILE *to, long long *count, struct buf *b)
{
	if ((*count)++)
		fputs(",\n", to);
	fwrite(b->data, 1, b->len, to);
	buf_clear(b);
}
