# coloc-ckpt, the checkpoint helper colocd runs (tools/ckpt/): build/bin/coloc-ckpt. It loads
# libcuda.so.1 at run time (dlopen), so it links nothing of CUDA. suspend.cpp, the roll-back
# logic, is unit-tested with a fake driver (tests/unit/ckpt/).
COLOC_CKPT := $(BUILD)/bin/coloc-ckpt
COLOC_CKPT_CORE_OBJS := $(OBJ)/tools/ckpt/suspend.o
$(COLOC_CKPT): $(OBJ)/tools/ckpt/main.o $(COLOC_CKPT_CORE_OBJS)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^ -ldl

PRODUCTS += $(COLOC_CKPT)
TEST_EXTRA_OBJS += $(COLOC_CKPT_CORE_OBJS)

# Its tests include "tools/ckpt/suspend.h" and simgpu's cuprobe helpers.
$(patsubst %.cpp,$(OBJ)/%.o,$(wildcard tests/unit/ckpt/*.cpp) tests/integration/cli/ckpt_cli_test.cpp): CPPFLAGS += -I.
