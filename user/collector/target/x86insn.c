/* x86-64 instruction lengths: legacy prefixes, REX, the one-byte map, the 0F, 0F38 and
 * 0F3A maps, and VEX; ModRM, SIB, displacements and immediates as the 64-bit mode sizes
 * them. What compilers do not emit in user code, or what this decoder cannot size
 * without more of the encoding (EVEX, XOP, 3DNow!, SSE4a's extrq/insertq, the opcodes
 * invalid in 64-bit mode, a REX before a legacy prefix) is refused. tests/test_phases.py checks the boundaries against objdump's on every Python
 * of the test matrix. */
#include "x86insn.h"

#include <string.h>

#define M   0x01 /* a ModRM byte (and what it brings) */
#define I8  0x02
#define I16 0x04
#define IZ  0x08 /* 16 or 32 bits: the operand size */
#define FL  0x10 /* a jump or a return */
#define BAD 0x20 /* not decoded: refused */
#define SP  0x40 /* sized below, one by one */

static const uint8_t one[256] = {
	[0x00 ... 0x03] = M, [0x04] = I8, [0x05] = IZ, [0x06 ... 0x07] = BAD,
	[0x08 ... 0x0b] = M, [0x0c] = I8, [0x0d] = IZ, [0x0e] = BAD, [0x0f] = SP,
	[0x10 ... 0x13] = M, [0x14] = I8, [0x15] = IZ, [0x16 ... 0x17] = BAD,
	[0x18 ... 0x1b] = M, [0x1c] = I8, [0x1d] = IZ, [0x1e ... 0x1f] = BAD,
	[0x20 ... 0x23] = M, [0x24] = I8, [0x25] = IZ, [0x26 ... 0x27] = BAD,
	[0x28 ... 0x2b] = M, [0x2c] = I8, [0x2d] = IZ, [0x2e ... 0x2f] = BAD,
	[0x30 ... 0x33] = M, [0x34] = I8, [0x35] = IZ, [0x36 ... 0x37] = BAD,
	[0x38 ... 0x3b] = M, [0x3c] = I8, [0x3d] = IZ, [0x3e ... 0x3f] = BAD,
	[0x40 ... 0x4f] = BAD, /* REX, taken as a prefix */
	[0x60 ... 0x62] = BAD, [0x63] = M, [0x64 ... 0x67] = BAD,
	[0x68] = IZ, [0x69] = M | IZ, [0x6a] = I8, [0x6b] = M | I8,
	[0x70 ... 0x7f] = I8 | FL,
	[0x80] = M | I8, [0x81] = M | IZ, [0x82] = BAD, [0x83] = M | I8, [0x84 ... 0x8e] = M,
	[0x8f] = SP, [0x9a] = BAD,
	[0xa0 ... 0xa3] = SP, [0xa8] = I8, [0xa9] = IZ,
	[0xb0 ... 0xb7] = I8, [0xb8 ... 0xbf] = SP,
	[0xc0 ... 0xc1] = M | I8, [0xc2] = I16 | FL, [0xc3] = FL, [0xc4 ... 0xc5] = SP,
	[0xc6] = M | I8, [0xc7] = M | IZ, [0xc8] = I16 | I8, [0xca] = I16 | FL, [0xcb] = FL,
	[0xcd] = I8, [0xce] = BAD, [0xcf] = FL,
	[0xd0 ... 0xd3] = M, [0xd4 ... 0xd6] = BAD, [0xd8 ... 0xdf] = M,
	[0xe0 ... 0xe3] = I8 | FL, [0xe4 ... 0xe7] = I8, [0xe8] = SP, [0xe9] = SP,
	[0xea] = BAD, [0xeb] = I8 | FL,
	[0xf0] = BAD, [0xf2 ... 0xf3] = BAD, [0xf6 ... 0xf7] = SP, [0xfe] = M, [0xff] = SP,
};

static const uint8_t two[256] = {
	[0x00 ... 0x03] = M, [0x04] = BAD, [0x0a] = BAD, [0x0c] = BAD, [0x0d] = M, [0x0f] = BAD,
	[0x10 ... 0x1f] = M,
	[0x20 ... 0x23] = M, [0x24 ... 0x27] = BAD, [0x28 ... 0x2f] = M,
	[0x36] = BAD, [0x38] = SP, [0x39] = BAD, [0x3a] = SP, [0x3b ... 0x3f] = BAD,
	[0x40 ... 0x6f] = M,
	[0x70 ... 0x73] = M | I8, [0x74 ... 0x76] = M, [0x78 ... 0x7b] = BAD, [0x7c ... 0x7f] = M,
	[0x80 ... 0x8f] = SP,
	[0x90 ... 0x9f] = M,
	[0xa3] = M, [0xa4] = M | I8, [0xa5] = M, [0xa6 ... 0xa7] = BAD, [0xab] = M,
	[0xac] = M | I8, [0xad ... 0xaf] = M,
	[0xb0 ... 0xb9] = M, [0xba] = M | I8, [0xbb ... 0xbf] = M,
	[0xc0 ... 0xc1] = M, [0xc2] = M | I8, [0xc3] = M, [0xc4 ... 0xc6] = M | I8, [0xc7] = M,
	[0xd0 ... 0xff] = M,
};

static int is_prefix(uint8_t b)
{
	return b == 0xf0 || b == 0xf2 || b == 0xf3 || b == 0x2e || b == 0x36 || b == 0x3e ||
	       b == 0x26 || b == 0x64 || b == 0x65 || b == 0x66 || b == 0x67;
}

static int32_t s32(const uint8_t *p)
{
	int32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* ModRM and what it brings (SIB, displacement) at p[i]: the bytes it takes, or -1. Where
 * it addresses disp32(%rip), *rip_disp is where that displacement starts. */
static int modrm_len(const uint8_t *p, size_t n, size_t i, size_t *rip_disp)
{
	if (i >= n)
		return -1;
	uint8_t m = p[i], mod = m >> 6, rm = m & 7;
	int len = 1;
	if (mod == 3)
		return len;
	if (rm == 4) {
		if (i + 1 >= n)
			return -1;
		len++;
		if (mod == 0 && (p[i + 1] & 7) == 5)
			len += 4;
	} else if (mod == 0 && rm == 5) {
		*rip_disp = i + 1;
		len += 4;
	}
	len += mod == 1 ? 1 : mod == 2 ? 4 : 0;
	return len;
}

/* VEX (c4, c5 at p[i]): map 0F, 0F38 or 0F3A, then an opcode and ModRM. */
static int vex_len(const uint8_t *p, size_t n, size_t i, int *imm)
{
	size_t head = p[i] == 0xc5 ? 2 : 3;
	if (i + head >= n)
		return -1;
	int map = head == 2 ? 1 : p[i + 1] & 0x1f;
	uint8_t op = p[i + head];
	if (map < 1 || map > 3)
		return -1;
	if (map == 1 && op == 0x77)
		return (int)head + 1; /* vzeroupper, vzeroall: no ModRM */
	*imm = map == 3 || (map == 1 && ((op >= 0x70 && op <= 0x73) || op == 0xc2 ||
					  (op >= 0xc4 && op <= 0xc6)));
	return (int)head + 1;
}

int x86_decode(const uint8_t *p, size_t n, uint64_t at, struct x86_insn *out)
{
	size_t i = 0, rip_disp = 0;
	int opsize16 = 0, addr32 = 0, nprefix = 0;
	uint8_t rex = 0;
	memset(out, 0, sizeof(*out));
	while (i < n && is_prefix(p[i]) && i < 14) {
		opsize16 |= p[i] == 0x66;
		addr32 |= p[i] == 0x67;
		nprefix++;
		i++;
	}
	if (i < n && (p[i] & 0xf0) == 0x40)
		rex = p[i++];
	if (i >= n || (rex && is_prefix(p[i])))
		return -1;
	int rexw = (rex & 8) != 0;
	uint8_t op = p[i++];
	uint8_t f = one[op];
	int imm = 0, vex_imm = 0;
	size_t opat = i - 1;

	if (op == 0x0f) {
		if (i >= n)
			return -1;
		uint8_t op2 = p[i++];
		f = two[op2];
		if (op2 == 0x38) {
			if (i++ >= n)
				return -1;
			f = M;
		} else if (op2 == 0x3a) {
			if (i++ >= n)
				return -1;
			f = M | I8;
		} else if (op2 >= 0x80 && op2 <= 0x8f) {
			f = FL;
			imm = 4; /* rel32, whatever the operand size (below) */
		}
	} else if (op == 0xc4 || op == 0xc5) {
		if (rex || nprefix) /* #UD before a VEX */
			return -1;
		int l = vex_len(p, n, opat, &vex_imm);
		if (l < 0)
			return -1;
		i = opat + (size_t)l;
		f = M | (vex_imm ? I8 : 0);
	} else if (f & SP) {
		switch (op) {
		case 0x8f: /* pop r/m; XOP when ModRM.reg is not 0 */
			if (i >= n || (p[i] & 0x38))
				return -1;
			f = M;
			break;
		case 0xa0 ... 0xa3: /* mov with a 64-bit (or 32-bit) absolute address */
			imm = addr32 ? 4 : 8;
			f = 0;
			break;
		case 0xb8 ... 0xbf:
			imm = rexw ? 8 : opsize16 ? 2 : 4;
			f = 0;
			break;
		case 0xe8:
		case 0xe9: /* rel32: 64-bit mode keeps near branches' operands at 32 bits, and the
			    * psABI's TLS sequences put 66 prefixes before a call rel32 */
			f = FL;
			imm = 4;
			break;
		case 0xf6:
		case 0xf7: /* test r/m, imm has one; the group's others do not */
			if (i >= n)
				return -1;
			f = M | ((p[i] & 0x38) <= 0x08 ? (op == 0xf6 ? I8 : IZ) : 0);
			break;
		case 0xff:
			if (i >= n || (p[i] & 0x38) == 0x38)
				return -1;
			f = M | ((p[i] & 0x38) >= 0x10 && (p[i] & 0x38) <= 0x28 ? FL : 0);
			break;
		default:
			return -1;
		}
	}
	if (f & BAD)
		return -1;
	size_t modrm_at = i;
	if (f & M) {
		int l = modrm_len(p, n, i, &rip_disp);
		if (l < 0)
			return -1;
		i += (size_t)l;
	}
	imm += (f & I8 ? 1 : 0) + (f & I16 ? 2 : 0) + (f & IZ ? (opsize16 && !rexw ? 2 : 4) : 0);
	size_t imm_at = i;
	i += (size_t)imm;
	if (i > n || i > 15)
		return -1;
	out->len = (unsigned)i;
	out->kind = f & FL ? X86_FLOW : X86_OTHER;
	uint64_t next = at + i;

	/* what callsites.c looks for: calls, and constants put in rsi for them */
	if (op == 0xe8) {
		out->kind = X86_CALL_REL;
		out->target = next + (int64_t)s32(p + imm_at);
	} else if (op == 0xff && (p[modrm_at] & 0x38) == 0x10) {
		out->kind = p[modrm_at] == 0x15 ? X86_CALL_SLOT : X86_FLOW;
		if (p[modrm_at] == 0x15)
			out->target = next + (int64_t)s32(p + rip_disp);
	} else if (!nprefix && !rex && op == 0xbe) {
		out->kind = X86_SET_RSI; /* mov $imm32, %esi */
		out->target = (uint32_t)s32(p + imm_at);
	} else if (!nprefix && rex == 0x48 && op == 0xc7 && p[modrm_at] == 0xc6) {
		out->kind = X86_SET_RSI; /* mov $simm32, %rsi */
		out->target = (uint64_t)(int64_t)s32(p + imm_at);
	} else if (!nprefix && rex == 0x48 && op == 0x8d && p[modrm_at] == 0x35) {
		out->kind = X86_SET_RSI; /* lea disp32(%rip), %rsi */
		out->target = next + (int64_t)s32(p + rip_disp);
	}
	return (int)i;
}
