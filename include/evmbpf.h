/* Records passed from the BPF programs to the collector through the ring buffer.
 * Shared by bpf/ and user/: fixed-width types only. */
#ifndef EVMBPF_H
#define EVMBPF_H

#ifndef __BPF__
#include <linux/types.h>
#endif

/* What _describe bounds: nested containers to depth 2, 8 items each. */
#define DESCRIBE_DEPTH 2
#define DESCRIBE_WIDTH 8
/* Top-level arguments are all described by the reference; we cap them here. */
#define DESCRIBE_TOP_MAX 32
/* Strings are cut at 60 code points: 240 bytes in the widest kind. */
#define STR_MAX_CHARS 60
#define STR_MAX_BYTES 240
/* Integers: 30-bit digits read at most (1920 bits, about 578 decimal digits). */
#define INT_MAX_DIGITS 64
/* Tensor dims read at most; more are reported as an unreadable shape. */
#define TENSOR_MAX_DIMS 16

/* Record buffer: one ENTER/EXIT record never exceeds this. */
#define REC_BUF_SIZE 8192
#define REC_BUF_MASK (REC_BUF_SIZE - 1)
#define NODE_MAX_SIZE 512

enum rec_kind {
	REC_ENTER = 1,     /* a module's __call__ entered: args, kwargs */
	REC_EXIT = 2,      /* it returned: output, or NULL (an exception left it) */
	REC_EXCEPTION = 3, /* an exception reached the top level (PyErr_Display) */
	REC_TASK_EXIT = 4, /* a thread of the target exited; the leader's exit ends the trace */
	/* 5: free (the launch stops are bpf/follow.bpf.c's FOLLOW_STOPPED) */
	REC_MODULE_TYPE = 6, /* a new class was judged to be torch.nn.Module: check it */
	REC_MARKER = 7,    /* a phase marker is being entered on a thread */
	REC_STACK = 8,     /* the Python frames under an outermost module call (--phase rules),
			    * or under the first call seen (attached in the middle of a forward?) */
	REC_ORPHAN = 9,    /* a module running when evmbpf attached has returned */
	REC_TASK_EXEC = 12, /* the target exec'd another program: the traced process is gone */
	REC_TENSOR_BYTES = 13, /* --numeric: a small CPU tensor's bytes, for the call record after it */
	REC_MEM = 24,      /* CUDA allocator counters of the thread's device, just before its
			    * next ENTER (or its EXCEPTION) record */
	REC_BOUND_SITE = 20, /* a new call site of a bound Module.__call__: watch it (bound.c) */
	REC_BOUND_ENTER = 21, /* a module called through its bound __call__ is running: the next
			       * REC_ENTER of the thread (REC_F_BOUND) describes its args first */
	REC_SAMPLES = 16,  /* the host's note_samples(contexts) is starting: its contexts */
	REC_SAMPLES_HOST = 17, /* evalmetry.debug's module body has run: its globals */
	REC_TORCH_LOADED = 25, /* evmbpf record: a dlopen mapped libc10.so (torch): the call
				* probes go in now (REC_F_PTRACE: the thread is held for it) */
	REC_PAIR = 26,     /* a leaf call: its REC_ENTER then its REC_EXIT, whole, one after the
			    * other after this header (bpf/state.bpf.h, defer_flush) */
	REC_TASK_FORK = 27, /* the target forked a process (struct rec_task_exit, hdr.tid the
			     * child's pid): its copy of the code has the target's breakpoints */
};

/* One record a leaf call (bpf/state.bpf.h): the process's kept enter, in its defer
 * buffer after room for the REC_PAIR header; the exit is copied after it. */
#define DEFER_HDR 24             /* sizeof(struct rec_hdr) */
#define DEFER_ENTER_MAX 2048     /* an enter record longer than this goes out at once */
#define DEFER_BUF_SIZE (DEFER_HDR + DEFER_ENTER_MAX + REC_BUF_SIZE)
#define DEFER_NONE 0
#define DEFER_BUSY 1
#define DEFER_READY 2

struct defer_buf {
	__u8 buf[DEFER_BUF_SIZE];
};

struct rec_hdr {
	__u32 kind;
	__u32 size;  /* of the whole record, header included */
	__u32 pid;   /* tgid, host namespace */
	__u32 tid;
	__u64 ts_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
};

/* REC_TORCH_LOADED */
struct rec_loaded {
	struct rec_hdr hdr;
	__u32 flags;  /* REC_F_PTRACE: the thread stops for user space */
	__u32 pad;
};

struct rec_call {
	struct rec_hdr hdr;
	__u64 self;   /* the module object */
	__u64 sp;     /* stack pointer at entry, pairs the exit with its entry */
	__u32 flags;  /* REC_F_* */
	__u32 nodes;  /* description nodes that follow */
	__u64 marker; /* the innermost phase marker active on this thread (its generator), or 0 */
};

#define REC_F_EXCEPTION 1u  /* exit: NULL return value */
#define REC_F_TRUNCATED 2u  /* the description did not fit and was cut */
#define REC_F_HELD 4u       /* a hold was asked here (the first call, new code objects, ...) */
#define REC_F_WANT_HOLD 8u  /* --numeric: the record describes CPU tensor values to read (BPF side only) */
#define REC_F_PTRACE 16u    /* this thread is held here (SIGURG, seen by evmbpf's ptrace) until continued */
#define REC_F_BOUND 32u     /* enter: the nodes start with the args and kwargs of the bound call
			     * of REC_BOUND_ENTER; exit: the return of such a call (a watchpoint) */
#define REC_F_BOUND_SELF 64u /* enter (with REC_F_BOUND): a bound call's own entry, its nodes its
			      * args and kwargs (one entered right inside another, bound_outer) */

/* CUDA memory (bpf/cudamem.bpf.h): DeviceStats of c10's caching allocator, the values
 * torch.cuda.memory_stats_as_nested_dict() gives for the thread's current device. */
#define CUDA_MAX_DEVICES 16
struct rec_mem {
	struct rec_hdr hdr;
	__s32 device;
	__u32 flags;         /* MEM_F_*: no counters, device -1 */
	__s64 allocated;     /* allocated_bytes.all.current */
	__s64 max_allocated; /* allocated_bytes.all.peak */
	__s64 reserved;      /* reserved_bytes.all.current */
};
#define MEM_F_UNKNOWN 1u /* the thread's device is not known (set before the attach) */
#define MEM_F_INIT 2u    /* CUDA was initialised: the target is stopped until user space looked */
#define MEM_F_LOADED 4u  /* a dlopen mapped libraries: the target is stopped until user space looked */
#define MEM_F_HELD 8u    /* with MEM_F_INIT or MEM_F_LOADED: the thread is held (ptrace, hold.bpf.h) */
/* cuda_unknown's value (bpf/cudamem.bpf.h): a thread whose device is not known yet */
struct cuda_unknown_v {
	__u64 out;   /* GetDevice's DeviceIndex *, between its entry and its return */
	__u32 calls; /* module calls made while unknown */
	__u32 pad;
};

/* One described value. Containers are followed by their items, pre-order; a dict's
 * items come as key node, value node. Nodes are 8-byte aligned. */
enum node_kind {
	N_NONE = 1,
	N_BOOL,
	N_INT,     /* len: digit count; flags: N_F_NEGATIVE, N_F_CUT */
	N_FLOAT,
	N_STR,     /* len: code points; flags: kind (1, 2, 4) in N_F_KIND_MASK */
	N_TUPLE,   /* len: container length; items: how many follow */
	N_LIST,
	N_DICT,
	N_TENSOR,
	N_OTHER,   /* {"type": NAME} */
	N_ABSENT,  /* kwargs was NULL */
	N_UNREADABLE, /* the memory could not be read */
	N_CACHE,   /* a transformers KV cache: struct dnode_cache; items 1: its first tensor follows */
};

/* The reference's _describe_cache: layers, the first tensor's shape/dtype/device, the
 * bytes of every key and value tensor (numel here, times the first's element size),
 * get_seq_length(). Read from cache.layers[i].keys/.values (transformers 5) or
 * cache.key_cache/value_cache (4). */
struct dnode_cache {
	__u32 layers;
	__u32 tensors;     /* tensors counted in numel */
	__s64 seq;
	__s64 numel;       /* summed over every key and value tensor */
};
#define CACHE_MAX_LAYERS 128

#define N_F_NEGATIVE 0x100u
#define N_F_CUT 0x200u
#define N_F_KIND_MASK 0x7u
#define N_F_DATA 0x400u     /* N_TENSOR: a struct dnode_tensor_data follows the sizes (--numeric) */
#define N_F_BYTES 0x800u    /* N_TENSOR with N_F_DATA: its values came in a REC_TENSOR_BYTES record */

struct dnode {
	__u8 kind;
	__u8 depth;   /* 0 for a top-level argument; 255 for the args tuple / kwargs dict */
	__u16 size;   /* bytes, this node only, header included */
	__u16 flags;
	__u16 items;  /* containers: items that follow */
	__u32 len;
	__u32 pad;
	__u64 type;   /* the object's type, for its name */
};

struct dnode_tensor {
	__u8 dtype;
	__u8 device_type;
	__s8 device_index;
	__u8 ndim;
	__u8 layout;  /* index into tensor_layouts + 1; 0: no layout matched */
	__u8 device_set; /* device_opt_'s has_value byte: 1 on every real tensor, checked */
	__u8 pad[2];
	__s64 numel;
	__u64 dtype_meta; /* dtype == DTYPE_META: torch < 1.8's TypeMetaData*, named in user space */
	__s64 sizes[]; /* ndim of them, up to TENSOR_MAX_DIMS */
};

/* --numeric: where a tensor's values are, read with its TensorImpl: the storage's data
 * pointer and size, its device (the DataPtr's), the tensor's storage offset (elements)
 * and strides. User space checks the extent against nbytes before reading. */
struct dnode_tensor_data {
	__u64 data;
	__u64 nbytes;
	__s64 offset;
	__u8 dev_type;
	__s8 dev_index;
	__u8 ok;          /* every field was read */
	__u8 pad;
	__u32 seq;        /* N_F_BYTES: the REC_TENSOR_BYTES record's seq */
	__s64 strides[];  /* ndim of them */
};

/* --numeric: the bytes a CPU tensor's index space spans (from data + offset x itemsize),
 * read by the probe itself when they are at most TENSOR_BYTES_MAX and the extent fits
 * the storage; output before the call record whose node it belongs to (same thread,
 * hdr.ts_ns the call record's; seq counts them within it). No hold is needed for it. */
#define TENSOR_BYTES_MAX 65536
struct rec_tensor_bytes {
	struct rec_hdr hdr;
	__u64 addr;       /* where the bytes were read */
	__u32 seq;
	__u32 len;
	/* len bytes follow */
};

/* Uncaught exception: type name, message, the last traceback entries. */
#define EXC_NAME_MAX 96
#define EXC_MSG_MAX 1024
#define EXC_TB_MAX 16 /* a power of two; the last 11 frames are what format_exception()[-12:] keeps */
#define EXC_FILE_MAX 192
#define EXC_FUNC_MAX 64

/* 3.12+ (and some 3.11 entries) leave tb_lineno at -1 until Python asks for it: the line
 * is then found from tb_lasti in the code object's co_linetable, copied here. */
#define EXC_LT_MAX 512
#define CO_LINETABLE_311 136 /* PyCodeObject.co_linetable in 3.11-3.14 (a bytes object) */
#define BYTES_SVAL 32        /* PyBytesObject.ob_sval */

struct tb_entry {
	__s32 lineno;        /* -1: compute it from linetable */
	__s32 lasti;         /* tb_lasti, bytes (3.11+) */
	__s32 firstlineno;   /* co_firstlineno */
	__u32 lt_len;        /* bytes of linetable copied */
	char filename[EXC_FILE_MAX];
	char func[EXC_FUNC_MAX];
	__u8 linetable[EXC_LT_MAX];
};

struct rec_exception {
	struct rec_hdr hdr;
	__u64 value;         /* the exception object */
	__u32 total_frames;  /* traceback entries in all */
	__u32 nframes;       /* of which the last nframes are below */
	__s32 msg_len;       /* -1: message not a str we could read; else its code points */
	__u32 msg_kind;      /* 0: msg is a C string; 1, 2, 4: msg_len code points of that width */
	char type_name[EXC_NAME_MAX];
	char msg[EXC_MSG_MAX];
	struct tb_entry tb[EXC_TB_MAX];
};

struct rec_task_exit {
	struct rec_hdr hdr;
	__s32 exit_code;     /* as wait(2) encodes it: signal in the low 7 bits */
	__u32 group_dead;
};

/* `with phase(NAME):` seen entering: the marker's generator and its name. */
#define MARKER_NAME_MAX 64
#define MARKERS_MAX 8   /* phase markers nested on one thread, at most */
#define MARKER_KIND_PHASE 1
#define MARKER_KIND_NO_SAMPLES 3 /* without_samples(): forwards in its block cover no documents */
struct rec_marker {
	struct rec_hdr hdr;
	__u64 gen;
	char name[MARKER_NAME_MAX];
	__u64 parent;   /* the innermost marker active on the thread when this one began, or 0 */
	__u32 kind;     /* MARKER_KIND_* */
	__u32 pad;
};

/* note_samples(contexts) (REC_SAMPLES: obj is contexts, at the watch on the function's
 * first instruction) and evalmetry.debug's globals once its module body has run
 * (REC_SAMPLES_HOST: user space finds note_samples there and arms the watch). Either
 * may hold the thread (REC_F_HELD, REC_F_PTRACE) until user space has read them. */
struct rec_samples {
	struct rec_hdr hdr;
	__u64 obj;
	__u64 code;
	__u32 flags;
	__u32 pad;
};

#define STACK_FRAMES_MAX 32
struct rec_stack {
	struct rec_hdr hdr;
	__u32 n;
	__u32 flags;     /* REC_F_HELD: stopped until user space has named new code objects */
	__u64 code[STACK_FRAMES_MAX]; /* innermost first */
	__u64 first[STACK_FRAMES_MAX]; /* each frame's first local (self, for a method) */
};

/* Modules running on a thread when evmbpf attached (user space reads them, the target
 * stopped): their frames, innermost first. Their returns cannot arm a uretprobe, so the
 * BPF side notices them at the thread's next module call, when a frame is gone from its
 * Python stack, and says so (REC_ORPHAN): the exit hooks of a tracer registered at
 * that moment would fire for them, as `orphan` exits. Keyed by PyThreadState. */
#define ORPHANS_MAX 16
struct orphan_list {
	__u32 n;
	__u32 pad;
	__u64 frame[ORPHANS_MAX]; /* the frame of its Module.__call__ */
	__u64 first[ORPHANS_MAX]; /* that frame's first local as it was (self, or its cell) */
	__u64 self[ORPHANS_MAX];
};

struct rec_orphan {
	struct rec_hdr hdr;
	__u64 self;
	__u64 marker;
};

/* Modules called through a bound __call__ (`step = model.__call__; step(**kw)`, as
 * transformers' generate() calls its model, or `self.block.__call__(h)` inside a traced
 * module) pass through no slot_tp_call. The frame walk at a module call finds their
 * Module.__call__ frame; the caller's call instruction and the one after it (the resume
 * point) get a hardware watchpoint each on that thread (user space: perf_event_open),
 * whose BPF program sees the call begin and return. Per thread, keyed by tid; user space
 * sets a site's state. */
#define BOUND_SITES 2 /* sites watched at once (call + return watchpoints each: x86 has 4
		       * debug registers); a new site takes the least recently used slot
		       * with no call open from it */
#define BOUND_OPEN 4  /* bound calls open at once on a thread (nested: a root and submodules) */
#define BOUND_ARMED 1
#define BOUND_FAILED 2
struct bound_call {
	__u64 frame;  /* its innermost Module.__call__ frame: a walk reaching it is inside */
	__u64 self;
	__u64 caller; /* the frame that called it, current again at its return */
	__u64 slot;   /* where the caller's value stack receives the result */
	__u64 next;   /* the resume instruction being watched */
	__u64 call_at; /* and the call instruction */
};
struct bound_thread {
	struct bound_call open[BOUND_OPEN]; /* outermost first */
	__u64 args, kwargs; /* the call just found: its args tuple and kwargs dict */
	__u32 nopen;
	__u32 nsites;
	__u64 call_at[BOUND_SITES]; /* a site's call instruction (its opcode byte) */
	__u64 next_at[BOUND_SITES]; /* and the instruction after the call */
	__u8 state[BOUND_SITES];    /* 0 just found, BOUND_ARMED, BOUND_FAILED */
	__u8 full_said;
	__u8 nested_said;
	__u8 outer;  /* opening the outer of two bound calls entered one right inside the other */
	__u8 outer_new; /* and its site is new, told to user space without a hold */
	__u8 pad[2];
	__u32 used[BOUND_SITES]; /* when a slot's site was last called from (clock) */
	__u32 clock;
	__u32 pad2;
};
struct rec_bound_enter {
	struct rec_hdr hdr;
	__u64 self;
	__u64 marker;
};
#define BOUND_SITE_F_FULL 1u /* every watchpoint of the thread is in use: not watched */
#define BOUND_SITE_F_NESTED 2u /* two bound calls found at one module call: not traced (the
				* tail call to bound_outer failed) */
#define BOUND_SITE_F_DEEP 4u /* more than BOUND_OPEN bound calls open: not traced */
#define BOUND_SITE_F_SYNC 8u /* no site: the thread is held until the site told just before
			      * (the outer of two nested bound calls) is armed */
#define BOUND_SITE_F_NOSITE 16u /* a bound call whose call is not on its caller's value
				 * stack as a known shape has it: not traced */
struct rec_bound_site {
	struct rec_hdr hdr;
	__u64 call_at;
	__u64 next_at;
	__u64 code;   /* the caller's code object */
	__u32 flags;  /* REC_F_HELD, REC_F_PTRACE, BOUND_SITE_F_* << 8, the slot << 16 */
	__u32 pad;
};
struct rec_module_type {
	struct rec_hdr hdr;
	__u64 type;
	__u64 module_type; /* the base class taken for torch.nn.Module */
};

/* Tensor layouts in TensorImpl, tried in order; the one whose pointer back to the
 * Python object matches wins. Offsets in bytes. */
struct tensor_layout {
	__u16 impl_off;      /* THPVariable -> TensorImpl* */
	__u16 backptr_off;   /* TensorImpl -> PyObject* (low bit masked) */
	__u16 sizes_off;     /* SizesAndStrides: size_t size_, then inline sizes or pointer */
	__u16 numel_off;
	__u16 dtype_off;
	__u16 device_off;
	__u8 device_order;   /* 0: [has_value][type][index]; 1: [type][index][has_value];
	                      * 2 (torch 1.7): [has_value][pad][type int16][index int16] */
	__u8 sizes_kind;     /* 0: SizesAndStrides; 1 (torch 1.7): SmallVector sizes_ {begin, end} */
	__u8 dtype_kind;     /* 0: ScalarType byte; 1 (torch 1.7): TypeMeta, a TypeMetaData* */
	__u8 pad;
	/* --numeric: TensorImpl -> storage_ (StorageImpl*), StorageImpl -> DataPtr (data, ctx,
	 * deleter, Device at +24, then size_bytes_ at +32); storage_offset_ is numel_off - 8 */
	__u16 storage_off;
	__u16 sdata_off;
};

#define TENSOR_LAYOUTS 4
#define TENSOR_CHUNK 192     /* bytes read from backptr_off */
#define DTYPE_META 255       /* dnode_tensor.dtype: see dtype_meta */

/* Type verdicts cached per type object. */
enum type_kind {
	T_OTHER = 1,
	T_NONE,
	T_BOOL,
	T_INT,
	T_FLOAT,
	T_STR,
	T_TUPLE,
	T_LIST,
	T_DICT,
	T_TENSOR,
	T_MODULE,
	T_GENCM,    /* contextlib._GeneratorContextManager: maybe a phase marker */
	T_CACHE,    /* a subclass of a class named Cache (transformers.cache_utils.Cache) */
};

/* The BPF side's verdict on a type object, with its name: user space names types from
 * here, so names survive the target freeing its types (or exiting). */
#define TYPE_NAME_MAX 62
struct type_info {
	__u8 kind;      /* enum type_kind */
	__u8 heap;      /* Py_TPFLAGS_HEAPTYPE: tp_name is the __name__ as is */
	char name[TYPE_NAME_MAX]; /* tp_name, cut */
};

/* Set from user space before load. */
struct target_config {
	__u64 none_obj;
	__u64 bool_type;
	__u64 float_type;
	__u64 object_type;
	__u32 tgid;
	__u32 pad;
	/* phase markers: generator layout (0: markers not supported for this Python) */
	__u64 gen_type;
	__u16 gen_frame_state, gen_iframe;
	__s8 gen_state_created;
	__u8 rules;         /* --phase rules given: report the frames under outermost calls */
	__u8 pad2[2];
	/* the running thread's frames: _PyRuntime, from which the current PyThreadState is
	 * found (struct py_offsets says how, per version); 0 when it is not known */
	__u64 runtime;
};

#endif
