# colocd: the node daemon (daemon/). (Being built up; see the full version as it lands.)
DAEMON_CPPFLAGS := -Idaemon $(SPDLOG_CPPFLAGS)
DAEMON_CORE_SRCS := \
  daemon/util/log.cpp \
  daemon/broker/broker.cpp \
  daemon/broker/priority_fifo_policy.cpp
DAEMON_CORE_OBJS := $(patsubst %.cpp,$(OBJ)/%.o,$(DAEMON_CORE_SRCS))
$(DAEMON_CORE_OBJS): CPPFLAGS += $(DAEMON_CPPFLAGS)
TEST_EXTRA_OBJS += $(DAEMON_CORE_OBJS)
$(OBJ)/tests/unit/daemon/%.o $(OBJ)/tests/integration/daemon/%.o: CPPFLAGS += -Idaemon
