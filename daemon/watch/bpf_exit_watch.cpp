#include "watch/bpf_exit_watch.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>

#include "exit_watch.skel.h"
#include "util/log.h"
#include "watch/exit_event.h"

namespace coloc::watch {

namespace {

int libbpf_to_spdlog(enum libbpf_print_level level, const char* fmt, va_list args) {
  char buf[512];
  int n = std::vsnprintf(buf, sizeof buf, fmt, args);
  if (n > 0 && buf[n < int(sizeof buf) ? n - 1 : sizeof buf - 2] == '\n') buf[n < int(sizeof buf) ? n - 1 : sizeof buf - 2] = '\0';
  auto lg = log::get("watch");
  if (level == LIBBPF_WARN) lg->debug("libbpf: {}", buf);  // probing failures are expected; the caller logs the outcome
  else lg->trace("libbpf: {}", buf);
  return n;
}

}  // namespace

Result<std::unique_ptr<BpfExitWatch>> BpfExitWatch::open(OnExit on_exit) {
  libbpf_set_print(libbpf_to_spdlog);
  std::unique_ptr<BpfExitWatch> w(new BpfExitWatch());
  w->on_exit_ = std::move(on_exit);
  w->skel_ = exit_watch__open();
  if (!w->skel_) return Error::from_errno("open the BPF exit watcher");
  if (int rc = exit_watch__load(w->skel_); rc != 0)
    return Error{-rc, "load the BPF exit watcher (needs CAP_BPF and CAP_PERFMON, and kernel BTF)"};
  if (int rc = exit_watch__attach(w->skel_); rc != 0)
    return Error{-rc, "attach to the sched_process_exit raw tracepoint"};
  w->ring_ = ring_buffer__new(bpf_map__fd(w->skel_->maps.events), &BpfExitWatch::on_event, w.get(), nullptr);
  if (!w->ring_) return Error::from_errno("open the BPF ring buffer");
  return w;
}

BpfExitWatch::~BpfExitWatch() {
  if (ring_) ring_buffer__free(ring_);
  if (skel_) exit_watch__destroy(skel_);
}

int BpfExitWatch::fd() const { return ring_buffer__epoll_fd(ring_); }

int BpfExitWatch::on_event(void* ctx, void* data, size_t size) {
  auto* self = static_cast<BpfExitWatch*>(ctx);
  if (size < sizeof(coloc_exit_event)) return 0;
  coloc_exit_event e;
  __builtin_memcpy(&e, data, sizeof e);
  self->on_exit_(pid_t(e.pid), e.start_boottime, e.exit_code);
  return 0;
}

void BpfExitWatch::drain() { ring_buffer__consume(ring_); }

Result<void> BpfExitWatch::watch(pid_t pid) {
  __u32 key = __u32(pid);
  __u8 one = 1;
  if (bpf_map__update_elem(skel_->maps.watched, &key, sizeof key, &one, sizeof one, BPF_ANY) != 0)
    return Error::from_errno("add pid " + std::to_string(pid) + " to the BPF watch map");
  return {};
}

void BpfExitWatch::unwatch(pid_t pid) {
  __u32 key = __u32(pid);
  bpf_map__delete_elem(skel_->maps.watched, &key, sizeof key, 0);
}

}  // namespace coloc::watch
