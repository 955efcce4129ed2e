/* The floating-point environment (backend/fpenv.h). */
#define _GNU_SOURCE /* fegetexcept, feenableexcept */
#include "backend/fpenv.h"

#include <fenv.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define FPENV_X86 1
/* MXCSR bits 0-5 are the exception flags, which a kernel may set. */
#define FPENV_MXCSR_FLAGS 0x3Fu
#else
#define FPENV_X86 0
#endif

kv_fpenv kv_fpenv_read(void) {
    kv_fpenv e = { fegetround(), fegetexcept(), 0, 0 };
#if FPENV_X86
    e.mxcsr = _mm_getcsr() & ~FPENV_MXCSR_FLAGS;
    unsigned short cw;
    __asm__ volatile("fnstcw %0" : "=m"(cw));
    e.x87_control = cw;
#endif
    return e;
}

bool kv_fpenv_equal(const kv_fpenv *a, const kv_fpenv *b) {
    return a->round == b->round && a->except_mask == b->except_mask && a->mxcsr == b->mxcsr &&
           a->x87_control == b->x87_control;
}

void kv_fpenv_restore(const kv_fpenv *want) {
    const kv_fpenv now = kv_fpenv_read();
    if (now.round != want->round) fesetround(want->round);
    if (now.except_mask != want->except_mask) {
        fedisableexcept(FE_ALL_EXCEPT);
        feenableexcept(want->except_mask);
    }
#if FPENV_X86
    const kv_fpenv mid = kv_fpenv_read();
    if (mid.mxcsr != want->mxcsr) _mm_setcsr((_mm_getcsr() & FPENV_MXCSR_FLAGS) | want->mxcsr);
    if (mid.x87_control != want->x87_control) {
        const unsigned short cw = (unsigned short)want->x87_control;
        __asm__ volatile("fldcw %0" : : "m"(cw));
    }
#endif
}

static const char *fpenv_round_name(int r) {
    if (r == FE_TONEAREST) return "to-nearest";
    if (r == FE_TOWARDZERO) return "toward-zero";
    if (r == FE_UPWARD) return "upward";
    if (r == FE_DOWNWARD) return "downward";
    return "unknown";
}

static void fpenv_add(char *buf, int cap, const char *what, unsigned a, unsigned b) {
    const size_t used = strlen(buf);
    if ((int)used >= cap - 1) return;
    snprintf(buf + used, (size_t)cap - used, "%s%s 0x%04x -> 0x%04x", used ? "; " : "", what, a, b);
}

void kv_fpenv_describe(const kv_fpenv *before, const kv_fpenv *after, char *buf, int cap) {
    if (cap <= 0) return;
    buf[0] = '\0';
    if (before->round != after->round)
        snprintf(buf, (size_t)cap, "rounding mode %s -> %s", fpenv_round_name(before->round),
                 fpenv_round_name(after->round));
    if (before->except_mask != after->except_mask)
        fpenv_add(buf, cap, "enabled exception traps", (unsigned)before->except_mask,
                  (unsigned)after->except_mask);
#if FPENV_X86
    /* FTZ is bit 15, DAZ bit 6: the ones a vendor library flips for speed. */
    if (before->mxcsr != after->mxcsr)
        fpenv_add(buf, cap, "MXCSR (FTZ 0x8000, DAZ 0x40, masks, rounding)", before->mxcsr,
                  after->mxcsr);
    if (before->x87_control != after->x87_control)
        fpenv_add(buf, cap, "x87 control word", before->x87_control, after->x87_control);
#endif
}
