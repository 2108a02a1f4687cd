/* x86-64 instruction lengths (x86insn.c): enough of the encoding to walk a compiled
 * function from its first byte to its last, one instruction after the other, and to
 * know its calls. Used to place a uprobe on a call instruction (callsites.c): a uprobe
 * that is not on an instruction's first byte corrupts the target, so an encoding this
 * decoder does not know exactly is refused, never guessed. */
#ifndef EVMBPF_X86INSN_H
#define EVMBPF_X86INSN_H

#include <stddef.h>
#include <stdint.h>

enum x86_kind {
	X86_OTHER,     /* flows on to the next instruction */
	X86_FLOW,      /* a jump, a return, an indirect call: where rsi's value stops being known */
	X86_CALL_REL,  /* call rel32: `target` is the callee */
	X86_CALL_SLOT, /* call *disp32(%rip): `target` is the slot holding the callee */
	X86_SET_RSI,   /* rsi (esi) set to a constant: `target` (mov $imm32 or lea disp32(%rip)) */
};

struct x86_insn {
	unsigned len;
	enum x86_kind kind;
	uint64_t target;
};

/* The instruction at p (n bytes readable), at address `at`: its length, or -1 when the
 * bytes are not an instruction this decoder knows (then nothing after it can be trusted). */
int x86_decode(const uint8_t *p, size_t n, uint64_t at, struct x86_insn *out);

#endif
