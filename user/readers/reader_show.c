/* evmbpf show: the reference's describe_forward(read_trace(TRACE), N, REGEX).
 *
 * Two streaming passes. The first keeps the events of forward N (its `forward`
 * header, its enter and unwound events) and learns which call ids they carry; the
 * second finds, for those calls only, the last exit's output and the last
 * input_numeric (merged into the last enter with that call id, as read_trace does).
 * Memory is one forward's worth, whatever the length of the trace.
 */
#include <stdlib.h>
#include <string.h>

#include "reader_cmds.h"
#include "reader_format.h"
#include "reader_keymap.h"
#include "reader_pyv.h"
#include "reader_trace.h"

struct call {
	long long last_enter;      /* the entry that is the last enter with this id, or -1 */
	int has_output;
	cJSON *output;
	int has_numeric;
	cJSON *args;
	cJSON *kwargs;
};

struct show {
	struct rd_trace t;
	long long forward;
	cJSON *header;
	cJSON **entries;
	size_t n;
	size_t cap;
	struct rd_keymap ids;      /* call id -> index in calls */
	struct call *calls;
	size_t ncalls;
};

static struct call *call_of(struct show *s, const cJSON *id, int create)
{
	struct pykey k;
	size_t at;

	if (!pykey_of(id, &k))
		return NULL;             /* unhashable: the reference raises */
	at = rd_keymap_get(&s->ids, &k, NULL);
	if (at != (size_t)-1)
		return &s->calls[at];
	if (!create)
		return NULL;
	s->calls = xrealloc(s->calls, (s->ncalls + 1) * sizeof(*s->calls));
	memset(&s->calls[s->ncalls], 0, sizeof(*s->calls));
	s->calls[s->ncalls].last_enter = -1;
	rd_keymap_put(&s->ids, &k, NULL, s->ncalls);
	return &s->calls[s->ncalls++];
}

/* ---- pass 1: forward N's events ---- */

static void keep_entry(struct show *s, cJSON *ev, int enter)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 256;
		s->entries = xrealloc(s->entries, s->cap * sizeof(*s->entries));
	}
	s->entries[s->n] = ev;
	if (enter) {
		struct call *c = call_of(s, pyv_get(ev, "call"), 1);

		if (c)
			c->last_enter = (long long)s->n;
	}
	s->n++;
}

static void first_pass_event(struct show *s, struct rd_event *ev)
{
	int enter = ev->kind == RD_ENTER;
	int ours;

	if (!enter && ev->kind != RD_UNWOUND && ev->kind != RD_FORWARD)
		return;
	ours = pyv_eq_int(rd_ev_get(ev, "forward"), s->forward);
	if (ev->kind == RD_FORWARD) {
		if (ours && !s->header)
			s->header = rd_ev_take(ev);
	} else if (ours) {
		keep_entry(s, rd_ev_take(ev), enter);
	} else if (enter) {
		/* a later enter with one of our ids takes the merge from our entry */
		struct call *c = call_of(s, rd_ev_get(ev, "call"), 0);

		if (c)
			c->last_enter = -1;
	}
}

/* ---- pass 2: outputs and numeric inputs of those calls ---- */

static void second_pass_event(struct show *s, struct rd_event *ev)
{
	const cJSON *id;
	struct call *c;

	if (ev->kind != RD_EXIT && ev->kind != RD_INPUT_NUMERIC)
		return;
	id = rd_ev_get(ev, "call");
	if (ev->kind == RD_EXIT && pyv_kind(id) != PYV_NONE && pyv_kind(id) != PYV_MISSING) {
		c = call_of(s, id, 0);
		if (c) {
			cJSON_Delete(c->output);
			c->output = rd_ev_take_member(ev, "output");
			c->has_output = 1;
		}
	} else if (ev->kind == RD_INPUT_NUMERIC && id && rd_ev_has(ev, "args") &&
		   rd_ev_has(ev, "kwargs")) {
		c = call_of(s, id, 0);
		if (c && c->last_enter >= 0) {
			cJSON_Delete(c->args);
			cJSON_Delete(c->kwargs);
			c->args = rd_ev_take_member(ev, "args");
			c->kwargs = rd_ev_take_member(ev, "kwargs");
			c->has_numeric = 1;
		}
	}
}

/* ev[key] = value, where an existing key keeps its place as in dict.update. */
static void put(cJSON *ev, const char *key, cJSON *value)
{
	cJSON *old = (cJSON *)pyv_get(ev, key);

	if (!value)
		value = cJSON_CreateNull();
	if (old) {
		cJSON_ReplaceItemInObjectCaseSensitive(ev, key, value);
	} else {
		cJSON_AddItemToObject(ev, key, value);
	}
}

/* entries[call].update(args=..., kwargs=...) */
static void merge_numeric(struct show *s)
{
	for (size_t k = 0; k < s->ncalls; k++) {
		struct call *c = &s->calls[k];

		if (!c->has_numeric || c->last_enter < 0)
			continue;
		put(s->entries[c->last_enter], "args", c->args);
		put(s->entries[c->last_enter], "kwargs", c->kwargs);
		c->args = c->kwargs = NULL;
	}
}

static int read_passes(struct show *s)
{
	struct rd_event ev = { 0 };
	int got;

	while ((got = rd_trace_next(&s->t, &ev)) == 1)
		first_pass_event(s, &ev);
	if (got == 0 && s->n > 0) {
		if (rd_trace_rewind(&s->t) < 0)
			got = -1;
		while (got >= 0 && (got = rd_trace_next(&s->t, &ev)) == 1)
			second_pass_event(s, &ev);
		if (got == 0)
			merge_numeric(s);
	}
	rd_ev_clear(&ev);
	return got;
}

/* ---- the listing ---- */

static int matches(const struct pyre *re, const cJSON *ev)
{
	const cJSON *module = pyv_get(ev, "module");

	return pyv_kind(module) == PYV_STR && pyre_search(re, module->valuestring, strlen(module->valuestring)) == 1;
}

/* int(n) if n.isdigit() else -1, compared without overflow */
static int layer_cmp(const void *a, const void *b)
{
	const char *x = *(const char *const *)a, *y = *(const char *const *)b;
	int dx = *x && strspn(x, "0123456789") == strlen(x);
	int dy = *y && strspn(y, "0123456789") == strlen(y);

	if (dx != dy)
		return dx ? 1 : -1;
	if (dx) {
		while (*x == '0' && x[1])
			x++;
		while (*y == '0' && y[1])
			y++;
		if (strlen(x) != strlen(y))
			return strlen(x) < strlen(y) ? -1 : 1;
	}
	return strcmp(x, y);
}

/* The distinct m.split(".")[2] of matched model.layers.* modules, sorted. */
static size_t layers(struct show *s, const struct pyre *re, char ***out)
{
	char **v = NULL;
	size_t n = 0;

	for (size_t k = 0; k < s->n; k++) {
		const cJSON *module = pyv_get(s->entries[k], "module");
		const char *m, *seg;
		size_t len, i;

		if (!matches(re, s->entries[k]))
			continue;
		m = module->valuestring;
		if (strncmp(m, "model.layers.", 13) != 0)
			continue;
		seg = m + 13;
		len = strcspn(seg, ".");
		for (i = 0; i < n; i++)
			if (strlen(v[i]) == len && memcmp(v[i], seg, len) == 0)
				break;
		if (i < n)
			continue;
		v = xrealloc(v, (n + 1) * sizeof(*v));
		v[n++] = xstrndup(seg, len);
	}
	if (n > 1)
		qsort(v, n, sizeof(*v), layer_cmp);
	*out = v;
	return n;
}

static void print_note(struct show *s, const char *module, const struct pyre *re, FILE *out)
{
	struct buf b = { 0 };
	char **depths;
	size_t matched = 0, n = layers(s, re, &depths);
	cJSON *pattern = cJSON_CreateString(module);

	for (size_t k = 0; k < s->n; k++)
		matched += matches(re, s->entries[k]);
	buf_puts(&b, "modules matching ");
	pyv_repr(&b, pattern);
	buf_printf(&b, " only: %zu of %zu", matched, s->n);
	if (n > 1) {
		buf_puts(&b, ", across layers ");
		for (size_t i = 0; i < n; i++)
			buf_printf(&b, "%s%s", i ? ", " : "", depths[i]);
	}
	buf_line(&b, out);
	for (size_t i = 0; i < n; i++)
		free(depths[i]);
	free(depths);
	cJSON_Delete(pattern);
	buf_free(&b);
}

/* "stats" in d, for d in an entry's args: a key, a substring, or an element. */
static int mentions_stats(const cJSON *d)
{
	switch (pyv_kind(d)) {
	case PYV_DICT: return pyv_has(d, "stats");
	case PYV_STR: return strstr(d->valuestring, "stats") != NULL;
	case PYV_LIST:
		for (const cJSON *c = d->child; c; c = c->next)
			if (pyv_is(c, "stats"))
				return 1;
		return 0;
	default: return 0;
	}
}

static int any_stats(struct show *s)
{
	for (size_t k = 0; k < s->n; k++) {
		const cJSON *args = rd_or_empty(pyv_get(s->entries[k], "args"));

		if (pyv_kind(args) != PYV_LIST)
			continue;
		for (const cJSON *d = args->child; d; d = d->next)
			if (mentions_stats(d))
				return 1;
	}
	return 0;
}

static void print_heading(struct show *s, FILE *out)
{
	struct buf b = { 0 };
	const cJSON *rows = pyv_get(s->header, "batch_rows");

	buf_printf(&b, "forward %lld   phase ", s->forward);
	pyv_str(&b, pyv_get(s->entries[0], "phase"));
	buf_puts(&b, "   documents: ");
	if (s->header)
		rd_format_samples(&b, s->header, s->t.samples_unobservable);
	else
		buf_puts(&b, "unknown");
	if (s->header && pyv_truthy(rows)) {
		buf_puts(&b, "   ");
		pyv_str(&b, rows);
		buf_puts(&b, " batch row(s)");
	}
	buf_line(&b, out);
	buf_free(&b);
}

static void returned(struct show *s, struct buf *b, const cJSON *ev)
{
	struct call *c;

	if (pyv_is(pyv_get(ev, "event"), "unwound")) {
		buf_puts(b, "(never returned)");
		return;
	}
	c = call_of(s, pyv_get(ev, "call"), 0);
	rd_io_summary(b, c && c->has_output ? c->output : NULL);
}

static void print_entry(struct show *s, const cJSON *ev, FILE *out)
{
	struct buf b = { 0 };
	size_t start;

	buf_puts(&b, "  ");
	start = b.len;
	buf_repeat(&b, "  ", (size_t)rd_depth(ev));
	pyv_str(&b, pyv_get(ev, "module"));
	buf_align(&b, start, '<', 46);
	buf_putc(&b, ' ');
	pyv_format(&b, pyv_get(ev, "type"), '<', 22);
	buf_putc(&b, ' ');
	rd_io_columns(&b, ev);
	buf_line(&b, out);
	buf_printf(&b, "  %46s %22s -> ", "", "");
	returned(s, &b, ev);
	buf_line(&b, out);
	buf_free(&b);
}

static void print_forward(struct show *s, const char *module, const struct pyre *re, FILE *out)
{
	size_t shown = 0;

	if (s->n == 0) {
		fprintf(out, "forward %lld: nothing recorded (the ring buffer may have dropped it)\n",
			s->forward);
		return;
	}
	print_heading(s, out);
	if (re)
		print_note(s, module, re, out);
	if (any_stats(s))
		fputs("  shapes are AxBxC. min/max/mean/sd/med are over the finite values only, "
		      "so an Inf\n  cannot swallow the mean; where a tensor holds NaN or Inf the "
		      "counts are shown too.\n  A median far from the mean means a few outliers "
		      "are carrying the tensor.\n", out);
	fputc('\n', out);
	for (size_t k = 0; k < s->n; k++) {
		if (re && !matches(re, s->entries[k]))
			continue;
		shown++;
		print_entry(s, s->entries[k], out);
	}
	if (!shown) {
		struct buf b = { 0 };
		cJSON *pattern = cJSON_CreateString(module);

		buf_puts(&b, "  no module in this forward matches ");
		pyv_repr(&b, pattern);
		buf_line(&b, out);
		cJSON_Delete(pattern);
		buf_free(&b);
	}
}

static void show_free(struct show *s)
{
	for (size_t k = 0; k < s->n; k++)
		cJSON_Delete(s->entries[k]);
	for (size_t k = 0; k < s->ncalls; k++) {
		cJSON_Delete(s->calls[k].output);
		cJSON_Delete(s->calls[k].args);
		cJSON_Delete(s->calls[k].kwargs);
	}
	free(s->entries);
	free(s->calls);
	cJSON_Delete(s->header);
	rd_keymap_free(&s->ids);
	rd_trace_free(&s->t);
}

int rd_show(FILE *in, const char *file, long long forward, const char *module,
	    const struct pyre *re, FILE *out)
{
	struct show s;
	int rc = 0;

	memset(&s, 0, sizeof(s));
	rd_trace_init(&s.t, in, file);
	s.forward = forward;
	if (read_passes(&s) < 0) {
		rc = 1;
	} else if (s.t.events == 0 && s.t.bad > 0) {
		warnx_("%s: no usable event in the trace (%lld corrupt line%s); nothing to show",
			file, s.t.bad, s.t.bad == 1 ? "" : "s");
		rc = 1;
	} else {
		print_forward(&s, module, re, out);
	}
	show_free(&s);
	return rc;
}
