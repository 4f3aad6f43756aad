// The embedded default model: a small random-weight qwen3 with a byte-level
// BPE tokenizer and a ChatML template, written deterministically on first use
// to $FERRITE_HOME/default-model (or ~/.cache/ferrite/default-model). It lets
// `ferrite serve` and `ferrite run` work on a fresh machine with no download.
#pragma once

#include <string>

#include "base/status.h"

namespace ferrite::cli {

// The folder of the default model, created when missing.
Result<std::string> ensure_default_model();
// The served name of the default model.
inline constexpr const char* kDefaultModelName = "ferrite-tiny-random";

}  // namespace ferrite::cli
