# Tests: one doctest binary holding every unit and integration test, so `make test` ends with a
# single doctest summary line. Per-area binaries (build/tests/<area>-tests, from tests/unit/<area>
# and tests/integration/<area>) are there for quick work on one component:
#   make test-simgpu        build and run only the simgpu tests
#   make test TEST_ARGS='-tc=*fork*'   pass doctest options

TEST_SUPPORT_SRCS := $(wildcard tests/support/*.cpp)
TEST_SRCS   := $(wildcard tests/unit/*/*.cpp tests/integration/*/*.cpp)
# ThreadSanitizer reports races between threads. These unit suites test single-threaded code (the
# CUDA ABI tables, coloc-ckpt's roll-back order, the CLI's formatting, protocol encoding, the
# estimator's arithmetic, the GPU scripts' parsing, the workload generators) and start no thread, so the TSan build leaves them
# out; the plain and ASan builds run them. Should one of them start a thread, the TSan build
# stops and says so.
TSAN_SKIPPED := tests/unit/abi tests/unit/ckpt tests/unit/cli tests/unit/common tests/unit/estimator tests/unit/gpu \
                tests/unit/workload
ifeq ($(SAN),tsan)
  TSAN_THREAD_RE := std::thread|std::jthread|pthread_create|std::async|fork[(]
  TSAN_THREADED := $(shell grep -lE '$(TSAN_THREAD_RE)' $(filter $(addsuffix /%,$(TSAN_SKIPPED)),$(TEST_SRCS)) \
                     2>/dev/null)
  $(if $(TSAN_THREADED),$(error $(TSAN_THREADED) start threads: take them out of TSAN_SKIPPED in tests/module.mk))
  TEST_SRCS := $(filter-out $(addsuffix /%,$(TSAN_SKIPPED)),$(TEST_SRCS))
endif
TEST_AREAS  := $(sort $(notdir $(patsubst %/,%,$(dir $(TEST_SRCS)))))
TEST_BIN    := $(BUILD)/tests/coloc-tests
# (What every build's test code shares; what names the build is only build_info.o's.)
TEST_DEFS   := -DCOLOC_SOURCE_DIR='"$(abspath .)"' -DCOLOC_CUDA_HOME='"$(CUDA_HOME)"'
TEST_BUILD_DEFS := -DCOLOC_BUILD_DIR='"$(abspath $(BUILD))"' -DCOLOC_SAN='"$(SAN)"' \
                   -DCOLOC_SAN_RUNTIME='"$(SAN_RUNTIME)"'
TEST_LIBS   := $(SPDLOG_LIBS) -lsqlite3 -lxxhash -lbpf -ldl -lpthread

# Where the test objects live (TEST_OBJ). Under SAN=asan the test code is the plain build's own objects
# (build/obj/tests): AddressSanitizer works with uninstrumented code beside it, and every product
# object the tests run or link (libcoloc.so, colocd, coloc, simgpu, and the daemon, ledger and
# estimator objects the unit tests call) keeps ASan+UBSan. What goes unchecked is the test code
# itself and the header code it inlines; what it saves is compiling ~165 test files a second time,
# about a third of the ASan build (CI: ~8 of its ~19 minutes of build). Only
# tests/support/build_info.cpp, which names the build (its directory, sanitizer and runtime), is
# compiled per build. TSan keeps its own test objects: synchronization in uninstrumented code
# (inline atomics) is invisible to it and would show as races.
# (TEST_OBJ is set in the Makefile, before the modules that add flags to test objects.)
TEST_BUILD_INFO := $(OBJ)/tests/support/build_info.o
test_objs = $(patsubst %.cpp,$(TEST_OBJ)/%.o,$(filter-out tests/support/build_info.cpp,$(1))) \
            $(if $(filter tests/support/build_info.cpp,$(1)),$(TEST_BUILD_INFO))
$(call test_objs,$(TEST_SRCS) $(TEST_SUPPORT_SRCS)): CPPFLAGS += $(TEST_DEFS) $(SPDLOG_CPPFLAGS)
$(TEST_BUILD_INFO): CPPFLAGS += $(TEST_BUILD_DEFS) -Itests/support
# The test code itself is compiled for build time, the product code it tests is not: line tables
# only (-g1: sanitizer stacks and debuggers still show file:line), and under SAN=asan no
# instrumentation (the plain build's objects). Measured on tests/integration/e2e/outside_test.cpp (2-core CI machine kind): ASan+UBSan
# -g 26 s, ASan -g1 7 s; TSan -g 10.4 s, -g1 4.5 s; plain -O2 -g 8.2 s, -g1 5.5 s. Over ~130 test
# files that is most of CI's time. Every product object (libcoloc.so, colocd, coloc, simgpu, the
# estimator) keeps its optimization (-O2, or -O1 under a sanitizer), its debug information and the
# full sanitizer set; the binary links with it. The test code is -O1 in every build: on
# tests/integration/e2e/cancel_test.cpp the plain build's -O2 took 12.1 s, -O1 8.7 s (-O0 8.1 s,
# and slower tests).
TEST_SANFLAGS := $(if $(filter tsan,$(SAN)),$(SANFLAGS))
# (-Wno-array-bounds: at -O1 GCC 12 warns of std::string's own memcpy in a concatenation, a false
# positive of its libstdc++ -- tests/unit/abi/cuda_abi_test.cpp and simgpu/config_test.cpp; GCC
# bug 105329. The product code keeps the warning.)
TEST_CXXFLAGS := -std=c++20 -O1 -g1 -fPIC -Wall -Wextra -Wno-missing-field-initializers -Wno-array-bounds \
                 $(TEST_SANFLAGS)
$(call test_objs,$(TEST_SRCS) $(TEST_SUPPORT_SRCS)): CXXFLAGS := $(TEST_CXXFLAGS)
# The precompiled header (tests/support/pch.h) every test file but doctest's main is compiled
# with: built with the test code's own flags, beside a copy of the header that -include names
# (GCC takes pch.h.gch in its place; -Winvalid-pch says so should it ever not).
TEST_PCH_H := $(TEST_OBJ)/tests/pch/pch.h
TEST_PCH := $(TEST_PCH_H).gch
TEST_PCH_USERS := $(call test_objs,$(TEST_SRCS) $(filter-out tests/support/main.cpp tests/support/build_info.cpp,$(TEST_SUPPORT_SRCS)))
# (Its own flags in full: a target's prerequisites would otherwise inherit the flags of the test
# file that asked for it first.)
$(TEST_PCH): CPPFLAGS := $(CPPFLAGS) $(TEST_DEFS) $(SPDLOG_CPPFLAGS) -Itests/support
$(TEST_PCH): CXXFLAGS := $(TEST_CXXFLAGS)
$(TEST_PCH): tests/support/pch.h tests/module.mk | $(DEPS_STAMP)
	$(call say,PCH,$<)
	$(Q)mkdir -p $(@D)
	$(Q)cp $< $(TEST_PCH_H)
	$(Q)$(CXX) $(CPPFLAGS) $(CXXFLAGS) -x c++-header -c $(TEST_PCH_H) -o $@
$(TEST_PCH_USERS): $(TEST_PCH)
$(TEST_PCH_USERS): CXXFLAGS += -include $(TEST_PCH_H) -Winvalid-pch
$(TEST_PCH_USERS): CPPFLAGS += -Itests/support

# The plain build's test objects, built from a SAN=asan make: the generic rule only knows $(OBJ).
ifneq ($(TEST_OBJ),$(OBJ))
$(TEST_OBJ)/tests/%.o: tests/%.cpp | $(DEPS_STAMP)
	$(call say,CXX,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@
-include $(shell find $(TEST_OBJ)/tests -name '*.d' 2>/dev/null)
endif

# Test sources may list extra objects they need from the components in TEST_EXTRA_OBJS.
TEST_EXTRA_OBJS ?=

$(TEST_BIN): $(call test_objs,$(TEST_SRCS) $(TEST_SUPPORT_SRCS)) $(TEST_EXTRA_OBJS)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^ $(TEST_LIBS)

define test_area
$(BUILD)/tests/$(1)-tests: $(call test_objs,$(wildcard tests/unit/$(1)/*.cpp tests/integration/$(1)/*.cpp) $(TEST_SUPPORT_SRCS)) $(TEST_EXTRA_OBJS)
	$$(call say,LINK,$$@)
	$(Q)mkdir -p $$(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $$@ $$^ $(TEST_LIBS)

.PHONY: test-$(1)
test-$(1): $(PRODUCTS) $(TEST_PROGRAMS) $(BUILD)/tests/$(1)-tests
	$(Q)$$(TEST_ENV) $(BUILD)/tests/$(1)-tests $$(TEST_ARGS)
endef
$(foreach a,$(TEST_AREAS),$(eval $(call test_area,$(a))))

# TSan needs to be told that tests fork, and what it must not report of programs that are not
# ours (tests/tsan.supp); ASan keeps going past leaks in helper children.
TEST_ENV := $(if $(filter tsan,$(SAN)),TSAN_OPTIONS='die_after_fork=0 halt_on_error=1 second_deadlock_stack=1 atexit_sleep_ms=0 suppressions=$(abspath tests/tsan.supp)') \
            $(if $(filter asan,$(SAN)),ASAN_OPTIONS='detect_leaks=0' UBSAN_OPTIONS='print_stacktrace=1')

# Everything `make test` needs, built and not run (.ci/run builds the next variant with it while
# a test run leaves the cores idle).
.PHONY: test-build
test-build: $(PRODUCTS) $(TEST_PROGRAMS) $(TEST_BIN)

# A plain `make test` keeps the run's output (the daemons' logs, the tests' measurements) in
# $(TEST_LOG) and prints doctest's summary: a passing run is a few lines. A failing one prints the
# whole log, which holds everything that explains it (and .ci/failures picks out its failing test
# cases). With TEST_ARGS or V=1 the output streams to the terminal as it comes.
TEST_LOG := $(BUILD)/tests/test.log
.PHONY: test
test: $(PRODUCTS) $(TEST_PROGRAMS) $(TEST_BIN)
ifeq ($(TEST_ARGS)$(filter 1,$(V)),)
	$(Q)printf '  %-8s %s\n' TEST "$$($(TEST_BIN) --count 2>/dev/null | sed -n 's/.*unskipped test cases passing the current filters: //p') test cases (a few minutes; output in $(TEST_LOG))"
	$(Q)rc=0; $(TEST_ENV) $(TEST_BIN) > $(TEST_LOG) 2>&1 || rc=$$?; \
	  if [ $$rc -ne 0 ]; then cat $(TEST_LOG); echo "make test: failed (exit status $$rc); the output above is also in $(TEST_LOG)"; exit $$rc; fi; \
	  grep -E '^\[doctest\] (test cases|assertions|Status)' $(TEST_LOG)
else
	$(Q)$(TEST_ENV) $(TEST_BIN) $(TEST_ARGS)
endif

# ---- benchmark: the timeslice policy from simgpu's trace (make bench; tests/bench/timeslice_bench.cpp) ----
# Three GPU-bound jobs under colocd at 50, 100 and 500 ms quanta, and weights 2:1:1 at 100 ms:
# idle time, handover latency, run lengths, shares -> build/bench/timeslice.json (about a minute).
TIMESLICE_BENCH := $(BUILD)/bench/timeslice_bench
$(TIMESLICE_BENCH): $(OBJ)/tests/bench/timeslice_bench.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^

.PHONY: bench-timeslice
bench-timeslice: $(TIMESLICE_BENCH) $(PRODUCTS) $(TEST_PROGRAMS)
	$(call say,BENCH,timeslice)
	$(Q)$(TIMESLICE_BENCH) --build $(BUILD) --out $(BUILD)/bench/timeslice.json
BENCHES += bench-timeslice

# ---- benchmark: simgpu's contention against Lucid's measured pairs (tests/bench/contention_bench.cpp) ----
# Lucid pairs replayed as duty-cycle coloc-train jobs (--lucid) alone and together on simgpu:
# speed together / alone against Lucid's, the errors and their MAE -> build/bench/contention.json
# (a few minutes).
CONTENTION_BENCH := $(BUILD)/bench/contention_bench
$(CONTENTION_BENCH): $(OBJ)/tests/bench/contention_bench.o $(OBJ)/tools/workload/lucid.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^

.PHONY: bench-contention
bench-contention: $(CONTENTION_BENCH) $(BUILD)/bin/coloc-train $(BUILD)/sim/libcuda.so.1
	$(call say,BENCH,contention)
	$(Q)$(CONTENTION_BENCH) --build $(BUILD) --data tools/workload/lucid --out $(BUILD)/bench/contention.json
BENCHES += bench-contention

# ---- benchmark: priority isolation, share / timeslice / priority (tests/bench/priority_bench.cpp) ----
# Lucid-calibrated mixes (a high job with idle gaps beside GPU-hungry best-effort jobs) under colocd
# in each mode: the high job's speed against solo, every job's, total normalized throughput, work
# conservation from SIMGPU_TRACE; the priority controller's convergence after a best-effort job
# joins (coloc policy --json); the launch hook in kWindow (interpose_bench, few rounds)
# -> build/bench/priority.json (about 3 minutes).
PRIORITY_BENCH := $(BUILD)/bench/priority_bench
$(PRIORITY_BENCH): $(OBJ)/tests/bench/priority_bench.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^

.PHONY: bench-priority
bench-priority: $(PRIORITY_BENCH) $(PRODUCTS) $(BUILD)/bin/coloc-train $(BUILD)/bench/interpose_bench \
                $(BUILD)/bench/nulldriver/libcuda.so.1
	$(call say,BENCH,priority)
	$(Q)$(PRIORITY_BENCH) --build $(BUILD) --lucid-dir tools/workload/lucid --out $(BUILD)/bench/priority.json
BENCHES += bench-priority
# The interposer's benchmark sets `coloc policy` on a colocd of its own (the launch in kWindow).
bench-interpose: $(BUILD)/bin/coloc

# ---- benchmark: coloc estimate against CARMA's measured peaks (tests/bench/estimate_bench.cpp) ----
# The rows of tests/bench/carma/carma-runs.csv, each estimated from what CARMA's workload definition
# says it ran (tests/bench/carma/mapping.csv): measured vs estimated per row, MAPE, under-estimates,
# FakeTensor's on the same rows -> build/bench/estimate.json (a second; no process, no GPU).
ESTIMATE_BENCH := $(BUILD)/bench/estimate_bench
$(OBJ)/tests/bench/estimate_bench.o: CPPFLAGS += -I.
$(ESTIMATE_BENCH): $(OBJ)/tests/bench/estimate_bench.o $(BUILD)/lib/libcolocest.a
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^

.PHONY: bench-estimate
bench-estimate: $(ESTIMATE_BENCH)
	$(call say,BENCH,estimate)
	$(Q)$(ESTIMATE_BENCH) --data tests/bench/carma --out $(BUILD)/bench/estimate.json
BENCHES += bench-estimate

# ---- benchmark: the node queue, strict order against EASY backfill (tests/bench/queue_bench.cpp) ----
# 200 jobs from a fixed seed replayed through colocd's Broker with a fake clock: mean and p95 wait,
# makespan, memory utilization, heads started past their promised shadow time
# -> build/bench/queue.json (a second; no process, no device).
QUEUE_BENCH := $(BUILD)/bench/queue_bench
$(OBJ)/tests/bench/queue_bench.o: CPPFLAGS += $(DAEMON_CPPFLAGS)
QUEUE_BENCH_OBJS := $(filter $(OBJ)/daemon/broker/% $(OBJ)/daemon/util/log.o,$(DAEMON_CORE_OBJS))
$(QUEUE_BENCH): $(OBJ)/tests/bench/queue_bench.o $(QUEUE_BENCH_OBJS)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^ $(TEST_LIBS)

.PHONY: bench-queue
bench-queue: $(QUEUE_BENCH)
	$(call say,BENCH,queue)
	$(Q)$(QUEUE_BENCH) --out $(BUILD)/bench/queue.json
BENCHES += bench-queue

# ---- benchmark: simgpu's checkpoint API, checkpoint and restore time against bytes ----
# (tests/bench/checkpoint_bench.py) 256 MiB to 4 GiB, three lock/checkpoint/restore/unlock cycles
# each, data checked after; what PCIe predicts for 40 GiB -> build/bench/checkpoint.json (a minute).
.PHONY: bench-checkpoint
bench-checkpoint: $(BUILD)/sim/libcuda.so.1 $(BUILD)/tests/bin/cuprobe
	$(call say,BENCH,checkpoint)
	$(Q)python3 tests/bench/checkpoint_bench.py --build $(BUILD) --out $(BUILD)/bench/checkpoint.json
BENCHES += bench-checkpoint

# ---- benchmark: the high job's wait for memory, preempt = off and best-effort ----
# (tests/bench/preempt_bench.py) issue 29's scenario: two best-effort jobs of 36 GiB on an 80 GiB
# device, a high job of 40 GiB arrives -> build/bench/preempt.json (about a minute).
.PHONY: bench-preempt
bench-preempt: $(PRODUCTS) $(TEST_PROGRAMS)
	$(call say,BENCH,preempt)
	$(Q)python3 tests/bench/preempt_bench.py --build $(BUILD) --out $(BUILD)/bench/preempt.json
BENCHES += bench-preempt

.PHONY: bench
bench: $(BENCHES)

# Fuzz targets (libFuzzer, clang): each module appends a binary to FUZZERS; `make fuzz` runs each
# for FUZZ_SECONDS on its seed corpus and fails on any crash.
FUZZERS ?=
FUZZ_SECONDS ?= 60
.PHONY: fuzz
fuzz: $(FUZZERS)
	$(Q)set -o pipefail; for f in $(FUZZERS); do \
	  echo "  FUZZ     $$f ($(FUZZ_SECONDS) s)"; \
	  corpus=$$(mktemp -d); seeds=tests/fuzz/corpus/$$(basename $$f); \
	  $$f -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $$corpus $$( [ -d $$seeds ] && echo $$seeds ) \
	    2>&1 | tail -n 12 || { rm -rf $$corpus; exit 1; }; rm -rf $$corpus; \
	done

# The main job (see README): tools/demo/demo.sh fills it in.
.PHONY: demo
demo: $(PRODUCTS)
	$(Q)tools/demo/demo.sh $(BUILD)


