# coloc-train, the training-job emulator, and its device code.

# ---- device code: kernels.cu -> fatbin (sm_80, sm_90, compute_90 PTX) -> linkable object -------
KERNELS_FATBIN := $(BUILD)/gen/kernels.fatbin
KERNELS_OBJ    := $(OBJ)/tools/workload/kernels_fatbin.o
NVCC_ARCH := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90

$(KERNELS_FATBIN): tools/workload/kernels.cu | $(DEPS_STAMP)
	$(call say,NVCC,$<)
	$(Q)mkdir -p $(@D)
	$(Q)$(NVCC) -fatbin --no-compress $(NVCC_ARCH) $< -o $@

# The image is embedded with .incbin; the assembler re-runs when the fatbin changes.
$(KERNELS_OBJ): $(KERNELS_FATBIN)
	$(call say,EMBED,$<)
	$(Q)mkdir -p $(@D)
	$(Q)printf '%s\n' \
	  '.section .rodata' '.balign 64' '.globl coloc_kernels_fatbin' '.type coloc_kernels_fatbin,@object' \
	  'coloc_kernels_fatbin:' '.incbin "$(abspath $<)"' 'coloc_kernels_fatbin_end:' \
	  '.size coloc_kernels_fatbin, coloc_kernels_fatbin_end - coloc_kernels_fatbin' \
	  '.balign 8' '.globl coloc_kernels_fatbin_size' '.type coloc_kernels_fatbin_size,@object' \
	  'coloc_kernels_fatbin_size:' '.quad coloc_kernels_fatbin_end - coloc_kernels_fatbin' \
	  '.size coloc_kernels_fatbin_size, 8' '.section .note.GNU-stack,"",@progbits' \
	  | $(CXX) $(SANFLAGS) -c -x assembler - -o $@

# ---- coloc-train ---------------------------------------------------------------------------------
# The pure parts (models, caching allocator, traces, specs, the training loop) have no driver calls,
# so the unit tests link them without libcuda; the driver glue and main() only go into the binary.
WORKLOAD_CORE_OBJS := $(patsubst %.cpp,$(OBJ)/%.o,$(addprefix tools/workload/, \
                        caching_allocator.cpp duty.cpp lucid.cpp pattern.cpp trace.cpp trainer.cpp))
# The model description (estimator/model.*, model_spec.*) comes from libcolocest: estimator/module.mk
# adds it to coloc-train's prerequisites, after these objects.
# --lucid reads lucid-solo.csv from the copy in the source tree unless told otherwise.
$(OBJ)/tools/workload/lucid.o: CPPFLAGS += -DCOLOC_LUCID_DEFAULT_DIR='"$(abspath tools/workload/lucid)"'
COLOC_TRAIN_OBJS := $(WORKLOAD_CORE_OBJS) $(OBJ)/tools/workload/gpu.o $(OBJ)/tools/workload/data_check.o \
                    $(OBJ)/tools/workload/main.o
COLOC_TRAIN := $(BUILD)/bin/coloc-train

# Not linked against libcuda: gpu.cpp loads libcuda.so.1 with dlopen when the first device is used,
# so --help, --list-models and argument errors need no CUDA library; a run finds the real driver,
# or simgpu through LD_LIBRARY_PATH=build/sim.
$(COLOC_TRAIN): $(COLOC_TRAIN_OBJS) $(KERNELS_OBJ)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^ -ldl

PRODUCTS += $(COLOC_TRAIN)
TEST_EXTRA_OBJS += $(WORKLOAD_CORE_OBJS)
