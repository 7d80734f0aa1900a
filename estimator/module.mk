# estimator/ — peak-memory prediction, pure code with no dependency on the daemon or the interposer.
#   build/lib/libcolocest.a   the compiled part: history.cpp (the rule that turns past runs into
#                             an admission estimate), model.cpp and model_spec.cpp (the model
#                             description coloc-train and `coloc estimate` share); linked into
#                             colocd, coloc, coloc-train and the tests
#   online.h                  the period detector and peak predictor, header-only: libcoloc.so
#                             compiles it with its own flags (no exceptions, hidden, static TLS),
#                             and so do the tests
# Its tests are the "estimator" area (tests/unit/estimator: make test-estimator,
# build/tests/estimator-tests).
#
# The header must stand alone and compile without a warning: `make` checks it on its own
# (a translation unit that includes only it), with the flags libcoloc.so is built with.
ESTIMATOR_HEADERS := estimator/online.h
ESTIMATOR_CHECK := $(BUILD)/gen/estimator/headers.ok

$(ESTIMATOR_CHECK): $(ESTIMATOR_HEADERS) estimator/module.mk | $(DEPS_STAMP)
	$(call say,CHECK,$(ESTIMATOR_HEADERS))
	$(Q)mkdir -p $(@D)
	$(Q)for h in $(ESTIMATOR_HEADERS); do \
	  echo "#include \"$$h\"" | $(CXX) $(CPPFLAGS) -I. $(CXXFLAGS) -Werror -fsyntax-only -x c++ - || exit 1; \
	done
	$(Q)touch $@

PRODUCTS += $(ESTIMATOR_CHECK)

ESTIMATOR_SRCS := $(wildcard estimator/*.cpp)
ESTIMATOR_OBJS := $(patsubst %.cpp,$(OBJ)/%.o,$(ESTIMATOR_SRCS))
ESTIMATOR_LIB := $(BUILD)/lib/libcolocest.a
$(ESTIMATOR_OBJS): CPPFLAGS += -I.

$(ESTIMATOR_LIB): $(ESTIMATOR_OBJS)
	$(call say,AR,$@)
	$(Q)mkdir -p $(@D)
	$(Q)rm -f $@ && ar rcs $@ $^

PRODUCTS += $(ESTIMATOR_LIB)
# colocd's history uses it (its rule is linked after the daemon's objects: $^ lists it last).
$(COLOCD): $(ESTIMATOR_LIB)
# coloc-train's models are the estimator's (model.h, model_spec.h).
$(COLOC_TRAIN): $(ESTIMATOR_LIB)
TEST_EXTRA_OBJS += $(ESTIMATOR_LIB)
