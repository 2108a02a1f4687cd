/* The recorder's names read back (reader_dir_name.h): evmbpf-PID[-rankR][@HOST][.N]
 * [.flush-K].jsonl, where HOST is the node's name as the recorder writes it (letters,
 * digits, '_' and '-' alone, at most RD_HOST_MAX), absent from the names of a recorder
 * that did not write it; .N a later process of a pid that had left a file, .flush-K a
 * live tail. */
#include "reader_dir_name.h"

#include <string.h>

/* Leading digits of *s as a number, s moved past them; 0 when there are none. */
static int take_digits(const char **s, long long *out)
{
	const char *p = *s;
	long long v = 0;
	while (*p >= '0' && *p <= '9' && v < 1000000000000LL)
		v = v * 10 + (*p++ - '0');
	if (p == *s)
		return 0;
	*s = p;
	*out = v;
	return 1;
}

long long rd_flush_of(const char *base)
{
	const char *f = strstr(base, ".flush-");
	long long k;
	for (; f; f = strstr(f + 1, ".flush-")) {
		const char *p = f + 7;
		if (take_digits(&p, &k) && strcmp(p, ".jsonl") == 0)
			return k;
	}
	return -1;
}

static int host_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '-';
}

int rd_recorder_name(const char *base, struct rd_recname *out)
{
	struct rd_recname n = { .again = 1, .flush = -1 };
	const char *p = base;
	if (strncmp(p, "evmbpf-", 7) != 0)
		return 0;
	p += 7;
	if (!take_digits(&p, &n.pid))
		return 0;
	if (strncmp(p, "-rank", 5) == 0) {
		const char *r = p + 5;
		size_t len = strcspn(r, ".@");
		if (len == 0 || len >= sizeof(n.rank))
			return 0;
		memcpy(n.rank, r, len);
		n.rank[len] = '\0';
		p = r + len;
	}
	if (*p == '@') {
		size_t len = 0;
		while (host_char(p[1 + len]))
			len++;
		if (len == 0 || len > RD_HOST_MAX)
			return 0;
		memcpy(n.host, p + 1, len);
		n.host[len] = '\0';
		p += 1 + len;
	}
	const char *again = p;
	if (*again == '.' && (again++, take_digits(&again, &n.again)))
		p = again;
	if (strncmp(p, ".flush-", 7) == 0) {
		p += 7;
		if (!take_digits(&p, &n.flush))
			return 0;
	}
	if (strcmp(p, ".jsonl") != 0)
		return 0;
	*out = n;
	return 1;
}
