/* The agent's kernels for the device: their entry points, one a step kind (EVM_K_*),
 * each running its body (stats_kernels.h) for worker w of the launch. Built to PTX
 * only: clang -x cuda --cuda-device-only -nocudainc -nocudalib (Makefile: AGENT_PTX,
 * build/agent/stats_kernels.ptx, embedded in the agent). The host builds of the same
 * bodies include stats_kernels.h. */
#include "stats_kernels.h"

#ifndef EVM_DEVICE
#error "stats_kernels.c is the device build (clang -x cuda --cuda-device-only); the host includes stats_kernels.h"
#endif

#define EVM_KERNEL(name, body)                                                             \
	extern "C" __attribute__((global)) void name(struct evm_job j, evm_u32 arg, evm_u32 n) \
	{                                                                                  \
		evm_u64 w = (evm_u64)__nvvm_read_ptx_sreg_ctaid_x() *                      \
				    __nvvm_read_ptx_sreg_ntid_x() +                        \
			    __nvvm_read_ptx_sreg_tid_x();                                  \
		if (w < n)                                                                 \
			body(&j, arg, w);                                                  \
	}

/* the kernels (the order of EVM_K_*; evm_kernel_names, stats_kernels.h) */
EVM_KERNEL(evm_k_partial, evm_partial)
EVM_KERNEL(evm_k_merge1, evm_merge1)
EVM_KERNEL(evm_k_merge2, evm_merge2)
EVM_KERNEL(evm_k_hist, evm_hist)
EVM_KERNEL(evm_k_select, evm_select)
EVM_KERNEL(evm_k_finish, evm_finish)
