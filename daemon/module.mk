# colocd: the node daemon (daemon/). (Being built up; see the full version as it lands.)
DAEMON_CPPFLAGS := -Idaemon $(SPDLOG_CPPFLAGS)
DAEMON_CORE_SRCS := \
  daemon/util/log.cpp \
  daemon/broker/broker.cpp \
  daemon/broker/priority_fifo_policy.cpp \
  daemon/report/timeline.cpp \
  daemon/report/job_recorder.cpp \
  daemon/report/report_store.cpp \
  daemon/config/config.cpp
DAEMON_CORE_OBJS := $(patsubst %.cpp,$(OBJ)/%.o,$(DAEMON_CORE_SRCS))
$(DAEMON_CORE_OBJS): CPPFLAGS += $(DAEMON_CPPFLAGS)
# toml++ header-only in the one file that parses TOML: the test binaries link it without extra libraries.
$(OBJ)/daemon/config/config.o: CPPFLAGS += -DTOML_HEADER_ONLY=1
TEST_EXTRA_OBJS += $(DAEMON_CORE_OBJS)
$(OBJ)/tests/unit/daemon/%.o $(OBJ)/tests/integration/daemon/%.o: CPPFLAGS += -Idaemon
