# Helper programs the integration tests run. cuprobe links against libcuda.so.1 by its SONAME
# (NEEDED libcuda.so.1, no RPATH): LD_LIBRARY_PATH=build/sim picks simgpu, a GPU machine's loader
# finds the real driver.

CUPROBE := $(BUILD)/tests/bin/cuprobe
TEST_PROGRAMS += $(CUPROBE)

$(OBJ)/tests/programs/cuprobe.o: CPPFLAGS += -I.

$(CUPROBE): $(OBJ)/tests/programs/cuprobe.o $(KERNELS_OBJ) $(SIMGPU_LIB)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $(OBJ)/tests/programs/cuprobe.o $(KERNELS_OBJ) $(SIMGPU_LIB) -lpthread
