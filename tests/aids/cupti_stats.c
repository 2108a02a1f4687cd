/* `evmbpf-test-aids cupti-stats` (tests/test_cupti.py): the agent's stats kernels
 * (agent/stats_kernels.h) built for the host. A tensor's storage on stdin, after one
 * line "DTYPE OFFSET NDIM SIZES... STRIDES...", through the kernels' bodies in the
 * device's order (evm_plan, one worker after the other); its stats on stdout, as the
 * trace writes them (cupti_stats_json). Compiled with -ffp-contract=off, as the PTX is. */
#include "aids.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cupti_stats.h"
#include "stats_kernels.h"
#include "util.h"

int cupti_stats_main(void)
{
	char line[1024];
	struct evm_job j;
	memset(&j, 0, sizeof(j));
	long long v[2 + 2 * EVM_DIMS + 1];
	int n = 0;
	if (!fgets(line, sizeof(line), stdin)) {
		warnx_("cupti-stats: no header line (DTYPE OFFSET NDIM SIZES... STRIDES...)");
		return 2;
	}
	for (char *p = line, *end; n < (int)(sizeof(v) / sizeof(v[0])); p = end) {
		v[n] = strtoll(p, &end, 10);
		if (end == p)
			break;
		n++;
	}
	if (n < 3 || v[2] < 0 || v[2] > EVM_DIMS || n != 3 + 2 * v[2] || !evm_itemsize((int)v[0])) {
		warnx_("cupti-stats: the header line must be DTYPE OFFSET NDIM SIZES... STRIDES... "
		       "(a dtype with an item size, at most %d dims)", EVM_DIMS);
		return 2;
	}
	j.dtype = (int)v[0], j.offset = v[1], j.ndim = (int)v[2];
	j.numel = 1;
	for (int k = 0; k < j.ndim; k++) {
		j.sizes[k] = v[3 + k], j.strides[k] = v[3 + j.ndim + k];
		j.numel *= (uint64_t)j.sizes[k];
	}
	size_t cap = 1 << 16, len = 0;
	uint8_t *data = xmalloc(cap);
	size_t got;
	while ((got = fread(data + len, 1, cap - len, stdin)) > 0)
		if ((len += got) == cap)
			data = xrealloc(data, cap *= 2);
	struct buf out = {0};
	if (!j.numel) {
		buf_puts(&out, "{\"empty\": true}");
	} else {
		/* the extent must be in the storage given */
		int64_t last = j.offset;
		for (int k = 0; k < j.ndim; k++)
			last += (j.sizes[k] - 1) * j.strides[k];
		if (j.offset < 0 || (uint64_t)(last + 1) * (uint64_t)evm_itemsize(j.dtype) > len) {
			warnx_("cupti-stats: the tensor's extent is past the %zu bytes given", len);
			free(data);
			return 2;
		}
		struct evm_step steps[EVM_MAX_STEPS];
		int nsteps = evm_plan(&j, steps);
		struct evm_state *st = xcalloc(1, sizeof(*st));
		struct evm_part *parts = xcalloc(EVM_MAX_WORKERS, sizeof(*parts));
		struct evm_result res;
		memset(&res, 0, sizeof(res));
		j.data = (uint64_t)(uintptr_t)data;
		j.state = (uint64_t)(uintptr_t)st, j.parts = (uint64_t)(uintptr_t)parts;
		j.result = (uint64_t)(uintptr_t)&res;
		j.id = 1;
		for (int s = 0; s < nsteps; s++)
			evm_host_step(&j, &steps[s]);
		struct cupti_req q;
		memset(&q, 0, sizeof(q));
		q.dtype = j.dtype;
		q.nan = res.nan, q.posinf = res.posinf, q.neginf = res.neginf, q.finite = res.finite;
		q.min = res.min, q.max = res.max, q.mean = res.mean, q.std = res.std;
		q.median = res.median;
		cupti_stats_json(&q, &out);
		memmove(out.data, out.data + 11, out.len - 11 + 1);   /* `, "stats": ` */
		free(st);
		free(parts);
	}
	puts(out.data);
	buf_free(&out);
	free(data);
	return 0;
}
