# estimator/ — peak-memory prediction. online.h (the period detector and peak predictor) is
# header-only: libcoloc.so and the tests include it, so there is nothing to link. Its tests are the
# "estimator" area (tests/unit/estimator: make test-estimator, build/tests/estimator-tests).
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
