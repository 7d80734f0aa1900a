// estimator/input_error.h — bad input to the estimator: an unknown model, a malformed spec or
// Hugging Face config, a shape the model cannot take.
#pragma once

#include <stdexcept>

namespace coloc::est {

/// Bad input from the user. what() is one line that says what is wrong and where
/// ("spec.json: layers[2].params: must be a non-negative integer"). Callers print it and exit 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace coloc::est
