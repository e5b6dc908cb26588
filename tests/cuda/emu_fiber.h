/* tests/cuda/emu_fiber.h — the CUDA emulator's fibres: start a function on its own
 * stack and switch between stacks, with no system call.
 *
 * Why not swapcontext: glibc's swapcontext saves and restores the signal mask, one
 * rt_sigprocmask system call per switch. The emulator switches at every
 * __syncthreads of every emulated thread, and a profile of the emulator tests showed
 * ~80% of their time in swapcontext and the kernel. A fibre here never changes the
 * signal mask, so on x86-64 a switch is the System V callee-saved registers, the
 * stack pointer and the floating-point control words (MXCSR, x87 control word):
 * everything a function call may not clobber, so a switch looks like an ordinary call
 * to both sides. Elsewhere the ucontext functions remain (correct, slower).
 *
 *   EmuFiber f;  emu_fiber_init(&f, stack, size, entry);   // entry() runs on stack
 *   emu_fiber_switch(&sched, &f);   // saves the caller in sched, resumes f
 *
 * entry must never return: it switches away for the last time instead (the emulator's
 * fibre_main switches back to the scheduler after the kernel returns). Header-only,
 * included by cuda_emu.cpp, which each emulator module compiles once.
 */
#ifndef PD2BW_TESTS_CUDA_EMU_FIBER_H
#define PD2BW_TESTS_CUDA_EMU_FIBER_H

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__)

struct EmuFiber {
  void *sp; /* the saved stack pointer; the saved registers lie above it */
};

/* emu_fiber_switch_(from_sp, to_sp): push the callee-saved state, store rsp in
 * *from_sp, load to_sp, pop the state saved there, return into the other fibre. */
extern "C" void emu_fiber_switch_(void **from_sp, void *to_sp);
/* A new fibre's first "return" lands here, with the entry function in r12. The
 * stack is 16-byte aligned at the call, as the ABI requires. */
extern "C" void emu_fiber_trampoline_(void);
__asm__(".text\n"
        ".p2align 4\n"
        ".hidden emu_fiber_switch_\n"
        ".globl emu_fiber_switch_\n"
        ".type emu_fiber_switch_,@function\n"
        "emu_fiber_switch_:\n"
        "  pushq %rbp\n"
        "  pushq %rbx\n"
        "  pushq %r12\n"
        "  pushq %r13\n"
        "  pushq %r14\n"
        "  pushq %r15\n"
        "  subq $8, %rsp\n"
        "  stmxcsr (%rsp)\n"
        "  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n"
        "  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n"
        "  fldcw 4(%rsp)\n"
        "  addq $8, %rsp\n"
        "  popq %r15\n"
        "  popq %r14\n"
        "  popq %r13\n"
        "  popq %r12\n"
        "  popq %rbx\n"
        "  popq %rbp\n"
        "  ret\n"
        ".size emu_fiber_switch_, .-emu_fiber_switch_\n"
        ".p2align 4\n"
        ".hidden emu_fiber_trampoline_\n"
        ".globl emu_fiber_trampoline_\n"
        ".type emu_fiber_trampoline_,@function\n"
        "emu_fiber_trampoline_:\n"
        "  callq *%r12\n"
        "  ud2\n" /* entry returned: a bug in the emulator, stop at once */
        ".size emu_fiber_trampoline_, .-emu_fiber_trampoline_\n");

/* Lays out stack so that the first switch to f pops zeroed registers (r12 = entry),
 * the caller's MXCSR and x87 control word, and returns into the trampoline. */
static inline void emu_fiber_init(EmuFiber *f, char *stack, size_t size, void (*entry)(void)) {
  uintptr_t top = ((uintptr_t)(stack + size)) & ~(uintptr_t)15;
  uint64_t *sp = (uint64_t *)top;
  /* The switch's ret leaves rsp = top (≡ 0 mod 16) in the trampoline, so its call
   * enters entry with rsp ≡ 8 (mod 16), as after any call. */
  *--sp = (uint64_t)(uintptr_t)&emu_fiber_trampoline_; /* return address */
  *--sp = 0;                               /* rbp */
  *--sp = 0;                               /* rbx */
  *--sp = (uint64_t)(uintptr_t)entry;      /* r12 */
  *--sp = 0;                               /* r13 */
  *--sp = 0;                               /* r14 */
  *--sp = 0;                               /* r15 */
  uint32_t ctl[2];
  __asm__ volatile("stmxcsr %0" : "=m"(ctl[0]));
  __asm__ volatile("fnstcw %0" : "=m"(ctl[1]));
  *--sp = (uint64_t)ctl[0] | (uint64_t)ctl[1] << 32; /* MXCSR, x87 control word */
  f->sp = sp;
}

static inline void emu_fiber_switch(EmuFiber *from, EmuFiber *to) { emu_fiber_switch_(&from->sp, to->sp); }

#else /* not x86-64: the ucontext functions */

#include <ucontext.h>

struct EmuFiber {
  ucontext_t ctx;
};

static inline void emu_fiber_init(EmuFiber *f, char *stack, size_t size, void (*entry)(void)) {
  getcontext(&f->ctx);
  f->ctx.uc_stack.ss_sp = stack;
  f->ctx.uc_stack.ss_size = size;
  f->ctx.uc_link = NULL;
  makecontext(&f->ctx, entry, 0);
}

static inline void emu_fiber_switch(EmuFiber *from, EmuFiber *to) { swapcontext(&from->ctx, &to->ctx); }

#endif

#endif /* PD2BW_TESTS_CUDA_EMU_FIBER_H */
