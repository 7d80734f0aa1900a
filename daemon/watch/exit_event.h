/* daemon/watch/exit_event.h — the record the BPF exit watcher sends to colocd (kernel and user
 * space both include this). */
#ifndef COLOC_EXIT_EVENT_H
#define COLOC_EXIT_EVENT_H

#ifdef __cplusplus
#include <cstdint>
typedef uint32_t coloc_u32;
typedef int32_t coloc_s32;
typedef uint64_t coloc_u64;
#else
typedef __u32 coloc_u32;
typedef __s32 coloc_s32;
typedef __u64 coloc_u64;
#endif

/* One process (thread group) whose last thread exited. */
struct coloc_exit_event {
  coloc_u32 pid;        /* thread group id, as getpid() and SO_PEERCRED see it */
  coloc_u32 tid;        /* the thread that exited last */
  coloc_s32 exit_code;  /* wait(2) status: (code << 8) for exit(code), the signal number when killed */
  coloc_u32 reserved;
  coloc_u64 start_boottime; /* the process's start, ns since boot (0: the kernel has none) */
};

#endif
