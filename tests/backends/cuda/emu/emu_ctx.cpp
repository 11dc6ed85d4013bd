/* emu_ctx.cpp: the fibers' stack switch (emu_ctx.h): x86-64 assembly where it is safe, ucontext
 * elsewhere. Holds no fiber policy (that is emu_runtime.cpp's), only the switch. Test-only. */
#include "emu_ctx.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__x86_64__) && defined(__ELF__) && !defined(EMU_CTX_UCONTEXT)
/* emu_ctx_switch_x64(&save_sp, new_sp): pushes the SysV callee-saved registers, stores the stack
 * pointer in save_sp, loads new_sp and pops the same in the reverse order; its ret resumes the
 * other context. The MXCSR and x87 control words are not switched: every context runs with the
 * launching thread's (nothing in the backend or the emulator changes rounding or flush modes),
 * and saving and loading them cost more than the rest of the switch. A fresh stack
 * (emu_ctx_make) holds that frame with emu_ctx_start_x64 as the return address, fn in r12 and a
 * zero rbp (the end of a frame-pointer backtrace). */
asm(".text\n"
    ".globl emu_ctx_switch_x64\n"
    ".hidden emu_ctx_switch_x64\n"
    ".type emu_ctx_switch_x64,@function\n"
    "emu_ctx_switch_x64:\n"
    "  pushq %rbp\n"
    "  pushq %rbx\n"
    "  pushq %r12\n"
    "  pushq %r13\n"
    "  pushq %r14\n"
    "  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n"
    "  popq %r14\n"
    "  popq %r13\n"
    "  popq %r12\n"
    "  popq %rbx\n"
    "  popq %rbp\n"
    "  ret\n"
    ".size emu_ctx_switch_x64, .-emu_ctx_switch_x64\n"
    ".globl emu_ctx_start_x64\n"
    ".hidden emu_ctx_start_x64\n"
    ".type emu_ctx_start_x64,@function\n"
    "emu_ctx_start_x64:\n"
    "  callq *%r12\n"
    "  ud2\n"
    ".size emu_ctx_start_x64, .-emu_ctx_start_x64\n");
extern "C" void emu_ctx_switch_x64(void **save_sp, void *new_sp);
extern "C" void emu_ctx_start_x64(void);

/* A CET shadow stack would see the switch's ret as a return-address mismatch: under one, ucontext
 * (glibc's switches the shadow stack too). rdsspq is a no-op, leaving 0, where none is on. */
static int emu_ctx_asm(void)
{
    static int on = -1;
    if (on < 0) {
        unsigned long long ssp = 0;
        asm volatile("rdsspq %0" : "+r"(ssp));
        on = ssp == 0;
    }
    return on;
}
#else
static int emu_ctx_asm(void) { return 0; }
#endif

/* c's ucontext, allocated on first use (the fibers' hot state stays small without it) */
static ucontext_t *emu_ctx_uc(EmuCtx *c)
{
    if (!c->uc && !(c->uc = (ucontext_t *)calloc(1, sizeof(ucontext_t)))) {
        fprintf(stderr, "EMU FATAL: out of memory\n");
        abort();
    }
    return c->uc;
}

void emu_ctx_make(EmuCtx *c, char *stack, size_t size, void (*fn)(void))
{
#if defined(__x86_64__) && defined(__ELF__) && !defined(EMU_CTX_UCONTEXT)
    if (emu_ctx_asm()) {
        /* the frame emu_ctx_switch_x64 pops, under a 16-byte aligned top: fn is entered with
         * rsp + 8 a multiple of 16, as the ABI wants after a call */
        uint64_t *top = (uint64_t *)(((uintptr_t)(stack + size)) & ~(uintptr_t)15);
        uint64_t *sp = top - 7;
        sp[0] = 0, sp[1] = 0, sp[2] = 0;       /* r15 r14 r13 */
        sp[3] = (uint64_t)(uintptr_t)fn;       /* r12 */
        sp[4] = 0, sp[5] = 0;                  /* rbx rbp */
        sp[6] = (uint64_t)(uintptr_t)emu_ctx_start_x64;
        c->sp = sp;
        return;
    }
#endif
    c->uc = emu_ctx_uc(c);
    if (getcontext(c->uc) != 0) {
        fprintf(stderr, "EMU FATAL: getcontext failed\n");
        abort();
    }
    c->uc->uc_stack.ss_sp = stack;
    c->uc->uc_stack.ss_size = size;
    c->uc->uc_link = nullptr;
    makecontext(c->uc, fn, 0);
}

void emu_ctx_swap(EmuCtx *from, EmuCtx *to)
{
#if defined(__x86_64__) && defined(__ELF__) && !defined(EMU_CTX_UCONTEXT)
    if (emu_ctx_asm()) {
        emu_ctx_switch_x64(&from->sp, to->sp);
        return;
    }
#endif
    if (swapcontext(emu_ctx_uc(from), emu_ctx_uc(to)) != 0) {
        fprintf(stderr, "EMU FATAL: swapcontext failed\n");
        abort();
    }
}
