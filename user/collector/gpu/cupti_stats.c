/* The JSON of the agent's result as the trace carries it (the one rendering of the
 * agent's results): cupti_stats_json, a CUDA tensor's result (struct cupti_req) as
 * `, "stats": {...}`, by the reference's _tensor_stats rules (the same text as the CPU
 * path's); which dtypes are floats is the kernels' rule (agent/stats_kernels.h). */
#include "cupti_stats.h"

#include "jsonw.h"
#include "stats_kernels.h"
#include "util.h"

void cupti_stats_json(const struct cupti_req *q, struct buf *out)
{
	if (!evm_is_float(q->dtype)) {
		buf_puts(out, ", \"stats\": {\"min\": "), jw_float(out, q->min);
		buf_puts(out, ", \"max\": "), jw_float(out, q->max);
		buf_putc(out, '}');
		return;
	}
	/* the counts go through float32 in the reference (.sum().float()) */
	buf_printf(out, ", \"stats\": {\"nan\": %lld, \"posinf\": %lld, \"neginf\": %lld",
		   (long long)(float)q->nan, (long long)(float)q->posinf,
		   (long long)(float)q->neginf);
	if (q->finite) {
		buf_puts(out, ", \"min\": "), jw_float(out, q->min);
		buf_puts(out, ", \"max\": "), jw_float(out, q->max);
		buf_puts(out, ", \"mean\": "), jw_float(out, q->mean);
		buf_puts(out, ", \"std\": "), jw_float(out, q->std);
		buf_puts(out, ", \"median\": "), jw_float(out, q->median);
	}
	buf_putc(out, '}');
}
