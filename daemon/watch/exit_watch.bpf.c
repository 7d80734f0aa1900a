// SPDX-License-Identifier: (Apache-2.0 OR GPL-2.0)
/* daemon/watch/exit_watch.bpf.c — tells colocd, within microseconds, that a process it watches
 * has exited: a raw tracepoint on sched_process_exit, filtered by a hash map of watched pids
 * (colocd fills it), reporting through a ring buffer. Only the exit of a thread group's last
 * thread counts (signal->live has dropped to zero), so a thread that ends early is not a death.
 *
 * CO-RE without vmlinux.h: the few kernel fields we read are declared below with
 * preserve_access_index, and libbpf relocates them against the running kernel's BTF. */
#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "watch/exit_event.h"

typedef struct {
  int counter;
} atomic_t;

struct signal_struct {
  atomic_t live;
} __attribute__((preserve_access_index));

struct task_struct {
  int pid;
  int tgid;
  int exit_code;
  unsigned long long start_boottime; /* ns since boot (Linux 5.3); /proc/PID/stat field 22 in ns */
  struct task_struct *group_leader;
  struct signal_struct *signal;
} __attribute__((preserve_access_index));

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __type(key, __u32);
  __type(value, __u8);
} watched SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 256 * 1024);
} events SEC(".maps");

SEC("raw_tp/sched_process_exit")
int handle_exit(struct bpf_raw_tracepoint_args *ctx) {
  struct task_struct *task = (struct task_struct *)ctx->args[0];
  __u32 tgid = (__u32)BPF_CORE_READ(task, tgid);
  if (!bpf_map_lookup_elem(&watched, &tgid)) return 0;
  if (BPF_CORE_READ(task, signal, live.counter) != 0) return 0; /* other threads live on */
  struct coloc_exit_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
  if (!e) return 0;
  e->pid = tgid;
  e->tid = (__u32)BPF_CORE_READ(task, pid);
  e->exit_code = BPF_CORE_READ(task, exit_code);
  /* The process's start time is its thread group leader's (as /proc shows it): with the pid it
   * names the process, so an exit never stands for a later process that reuses the pid. */
  e->reserved = 0;
  e->start_boottime = 0;
  if (bpf_core_field_exists(task->start_boottime))
    e->start_boottime = BPF_CORE_READ(task, group_leader, start_boottime);
  bpf_ringbuf_submit(e, 0);
  return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
