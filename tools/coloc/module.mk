# coloc, the command line (tools/coloc/). Needs daemon/util/log (one named logger, as the daemon).
COLOC_CLI_CORE_SRCS := tools/coloc/daemon_client.cpp tools/coloc/run_plan.cpp tools/coloc/format.cpp tools/coloc/svg_plot.cpp \
                       tools/coloc/estimate_cmd.cpp tools/coloc/doctor_cmd.cpp tools/coloc/top_cmd.cpp \
                       tools/coloc/anchor_cmd.cpp
COLOC_CLI_CORE_OBJS := $(patsubst %.cpp,$(OBJ)/%.o,$(COLOC_CLI_CORE_SRCS))
$(COLOC_CLI_CORE_OBJS) $(OBJ)/tools/coloc/main.o: CPPFLAGS += -Itools/coloc -Idaemon $(SPDLOG_CPPFLAGS)
# A sanitizer build of coloc preloads the sanitizer runtime in front of libcoloc.so.
COLOC_CLI_DEFS := -DCOLOC_SAN_RUNTIME='"$(SAN_RUNTIME)"'
$(OBJ)/tools/coloc/run_plan.o $(OBJ)/tools/coloc/doctor_cmd.o: CPPFLAGS += $(COLOC_CLI_DEFS)

# The binary itself is self-contained: spdlog and fmt header-only, and (release build) libstdc++
# and libgcc linked in, so it needs nothing but glibc. `coloc run` starts before every job of a
# mass start: binding three shared C++ libraries cost it 1.2 ms per start, as much as the rest of
# its work (docs/performance.md). Its objects are compiled apart (obj/coloc-bin/) from the ones
# the tests link with the daemon's compiled spdlog.
# A sanitizer build links the sanitizer runtime dynamically anyway: there the binary is linked
# from the objects the tests use (compiled spdlog and fmt, shared), which saves compiling the CLI
# twice in each sanitizer build.
COLOC_BIN_SRCS := $(COLOC_CLI_CORE_SRCS) tools/coloc/main.cpp daemon/util/log.cpp
COLOC_BIN_OBJS := $(if $(SAN),$(COLOC_CLI_CORE_OBJS) $(OBJ)/tools/coloc/main.o $(OBJ)/daemon/util/log.o,\
                    $(patsubst %.cpp,$(OBJ)/coloc-bin/%.o,$(COLOC_BIN_SRCS)))
COLOC_BIN_LDFLAGS := $(if $(SAN),,-static-libstdc++ -static-libgcc)
COLOC_BIN_LIBS := $(if $(SAN),$(SPDLOG_LIBS))
$(OBJ)/coloc-bin/%.o: %.cpp tools/coloc/module.mk | $(DEPS_STAMP)
	$(call say,CXX,$< (coloc))
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(CPPFLAGS) -Itools/coloc -Idaemon -DSPDLOG_HEADER_ONLY -DFMT_HEADER_ONLY $(COLOC_CLI_DEFS) $(CXXFLAGS) -c $< -o $@

COLOC_CLI := $(BUILD)/bin/coloc
# `coloc estimate` is the estimator's (libcolocest, estimator/module.mk).
COLOC_CLI_LIBS := $(BUILD)/lib/libcolocest.a
$(COLOC_CLI): $(COLOC_BIN_OBJS) $(COLOC_CLI_LIBS) tools/coloc/module.mk
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) $(COLOC_BIN_LDFLAGS) -o $@ $(COLOC_BIN_OBJS) $(COLOC_CLI_LIBS) $(COLOC_BIN_LIBS) -lpthread

PRODUCTS += $(COLOC_CLI)
TEST_EXTRA_OBJS += $(COLOC_CLI_CORE_OBJS)
# The CLI tests include its headers (and the daemon fixture the daemon tests share).
$(TEST_OBJ)/tests/unit/cli/%.o $(TEST_OBJ)/tests/integration/cli/%.o: CPPFLAGS += -Idaemon -Itools/coloc
