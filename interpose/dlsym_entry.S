// interpose/dlsym_entry.S — the exported dlsym (both glibc versions), see dlsym_entry.h.
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
//   void* dlsym(void* handle, const char* name)
//     hook = coloc_dlsym_filter(handle, name, <our return address>)
//     if hook: return hook
//     else: restore the argument registers and the stack exactly as the caller left them, and
//           jump to glibc's dlsym, which then sees the caller's return address as its own.
// dlsym takes two arguments; the caller expects every other argument register to be clobbered.

#if defined(__x86_64__)
        .text
        .p2align 4
        .globl  coloc_dlsym_new
        .globl  coloc_dlsym_old
        .symver coloc_dlsym_new, dlsym@@GLIBC_2.34
        .symver coloc_dlsym_old, dlsym@GLIBC_2.2.5
        .type   coloc_dlsym_new, @function
        .type   coloc_dlsym_old, @function
coloc_dlsym_new:
coloc_dlsym_old:
        .cfi_startproc
        pushq   %rdi                    // handle
        .cfi_adjust_cfa_offset 8
        pushq   %rsi                    // name
        .cfi_adjust_cfa_offset 8
        subq    $8, %rsp                // 16-byte alignment for the call
        .cfi_adjust_cfa_offset 8
        movq    24(%rsp), %rdx          // our return address = the caller's
        call    coloc_dlsym_filter
        addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        testq   %rax, %rax
        jnz     1f
        movq    coloc_real_dlsym(%rip), %rax
        testq   %rax, %rax
        jz      1f                      // glibc's dlsym unknown (cannot happen): answer NULL
        jmp     *%rax                   // tail call: glibc sees our caller
1:      ret
        .cfi_endproc
        .size   coloc_dlsym_new, .-coloc_dlsym_new
        .size   coloc_dlsym_old, .-coloc_dlsym_old

#elif defined(__aarch64__)
        .text
        .p2align 4
        .globl  coloc_dlsym_new
        .globl  coloc_dlsym_old
        .symver coloc_dlsym_new, dlsym@@GLIBC_2.34
        .symver coloc_dlsym_old, dlsym@GLIBC_2.17
        .type   coloc_dlsym_new, %function
        .type   coloc_dlsym_old, %function
coloc_dlsym_new:
coloc_dlsym_old:
        .cfi_startproc
        stp     x29, x30, [sp, #-32]!   // frame record (x30 = the caller's return address)
        .cfi_def_cfa_offset 32
        .cfi_offset 29, -32
        .cfi_offset 30, -24
        mov     x29, sp
        stp     x0, x1, [sp, #16]       // handle, name
        mov     x2, x30
        bl      coloc_dlsym_filter
        mov     x9, x0
        ldp     x0, x1, [sp, #16]
        ldp     x29, x30, [sp], #32     // x30 is the caller's return address again
        .cfi_def_cfa_offset 0
        .cfi_restore 29
        .cfi_restore 30
        cbnz    x9, 1f
        adrp    x16, coloc_real_dlsym
        ldr     x16, [x16, :lo12:coloc_real_dlsym]
        cbz     x16, 2f                 // glibc's dlsym unknown (cannot happen): answer NULL
        br      x16                     // tail call: glibc sees our caller
1:      mov     x0, x9
        ret
2:      mov     x0, xzr
        ret
        .cfi_endproc
        .size   coloc_dlsym_new, .-coloc_dlsym_new
        .size   coloc_dlsym_old, .-coloc_dlsym_old
#else
#error "libcoloc.so supports x86-64 and aarch64"
#endif

        .section .note.GNU-stack,"",%progbits
