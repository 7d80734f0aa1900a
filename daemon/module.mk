# colocd: the node daemon (daemon/), its BPF exit watcher, and the pieces the CLI and tests share.
#
#   build/bin/colocd                 the daemon
#   build/gen/exit_watch.skel.h      libbpf skeleton generated from daemon/watch/exit_watch.bpf.c
#   DAEMON_CORE_OBJS                 pure logic (broker, reports, config), also linked into tests

DAEMON_CPPFLAGS := -Idaemon $(SPDLOG_CPPFLAGS)

# Pure logic and page handling: no sockets, no BPF. Linked into colocd and the test binaries.
DAEMON_CORE_SRCS := \
  daemon/util/log.cpp \
  daemon/util/fs.cpp \
  daemon/broker/broker.cpp \
  daemon/broker/broker_clients.cpp \
  daemon/broker/broker_limits.cpp \
  daemon/broker/broker_devices.cpp \
  daemon/broker/outside.cpp \
  daemon/broker/priority_fifo_policy.cpp \
  daemon/broker/backfill.cpp \
  daemon/broker/broker_queue.cpp \
  daemon/broker/broker_suspend.cpp \
  daemon/broker/preempt.cpp \
  daemon/compute/gates.cpp \
  daemon/compute/compute_policy.cpp \
  daemon/compute/priority_policy.cpp \
  daemon/compute/scheduler.cpp \
  daemon/compute/policy_store.cpp \
  daemon/compute/share_window.cpp \
  daemon/compute/device_time.cpp \
  daemon/report/timeline.cpp \
  daemon/report/job_recorder.cpp \
  daemon/report/report_store.cpp \
  daemon/report/report_writer.cpp \
  daemon/report/job_state_store.cpp \
  daemon/history/history_store.cpp \
  daemon/engine/resume_state.cpp \
  daemon/config/config.cpp \
  daemon/config/config_table.cpp \
  daemon/engine/client_pages.cpp \
  daemon/device/nvml_reader.cpp \
  daemon/device/outside_processes.cpp \
  daemon/device/host_memory.cpp \
  daemon/metrics/counters.cpp \
  daemon/metrics/exposition.cpp
DAEMON_CORE_OBJS := $(patsubst %.cpp,$(OBJ)/%.o,$(DAEMON_CORE_SRCS))

# The event loop, the listener and the process watcher: also linked into the tests, which drive
# them with real sockets and processes.
DAEMON_IO_SRCS := \
  daemon/engine/event_loop.cpp \
  daemon/engine/listener.cpp \
  daemon/engine/helper_process.cpp \
  daemon/watch/pidfd_watch.cpp \
  daemon/watch/bpf_exit_watch.cpp \
  daemon/watch/process_watcher.cpp \
  daemon/metrics/exporter.cpp
DAEMON_IO_OBJS := $(patsubst %.cpp,$(OBJ)/%.o,$(DAEMON_IO_SRCS))

# The rest of the daemon: connections, pages, admin requests, the server.
DAEMON_SRCS := \
  daemon/engine/connection.cpp \
  daemon/engine/admin.cpp \
  daemon/engine/server.cpp \
  daemon/engine/server_reload.cpp \
  daemon/engine/server_restart.cpp \
  daemon/engine/server_compute.cpp \
  daemon/engine/server_estimate.cpp \
  daemon/engine/server_queue.cpp \
  daemon/engine/server_cancel.cpp \
  daemon/engine/server_suspend.cpp \
  daemon/engine/server_metrics.cpp \
  daemon/engine/server_outside.cpp \
  daemon/engine/server_systemd.cpp \
  daemon/engine/systemd.cpp \
  daemon/main.cpp
DAEMON_OBJS := $(patsubst %.cpp,$(OBJ)/%.o,$(DAEMON_SRCS)) $(DAEMON_IO_OBJS)

$(DAEMON_CORE_OBJS) $(DAEMON_OBJS): CPPFLAGS += $(DAEMON_CPPFLAGS)
# toml++ header-only in the one file that parses TOML: no run-time library, and the test
# binaries link the config parser without extra libraries.
$(OBJ)/daemon/config/config.o: CPPFLAGS += -DTOML_HEADER_ONLY=1

# ---- BPF: exit_watch.bpf.c -> exit_watch.bpf.o -> exit_watch.skel.h (libbpf-bootstrap style) ----
BPF_CLANG ?= clang
BPF_GEN   := $(BUILD)/gen/bpf
EXIT_WATCH_BPF_OBJ  := $(BPF_GEN)/exit_watch.bpf.o
EXIT_WATCH_SKEL     := $(BPF_GEN)/exit_watch.skel.h
BPF_ARCH := $(shell uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/')

$(BPF_GEN)/%.bpf.o: daemon/watch/%.bpf.c daemon/watch/exit_event.h | $(DEPS_STAMP)
	$(call say,BPF,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(BPF_CLANG) -g -O2 -target bpf -D__TARGET_ARCH_$(BPF_ARCH) -I/usr/include/$(shell uname -m)-linux-gnu -Idaemon -c $< -o $@

$(BPF_GEN)/%.skel.h: $(BPF_GEN)/%.bpf.o | $(DEPS_STAMP)
	$(call say,GEN-SKEL,$@)
	$(Q)bpftool gen skeleton $< name $* > $@

$(OBJ)/daemon/watch/bpf_exit_watch.o: $(EXIT_WATCH_SKEL)
$(OBJ)/daemon/watch/bpf_exit_watch.o: CPPFLAGS += -I$(BPF_GEN)

# ---- colocd ---------------------------------------------------------------------------------
COLOCD := $(BUILD)/bin/colocd
$(COLOCD): $(DAEMON_OBJS) $(DAEMON_CORE_OBJS)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^ $(SPDLOG_LIBS) -lsqlite3 -lbpf -lxxhash -lsystemd -ldl -lpthread

PRODUCTS += $(COLOCD)
TEST_EXTRA_OBJS += $(DAEMON_CORE_OBJS) $(DAEMON_IO_OBJS)

# The daemon's and CLI's tests include daemon headers.
$(TEST_OBJ)/tests/unit/daemon/%.o $(TEST_OBJ)/tests/integration/daemon/%.o: CPPFLAGS += -Idaemon -Itools/coloc

# ---- the protocol-speaking fake client for integration tests and the benchmark ---------------
COLOCD_CLIENT := $(BUILD)/tests/bin/colocd_client
$(COLOCD_CLIENT): $(OBJ)/tests/programs/colocd_client.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^
TEST_PROGRAMS += $(COLOCD_CLIENT)
# ---- fuzz target for the message decoder (libFuzzer, clang) ----------------------------------
PROTOCOL_FUZZ := $(BUILD)/fuzz/protocol_fuzz
$(PROTOCOL_FUZZ): tests/fuzz/protocol_fuzz.cpp include/coloc/protocol.h | $(DEPS_STAMP)
	$(call say,FUZZ-CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANGXX) -std=c++20 -g -O1 -Iinclude -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	  $< -o $@
FUZZERS += $(PROTOCOL_FUZZ)

# ---- benchmark: 1,000 simulated clients on 8 devices (make bench) ----------------------------
DAEMON_BENCH := $(BUILD)/bench/daemon_bench
$(DAEMON_BENCH): $(OBJ)/tests/bench/daemon_bench.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^ -lpthread

.PHONY: bench-daemon
bench-daemon: $(DAEMON_BENCH) $(COLOCD) $(COLOCD_CLIENT)
	$(Q)$(DAEMON_BENCH) --colocd $(COLOCD) --client $(COLOCD_CLIENT) --out $(BUILD)/bench/daemon.json
BENCHES += bench-daemon

# ---- benchmark: a mass start of N jobs, with and without coloc (make bench) ------------------
START_BENCH := $(BUILD)/bench/start_bench
$(START_BENCH): $(OBJ)/tests/bench/start_bench.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^

.PHONY: bench-start
# (it also needs every product and test program: the Makefile adds them once all modules are read)
bench-start: $(START_BENCH)
	$(Q)$(START_BENCH) --build $(BUILD) --out $(BUILD)/bench/start.json
BENCHES += bench-start
