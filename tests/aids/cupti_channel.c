/* `evmbpf-test-aids cupti-channel [-v] HARNESS FILE...` (tests/test_cupti.py): --numeric's
 * channel to the agent, end to end without a device. The collector's own code makes the
 * agent's memfd (cupti_launch_prepare) and asks for the numeric service; HARNESS
 * (tests/cupti/agent_host.c) maps the FILEs (tensors' storage), prints their addresses,
 * and loads the agent as the driver would, with the tests' stand-in libcuda/libcupti,
 * which runs the kernels' bodies on the host. Then, one a line on stdin:
 *   tensor FILE DTYPE OFFSET NDIM SIZES... STRIDES... [exit]
 *       a CUDA tensor of FILE's storage, described as a held thread's (numeric.c): one
 *       {"event": "tensor", ...} line, its stats filled in when they come back
 *   drain                the agent's ring read (results come in)
 *   sleep MS
 * and at the end the harness exits and the session's end is written (cupti_finish). */
#include "aids.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cupti_numeric.h"
#include "jsonw.h"
#include "numeric.h"
#include "session_state.h"
#include "cupti_session.h"
#include "sink.h"
#include "trace_writer.h"
#include "util.h"

int cupti_channel_main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[0], "-v")) {   /* say what -v says (the agent's libcupti) */
		verbose = 1;
		argc--, argv++;
	}
	int nfiles = argc - 1;
	uint64_t *addr = xcalloc((size_t)nfiles + 1, sizeof(*addr));
	uint64_t *size = xcalloc((size_t)nfiles + 1, sizeof(*size));
	for (int i = 0; i < nfiles; i++) {
		struct stat st;
		if (stat(argv[i + 1], &st)) {
			warnx_("cupti-channel: cannot read %s", argv[i + 1]);
			return 2;
		}
		size[i] = (uint64_t)st.st_size;
	}
	if (cupti_launch_prepare())
		return 2;
	int to[2], from[2];
	if (pipe(to) || pipe(from))
		return 2;
	pid_t child = fork();
	if (child == 0) {
		dup2(to[0], 0), dup2(from[1], 1);
		close(to[1]), close(from[0]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(to[0]), close(from[1]);
	FILE *in = fdopen(from[0], "r"), *out = fdopen(to[1], "w");
	char line[4096];
	for (int i = 0; i < nfiles; i++)
		if (!fgets(line, sizeof(line), in) || sscanf(line, "%llu", (unsigned long long *)&addr[i]) != 1) {
			warnx_("cupti-channel: the harness gave no address for %s", argv[i + 1]);
			return 2;
		}
	struct describe_ctx ctx;
	memset(&ctx, 0, sizeof(ctx));
	ctx.numeric = ctx.held = 1;
	ctx.rec_tid = (uint32_t)child;
	struct trace t;
	memset(&t, 0, sizeof(t));
	t.sink = t.file = sink_file_stream(stdout);
	t.dctx = &ctx;
	t.opts.numeric = 1;
	t.opts.stop_on_nonfinite = getenv("EVMBPF_TEST_STOP") != NULL;
	cupti_attach_trace(&t);   /* asks for the numeric service: before the agent starts */
	fputs("go\n", out);
	fflush(out);
	if (!fgets(line, sizeof(line), in) || strncmp(line, "ready 1", 7)) {
		warnx_("cupti-channel: the harness did not load the agent: %s", line);
		return 2;
	}
	int k = 0, rc = 0;
	while (fgets(line, sizeof(line), stdin)) {
		long long v[3 + 2 * TENSOR_MAX_DIMS + 1];
		char word[16];
		int pos = 0, n = 0;
		if (sscanf(line, "%15s%n", word, &pos) != 1)
			continue;
		if (!strcmp(word, "drain")) {
			cupti_step(&t, NULL);
			continue;
		}
		if (!strcmp(word, "sleep")) {
			struct timespec ts = { 0, atol(line + pos) * 1000000L };
			nanosleep(&ts, NULL);
			continue;
		}
		char *p = line + pos, *end;
		for (; n < (int)(sizeof(v) / sizeof(v[0])); p = end, n++) {
			v[n] = strtoll(p, &end, 10);
			if (end == p)
				break;
		}
		int f = (int)v[0], ndim = n >= 4 ? (int)v[3] : -1;
		if (strcmp(word, "tensor") || f < 0 || f >= nfiles || ndim < 0 ||
		    ndim > TENSOR_MAX_DIMS || n != 4 + 2 * ndim) {
			warnx_("cupti-channel: cannot read '%.*s'", (int)strcspn(line, "\n"), line);
			rc = 2;
			break;
		}
		_Alignas(8) uint8_t node[sizeof(struct dnode) + sizeof(struct dnode_tensor) +
					 sizeof(struct dnode_tensor_data) + 16 * TENSOR_MAX_DIMS];
		memset(node, 0, sizeof(node));
		struct dnode *dn = (void *)node;
		struct dnode_tensor *tn = (void *)(dn + 1);
		struct dnode_tensor_data *d = (void *)&tn->sizes[ndim];
		dn->kind = N_TENSOR;
		dn->flags = N_F_DATA;
		dn->size = (uint16_t)(sizeof(*dn) + sizeof(*tn) + 16u * ndim + sizeof(*d));
		tn->dtype = (uint8_t)v[1], tn->device_type = 1, tn->ndim = (uint8_t)ndim;
		tn->numel = 1;
		for (int i = 0; i < ndim; i++) {
			tn->sizes[i] = v[4 + i];
			tn->numel *= v[4 + i];
		}
		d->data = addr[f], d->nbytes = size[f], d->offset = v[2];
		d->dev_type = 1, d->ok = 1;
		for (int i = 0; i < ndim; i++)
			d->strides[i] = v[4 + ndim + i];
		ctx.rec_exit = strstr(line + pos, "exit") != NULL;
		ctx.nonfinite = 0;
		struct buf b = {0};
		buf_printf(&b, "{\"event\": \"tensor\", \"n\": %d", k++);
		numeric_stats(&ctx, dn, tn, tn->dtype, &b);
		if (ctx.nonfinite)
			buf_printf(&b, ", \"nonfinite\": \"%lld NaN, %lld +Inf, %lld -Inf in a %s\"",
				   ctx.nf_nan, ctx.nf_posinf, ctx.nf_neginf, ctx.nf_shape.data);
		trace_emit(&t, &b, 0, 0);
	}
	fclose(out);   /* the harness exits: the agent's atexit */
	int status;
	for (int i = 0; i < 500 && waitpid(child, &status, WNOHANG) == 0; i++)
		usleep(10000);
	if (waitpid(child, &status, WNOHANG) == 0) {
		kill(child, SIGKILL);
		waitpid(child, &status, 0);
	}
	cupti_finish(&t);
	fflush(stdout);
	buf_free(&ctx.nf_shape);
	free(addr);
	free(size);
	return rc;
}
