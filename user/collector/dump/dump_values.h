/* evmbpf dump: one reading of the target, and the values read from its memory into the
 * BPF side's description nodes (include/evmbpf.h), which describe.c turns into the
 * reference's JSON: one set of rules for traces and dumps. */
#ifndef EVMBPF_DUMP_VALUES_H
#define EVMBPF_DUMP_VALUES_H

#include <stdint.h>

#include "describe.h"
#include "pyframes.h"
#include "target.h"
#include "trace.h"
#include "util.h"

/* One reading of the target. */
struct dump_reading {
	struct target *t;
	const struct pyreader *r;
	const struct py_offsets *o;
	struct trace tr;          /* for trace_is_module_call: its target only */
	struct describe_ctx dctx;
	struct py_tasks tasks;    /* the kernel's threads of the process */
	/* verdicts on types, so each is judged once */
	struct { uint64_t type; int kind; } types[256];
	int tensor_invalid;
};

/* 1 tensor, 2 module, 3 _GeneratorContextManager, 4 bound method, 0 other */
int dump_kind_of_type(struct dump_reading *g, uint64_t type);
/* The name of a type for descriptions (struct describe_ctx's callback; arg: the reading). */
const char *dump_type_name(void *arg, uint64_t type);
/* args: a tuple, kwargs: a dict (or 0) -> their JSON, as a trace describes a call */
void dump_describe_call(struct dump_reading *g, uint64_t args, uint64_t kwargs, struct buf *ja,
			struct buf *jk);

/* A tensor object of the target as _describe writes it ({"shape": ...}, or
 * {"type": "Tensor"} when no known layout validates). 1 when it validated. */
int dump_tensor(struct target *t, uint64_t obj, struct buf *out);
/* Is obj a torch.Tensor (1) / an instance of torch.nn.Module (2)? 0: neither. */
int dump_kind(struct target *t, uint64_t obj);

#endif
