# coloc, the command line (tools/coloc/). Needs daemon/util/log (one named logger, as the daemon).
COLOC_CLI_CORE_SRCS := tools/coloc/daemon_client.cpp tools/coloc/run_plan.cpp tools/coloc/format.cpp tools/coloc/svg_plot.cpp
COLOC_CLI_CORE_OBJS := $(patsubst %.cpp,$(OBJ)/%.o,$(COLOC_CLI_CORE_SRCS))
COLOC_CLI_OBJS := $(COLOC_CLI_CORE_OBJS) $(OBJ)/tools/coloc/main.o
$(COLOC_CLI_OBJS): CPPFLAGS += -Itools/coloc -Idaemon $(SPDLOG_CPPFLAGS)
# A sanitizer build of coloc preloads the sanitizer runtime in front of libcoloc.so.
$(OBJ)/tools/coloc/run_plan.o: CPPFLAGS += -DCOLOC_SAN_RUNTIME='"$(SAN_RUNTIME)"'

COLOC_CLI := $(BUILD)/bin/coloc
$(COLOC_CLI): $(COLOC_CLI_OBJS) $(OBJ)/daemon/util/log.o
	$(call say,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CXX) $(LDFLAGS) -o $@ $^ $(SPDLOG_LIBS)

PRODUCTS += $(COLOC_CLI)
TEST_EXTRA_OBJS += $(COLOC_CLI_CORE_OBJS)
# The CLI tests include its headers (and the daemon fixture the daemon tests share).
$(OBJ)/tests/unit/cli/%.o $(OBJ)/tests/integration/cli/%.o: CPPFLAGS += -Idaemon -Itools/coloc
