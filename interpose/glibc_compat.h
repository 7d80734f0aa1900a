// interpose/glibc_compat.h — bind glibc symbols to their oldest versions, so that libcoloc.so built
// on a new glibc loads on old ones (tests/integration/interpose/link_test.cpp prints and checks the
// newest GLIBC_ version it needs; docs/performance.md records it).
//
// Rules for code that runs in someone else's process: never crash, hang, exit or print to stdout;
// never throw across the C ABI; allocate nothing on hot paths; leave a job that stays within its
// limits exactly as it was.
//
// glibc 2.34 moved libdl and libpthread into libc and gave their functions new default versions
// (dlopen@@GLIBC_2.34, pthread_once@@GLIBC_2.34, ...); the old versions stay exported by libc for
// compatibility, and on older glibc they live in libdl.so.2 / libpthread.so.0, which libcoloc.so
// keeps as NEEDED. Include this header in every file that calls one of these functions.
// stat/fstat are versioned GLIBC_2.33 (older glibc had them inline over __xstat): libcoloc.so does
// not call them (lseek for sizes, access for existence, the fstat system call for identities). Sanitizer
// builds (which only run here) keep the default versions, which the sanitizer runtimes intercept.
#pragma once

#if defined(__x86_64__)
#define COLOC_GLIBC_BASE_VERSION "GLIBC_2.2.5"
#define COLOC_GLIBC_DLINFO_VERSION "GLIBC_2.3.3"
#elif defined(__aarch64__)
#define COLOC_GLIBC_BASE_VERSION "GLIBC_2.17"
#define COLOC_GLIBC_DLINFO_VERSION "GLIBC_2.17"
#else
#error "libcoloc.so supports x86-64 and aarch64"
#endif

#if !defined(COLOC_SANITIZED)
#define COLOC_OLD_SYMBOL(name) __asm__(".symver " #name "," #name "@" COLOC_GLIBC_BASE_VERSION);
COLOC_OLD_SYMBOL(dlopen)
COLOC_OLD_SYMBOL(dlerror)
COLOC_OLD_SYMBOL(dlvsym)
__asm__(".symver dlinfo,dlinfo@" COLOC_GLIBC_DLINFO_VERSION);
COLOC_OLD_SYMBOL(pthread_once)
COLOC_OLD_SYMBOL(pthread_key_create)
COLOC_OLD_SYMBOL(pthread_setspecific)
COLOC_OLD_SYMBOL(pthread_getspecific)
COLOC_OLD_SYMBOL(pthread_create)
COLOC_OLD_SYMBOL(pthread_mutex_trylock)
COLOC_OLD_SYMBOL(pthread_attr_setstacksize)
COLOC_OLD_SYMBOL(pthread_sigmask)
COLOC_OLD_SYMBOL(pthread_rwlock_init)
COLOC_OLD_SYMBOL(pthread_rwlock_rdlock)
COLOC_OLD_SYMBOL(pthread_rwlock_tryrdlock)
COLOC_OLD_SYMBOL(pthread_rwlock_wrlock)
COLOC_OLD_SYMBOL(pthread_rwlock_unlock)
#undef COLOC_OLD_SYMBOL
#endif
