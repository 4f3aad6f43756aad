// Internal helpers for the JSON adapters of this folder (not part of the API).
#pragma once

#include <cstddef>
#include <string_view>

namespace ferrite::formats_internal {

// True when `text` nests arrays/objects deeper than `max_depth`. A linear scan
// (string contents skipped) run before parsing untrusted JSON, so no later
// recursive walk (parse, dump, destruction) can exhaust the stack.
inline bool json_depth_exceeds(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return true;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace ferrite::formats_internal
