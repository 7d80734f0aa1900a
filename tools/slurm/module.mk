# coloc's SPANK plugin for Slurm (tools/slurm/; docs/slurm.md). Built only where Slurm's
# <slurm/spank.h> is installed (Debian: libslurm-dev); make install puts it next to libcoloc.so.
#
# It runs inside Slurm's own processes (srun, sbatch, salloc, slurmstepd), none of them sanitized:
# every build variant compiles it without sanitizers, and links the C++ runtime statically so that
# it needs nothing but glibc. Slurm's spank_* and slurm_* functions come from the process that
# loads it, so they stay undefined at link time (no -z defs).

# Decided when make reads this file, before mk/deps.sh runs: where deps.sh is to install Slurm
# (CI=true, COLOC_WITH_SLURM=1) the plugin is built too, its headers there by the time it compiles.
SLURM_SPANK_H ?= /usr/include/slurm/spank.h
ifneq ($(wildcard $(SLURM_SPANK_H))$(filter true,$(CI))$(filter 1,$(COLOC_WITH_SLURM)),)
SPANK_PLUGIN := $(BUILD)/lib/spank_coloc.so
SPANK_OBJ    := $(OBJ)/tools/slurm/spank_coloc.pic.o

$(SPANK_OBJ): tools/slurm/spank_coloc.cpp tools/slurm/module.mk | $(DEPS_STAMP)
	$(call say,CXX,$< (spank))
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) -Iinclude -MMD -MP -std=c++20 -O2 -g -fPIC -Wall -Wextra -Wno-missing-field-initializers \
	  -fvisibility=hidden -fno-exceptions -c $< -o $@

$(SPANK_PLUGIN): $(SPANK_OBJ)
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) -shared -Wl,-soname,spank_coloc.so -static-libstdc++ -static-libgcc -o $@ $^

PRODUCTS += $(SPANK_PLUGIN)

# What the plugin costs a step, and scancel to report, on a live single-node Slurm (skips without
# Slurm or root).
.PHONY: bench-slurm
bench-slurm: $(PRODUCTS) $(BUILD)/bin/coloc-train $(BUILD)/sim/libcuda.so.1
	$(call say,BENCH,slurm)
	$(Q)tests/bench/slurm_bench.sh $(BUILD) $(BUILD)/bench/slurm.json
BENCHES += bench-slurm
endif
