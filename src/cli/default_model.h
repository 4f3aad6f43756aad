// The default model of `ferrite serve`, `ferrite run` and `ferrite
// perplexity` without --model: "ferrite-tiny", a 12M-parameter Qwen3 with
// the project's own tokenizer, trained by scripts/train_default_model.py on
// permissively licensed English documentation (docs/default_model.md) and
// committed in models/ferrite-tiny/. No download: the binary looks for it
// beside itself (<exe dir>/../models/ferrite-tiny, so build/ferrite finds the
// checkout's copy; <exe dir>/../share/ferrite/models/ferrite-tiny when
// installed) and in the source tree it was built from (a path fixed at build
// time). Where neither holds it, a small random-weight model is written
// deterministically on first use to $FERRITE_HOME/default-model-v1 (or
// ~/.cache/ferrite/default-model-v1), named "ferrite-tiny-random", so that
// every path still works (its text is noise).
#pragma once

#include <string>

#include "base/status.h"

namespace ferrite::cli {

struct DefaultModel {
  std::string dir;   // the model folder
  std::string name;  // the served name: kDefaultModelName or kRandomModelName
};

// The trained default model if it is found, else the random one (created
// when missing, with a note on stderr).
Result<DefaultModel> default_model();
// default_model().dir.
Result<std::string> ensure_default_model();
// The folder of the trained default model, "" when it is not found.
std::string find_trained_default_model();

inline constexpr const char* kDefaultModelName = "ferrite-tiny";
inline constexpr const char* kRandomModelName = "ferrite-tiny-random";

}  // namespace ferrite::cli
