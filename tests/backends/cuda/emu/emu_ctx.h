/* emu_ctx.h: stack switching for the emulator's fibers (emu_runtime.cpp). On x86-64 a few
 * instructions that save the callee-saved registers, with no system call (glibc's swapcontext
 * makes one per switch, rt_sigprocmask, which made most of the emulator's time); elsewhere,
 * where a CET shadow stack is on, or built with -DEMU_CTX_UCONTEXT, ucontext. Test-only. */
#ifndef LOOM_EMU_CTX_H
#define LOOM_EMU_CTX_H
#include <stddef.h>
#include <ucontext.h>

struct EmuCtx {
    void *sp;       /* the saved stack pointer (x86-64 switch) */
    ucontext_t *uc; /* the saved context (ucontext fallback; allocated at first use, never freed) */
};

/* Makes c start fn on the stack [stack, stack + size) at its first emu_ctx_swap into it. fn must
 * never return (it switches away for good instead). */
void emu_ctx_make(EmuCtx *c, char *stack, size_t size, void (*fn)(void));

/* Saves the running context in from and resumes to; returns when something swaps back to from. */
void emu_ctx_swap(EmuCtx *from, EmuCtx *to);

#endif
