# coloc — GPU co-location runtime.  See README.md and docs/ARCHITECTURE.md.
#
#   make                 build everything (checks and installs dependencies first)
#   make test            build and run every test; ends with doctest's summary line
#   make demo            the main job: collocated training jobs with and without coloc
#   make bench           benchmarks; JSON under build/bench/
#   make fuzz            libFuzzer targets (FUZZ_SECONDS each, default 60)
#   make SAN=asan test   AddressSanitizer + UBSan build under build/asan/
#   make SAN=tsan test   ThreadSanitizer build under build/tsan/
#   make install         install under PREFIX (default /usr/local), DESTDIR honoured; make uninstall
#   make V=1 ...         print full commands
#
# Each component adds its targets in its own module.mk; this file holds the shared rules.

.DELETE_ON_ERROR:
# Keep intermediate files (objects of pattern chains, generated sources): make would otherwise
# delete them at the end of a run, rebuild them next time, and end its output with 'rm ...'.
.SECONDARY:
.SUFFIXES:
SHELL := /bin/bash
.DEFAULT_GOAL := all

NPROC := $(shell nproc 2>/dev/null || echo 2)
ifeq ($(filter -j%,$(MAKEFLAGS)),)
  MAKEFLAGS += -j$(NPROC)
endif
MAKEFLAGS += --no-print-directory

CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CXX       := g++
CLANGXX   ?= clang++

# ---- verbosity --------------------------------------------------------------------------
V ?= 0
ifeq ($(V),1)
  Q :=
  say = @true
else
  Q := @
  say = @printf '  %-8s %s\n' '$(1)' '$(2)'
endif

# ---- build variant ----------------------------------------------------------------------
SAN ?=
ifeq ($(SAN),)
  BUILD := build
  SANFLAGS :=
  OPT := -O2
else ifeq ($(SAN),asan)
  BUILD := build/asan
  SANFLAGS := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
  # GCC 12 reports false maybe-uninitialized warnings inside libstdc++'s <regex> under ASan.
  SANWARN := -Wno-maybe-uninitialized
  OPT := -O1
else ifeq ($(SAN),tsan)
  BUILD := build/tsan
  SANFLAGS := -fsanitize=thread
  OPT := -O1
else
  $(error SAN must be empty, asan or tsan (got '$(SAN)'))
endif
OBJ := $(BUILD)/obj
# The test code's objects: the plain build's under SAN=asan too (tests/module.mk says why).
TEST_OBJ := $(if $(filter asan,$(SAN)),build/obj,$(OBJ))
# The sanitizer runtime a preloaded library needs in front of it (empty without SAN).
SAN_RUNTIME := $(if $(SAN),$(shell $(CXX) -print-file-name=lib$(SAN).so))

# ---- flags ------------------------------------------------------------------------------
# Assertions stay on in every build (no -DNDEBUG).
CPPFLAGS := -Iinclude -isystem $(CUDA_HOME)/include -MMD -MP
# Debug information: full in the plain build (a debugger's variables); line tables only in the
# sanitizer builds, which need no more for their reports' stacks and compile a fifth faster
# (daemon/engine/server.cpp under ASan+UBSan: 40 s with -g, 31 s with -g1).
DEBUG := $(if $(SAN),-g1,-g)
CXXFLAGS := -std=c++20 $(OPT) $(DEBUG) -fPIC -Wall -Wextra -Wno-missing-field-initializers $(SANWARN) $(SANFLAGS)
LDFLAGS  := $(SANFLAGS)
# Debian's compiled spdlog/fmt, for the daemon, the CLI and the tests (never the interposer).
SPDLOG_CPPFLAGS := -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL
SPDLOG_LIBS     := -lspdlog -lfmt

# ---- dependencies -----------------------------------------------------------------------
DEPS_STAMP := build/.deps-ok
$(DEPS_STAMP): mk/deps.sh
	$(call say,DEPS,checking packages and the CUDA toolkit)
	$(Q)mk/deps.sh
	$(Q)mkdir -p $(@D) && touch $@

.PHONY: deps
deps:
	$(Q)mk/deps.sh
	$(Q)mkdir -p build && touch $(DEPS_STAMP)

# ---- generic compile rules --------------------------------------------------------------
$(OBJ)/%.o: %.cpp | $(DEPS_STAMP)
	$(call say,CXX,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(OBJ)/%.o: %.S | $(DEPS_STAMP)
	$(call say,AS,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(CPPFLAGS) $(SANFLAGS) -fPIC -c $< -o $@

# ---- components -------------------------------------------------------------------------
# Each module.mk appends its products to PRODUCTS, its test helper programs to TEST_PROGRAMS,
# and its benchmark targets to BENCHES.
PRODUCTS :=
TEST_PROGRAMS :=
BENCHES :=
include $(wildcard tools/simgpu/module.mk tools/workload/module.mk interpose/module.mk \
                   daemon/module.mk tools/coloc/module.mk estimator/module.mk \
                   tools/slurm/module.mk tools/ckpt/module.mk tests/programs/module.mk)
include tests/module.mk
include mk/install.mk

.PHONY: all
all: $(PRODUCTS) $(TEST_PROGRAMS)
# The mass-start benchmark runs the whole product and the test programs; a prerequisite list is
# read where it is written, so this one waits until every module has added its own.
bench-start: $(PRODUCTS) $(TEST_PROGRAMS)

.PHONY: clean
clean:
	rm -rf build

-include $(shell find $(OBJ) -name '*.d' 2>/dev/null)
