# libcoloc.so, the CUDA driver interposer (see interpose/README.md and interpose/hooks.def), its
# test programs and its benchmark.

INTERPOSE_SRCS := $(wildcard interpose/*.cpp)
INTERPOSE_OBJS := $(patsubst %.cpp,$(OBJ)/%.o,$(INTERPOSE_SRCS)) $(OBJ)/interpose/dlsym_entry.o
INTERPOSE_LIB  := $(BUILD)/lib/libcoloc.so
INTERPOSE_MAP  := $(BUILD)/gen/interpose/exports.map

# Code that runs in someone else's process: hidden by default, no exceptions or RTTI, static TLS
# (it is preloaded: every thread-local is one %fs-relative load), and (in sanitizer builds) the
# default glibc symbol versions, which the sanitizer runtimes intercept.
$(INTERPOSE_OBJS): CXXFLAGS += -fvisibility=hidden -fvisibility-inlines-hidden -fno-exceptions -fno-rtti \
  -ftls-model=initial-exec
$(INTERPOSE_OBJS): CPPFLAGS += $(if $(SAN),-DCOLOC_SANITIZED) -I.
# The dlsym filter runs inside every dlsym of the process, even during the sanitizer runtime's own
# start-up: never instrumented.
$(OBJ)/interpose/dlsym_filter.o: CXXFLAGS += -fno-sanitize=all

$(INTERPOSE_MAP): interpose/exports.map.in interpose/hooks.def | $(DEPS_STAMP)
	$(call say,GEN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) -E -P -x c -Iinterpose $< -o $@

# Release builds link the C++ runtime statically (libcoloc.so needs nothing but glibc at run
# time); sanitizer builds link it dynamically, as the sanitizer runtimes require. libdl.so.2 and
# libpthread.so.0 stay NEEDED: on glibc < 2.34 they hold dlopen, pthread_once and friends (on newer
# glibc they are empty and cost nothing).
INTERPOSE_LDFLAGS := -shared -Wl,-soname,libcoloc.so -Wl,--version-script=$(INTERPOSE_MAP) \
  -Wl,-z,defs -Wl,-z,now -Wl,-z,relro -Wl,-Bsymbolic $(if $(SAN),,-static-libstdc++ -static-libgcc)

$(INTERPOSE_LIB): $(INTERPOSE_OBJS) $(INTERPOSE_MAP)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) $(INTERPOSE_LDFLAGS) -o $@ $(INTERPOSE_OBJS) -Wl,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0

PRODUCTS += $(INTERPOSE_LIB)

# The parts of the interposer that unit tests link directly (plain C++, no driver).
TEST_EXTRA_OBJS += $(OBJ)/interpose/ledger.o $(OBJ)/interpose/mutex.o $(OBJ)/interpose/pool_shadow.o $(OBJ)/interpose/options.o $(OBJ)/interpose/log.o $(OBJ)/interpose/signal_wait.o

.PHONY: interpose
interpose: $(INTERPOSE_LIB)

# ---- test programs (tests/programs/interpose_*) -------------------------------------------------
# interpose_client and libinterpose_early.so link libcuda.so.1 by SONAME through the toolkit's stub
# (LD_LIBRARY_PATH=build/sim picks simgpu at run time, a GPU machine's loader the real driver);
# interpose_cudart, like cudart, does not link it at all.
INTERPOSE_TEST_BIN := $(BUILD)/tests/bin
INTERPOSE_TEST_LIB := $(BUILD)/tests/lib
INTERPOSE_CUDA_STUB := -L$(CUDA_HOME)/lib64/stubs -lcuda
INTERPOSE_PROGRAMS := $(addprefix $(INTERPOSE_TEST_BIN)/,interpose_client interpose_cudart interpose_next interpose_early)
INTERPOSE_TEST_LIBS := $(addprefix $(INTERPOSE_TEST_LIB)/,libinterpose_next_a.so libinterpose_next_b.so libinterpose_early.so)

$(OBJ)/tests/programs/interpose_%.o: CPPFLAGS += -I.

$(INTERPOSE_TEST_BIN)/interpose_client: $(OBJ)/tests/programs/interpose_client.o $(KERNELS_OBJ)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^ $(INTERPOSE_CUDA_STUB) -lpthread

$(INTERPOSE_TEST_BIN)/interpose_cudart: $(OBJ)/tests/programs/interpose_cudart.o $(KERNELS_OBJ)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^ -ldl

$(INTERPOSE_TEST_LIB)/libinterpose_%.so: $(OBJ)/tests/programs/interpose_%.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -shared -o $@ $< -ldl

$(INTERPOSE_TEST_LIB)/libinterpose_early.so: $(OBJ)/tests/programs/interpose_early_lib.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -shared -o $@ $< $(INTERPOSE_CUDA_STUB)

$(INTERPOSE_TEST_BIN)/interpose_next: $(OBJ)/tests/programs/interpose_next.o \
    $(INTERPOSE_TEST_LIB)/libinterpose_next_a.so $(INTERPOSE_TEST_LIB)/libinterpose_next_b.so
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $< -L$(INTERPOSE_TEST_LIB) -Wl,--no-as-needed -linterpose_next_a -linterpose_next_b \
	  -Wl,-rpath,'$$ORIGIN/../lib' -ldl

$(INTERPOSE_TEST_BIN)/interpose_early: $(OBJ)/tests/programs/interpose_early.o $(INTERPOSE_TEST_LIB)/libinterpose_early.so
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $< -L$(INTERPOSE_TEST_LIB) -linterpose_early -Wl,-rpath,'$$ORIGIN/../lib' \
	  $(INTERPOSE_CUDA_STUB)

# A fake driver whose cuGetProcAddress answers with an internal entry point.
INTERPOSE_FAKE_CUDA := $(BUILD)/tests/fakecuda/libcuda.so.1
$(INTERPOSE_FAKE_CUDA): $(OBJ)/tests/programs/interpose_fakecuda.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -shared -Wl,-soname,libcuda.so.1 -o $@ $<

TEST_PROGRAMS += $(INTERPOSE_PROGRAMS) $(INTERPOSE_TEST_LIBS) $(INTERPOSE_FAKE_CUDA)

# The interposer's tests include its headers as "interpose/..." and support as "tests/support/...".
$(patsubst %.cpp,$(TEST_OBJ)/%.o,$(wildcard tests/unit/interpose/*.cpp tests/integration/interpose/*.cpp)): CPPFLAGS += -I.

# ---- benchmark: `make bench` -> build/bench/interpose.json (see tests/bench/interpose_bench.cpp) ----
INTERPOSE_BENCH := $(BUILD)/bench/interpose_bench
$(OBJ)/tests/bench/interpose_bench.o: CPPFLAGS += -I.

$(INTERPOSE_BENCH): $(OBJ)/tests/bench/interpose_bench.o $(KERNELS_OBJ)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^ $(INTERPOSE_CUDA_STUB)

# A driver whose every entry point returns at once: timed against it, the hooks' own cost shows.
INTERPOSE_NULL_DRIVER := $(BUILD)/bench/nulldriver/libcuda.so.1
$(INTERPOSE_NULL_DRIVER): $(OBJ)/tests/bench/interpose_nulldriver.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -shared -Wl,-soname,libcuda.so.1 -o $@ $<

.PHONY: bench-interpose
bench-interpose: $(INTERPOSE_BENCH) $(INTERPOSE_LIB) $(SIMGPU_LIB) $(INTERPOSE_NULL_DRIVER) $(BUILD)/bin/colocd
	$(call say,BENCH,interpose)
	$(Q)LD_LIBRARY_PATH=$(abspath $(BUILD)/sim) $(INTERPOSE_BENCH) run --sim $(BUILD)/sim \
	  --null-driver $(dir $(INTERPOSE_NULL_DRIVER)) --lib $(INTERPOSE_LIB) --colocd $(BUILD)/bin/colocd \
	  --out $(BUILD)/bench/interpose.json

BENCHES += bench-interpose
