# simgpu: the simulated driver, build/sim/libcuda.so.1, and the simulated NVML,
# build/sim/libnvidia-ml.so.1 (see tools/simgpu/README.md).

SIMGPU_LIB  := $(BUILD)/sim/libcuda.so.1
SIMGPU_SRCS := $(wildcard tools/simgpu/*.cpp)
SIMGPU_OBJS := $(patsubst %.cpp,$(OBJ)/%.o,$(SIMGPU_SRCS))
SIMGPU_GEN  := $(BUILD)/gen/simgpu
SIMGPU_STUB := $(CUDA_HOME)/lib64/stubs/libcuda.so
SIMGPU_NOT_SUPPORTED := $(OBJ)/tools/simgpu/not_supported.o

$(SIMGPU_OBJS): CXXFLAGS += -fvisibility=hidden
$(SIMGPU_OBJS): CPPFLAGS += -I$(SIMGPU_GEN)

# CUresult names and descriptions, generated from cuda.h.
$(SIMGPU_GEN)/cuda_errors.inc: tools/simgpu/gen_errors.py $(CUDA_HOME)/include/cuda.h | $(DEPS_STAMP)
	$(call say,GEN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)python3 $< $(CUDA_HOME)/include/cuda.h $@
$(OBJ)/tools/simgpu/errors.o: $(SIMGPU_GEN)/cuda_errors.inc

# Every driver export simgpu does not implement returns CUDA_ERROR_NOT_SUPPORTED.
$(SIMGPU_GEN)/not_supported.S: tools/simgpu/gen_not_supported.sh $(SIMGPU_OBJS) | $(DEPS_STAMP)
	$(call say,GEN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$< $(SIMGPU_STUB) $@ $(SIMGPU_OBJS)
$(SIMGPU_NOT_SUPPORTED): $(SIMGPU_GEN)/not_supported.S
	$(call say,AS,$<)
	$(Q)$(CXX) $(SANFLAGS) -fPIC -c $< -o $@

# Every symbol resolved at link time, except the sanitizer runtime's (it comes from the program).
comma := ,
SIMGPU_DEFS := $(if $(SAN),,-Wl$(comma)-z$(comma)defs)
$(SIMGPU_LIB): $(SIMGPU_OBJS) $(SIMGPU_NOT_SUPPORTED) tools/simgpu/exports.map
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) -shared $(LDFLAGS) -Wl,-soname,libcuda.so.1 -Wl,--version-script=tools/simgpu/exports.map \
	  -Wl,-Bsymbolic -Wl,-z,nodelete $(SIMGPU_DEFS) \
	  -o $@ $(SIMGPU_OBJS) $(SIMGPU_NOT_SUPPORTED) -ldl -lpthread

PRODUCTS += $(SIMGPU_LIB)

# The simulated NVML, build/sim/libnvidia-ml.so.1: free memory from the same shared state file.
SIMNVML_LIB  := $(BUILD)/sim/libnvidia-ml.so.1
SIMNVML_OBJS := $(OBJ)/tools/simgpu/nvml/nvml.o $(addprefix $(OBJ)/tools/simgpu/,config.o shared_state.o os.o)
$(OBJ)/tools/simgpu/nvml/nvml.o: CXXFLAGS += -fvisibility=hidden
$(SIMNVML_LIB): $(SIMNVML_OBJS) tools/simgpu/nvml/exports.map
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) -shared $(LDFLAGS) -Wl,-soname,libnvidia-ml.so.1 -Wl,--version-script=tools/simgpu/nvml/exports.map \
	  -Wl,-z,nodelete $(SIMGPU_DEFS) -o $@ $(SIMNVML_OBJS) -lpthread

PRODUCTS += $(SIMNVML_LIB)

# The pure parts (configuration, address ranges, module images, shared state, error table) are
# unit-tested in the test binaries directly.
TEST_EXTRA_OBJS += $(addprefix $(OBJ)/tools/simgpu/,config.o range_allocator.o image.o os.o shared_state.o errors.o)

# simgpu's tests include its headers as "tools/simgpu/...".
$(patsubst %.cpp,$(OBJ)/%.o,$(wildcard tests/unit/simgpu/*.cpp tests/integration/simgpu/*.cpp)): CPPFLAGS += -I.
