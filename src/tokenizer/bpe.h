// Byte-pair-encoding model of tokenizer.json ("type": "BPE"): merges applied
// by rank (lowest first, leftmost on ties), optional byte-level symbols,
// byte fallback, unknown token. Immutable after construction; thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace ferrite::tokenizer {

struct BpeOptions {
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;  // a word found whole in the vocab is one token
  std::optional<uint32_t> unk_id;
};

class Bpe {
 public:
  // `vocab`: token -> id. `merges`: pairs in rank order. Merges whose parts or
  // result are not in the vocab are an error (as in Hugging Face).
  static Result<Bpe> create(std::unordered_map<std::string, uint32_t> vocab,
                            const std::vector<std::pair<std::string, std::string>>& merges,
                            BpeOptions options);

  // Appends the ids of one pre-token. With `byte_level`, `word` is raw bytes
  // mapped through the GPT-2 byte alphabet; otherwise it is UTF-8 text whose
  // characters are the initial symbols.
  Status encode_word(std::string_view word, bool byte_level, std::vector<uint32_t>& out) const;

  std::optional<uint32_t> token_to_id(std::string_view token) const;
  // nullptr when `id` is not in the model's vocab.
  const std::string* id_to_token(uint32_t id) const;
  size_t size() const { return id_to_token_.size(); }

 private:
  struct Merge {
    uint32_t rank;
    uint32_t result;
  };
  void merge_symbols(std::vector<uint32_t>& symbols) const;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<std::string> id_to_token_;  // empty string for holes
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int64_t, 256> byte_ids_{};      // byte-level symbol id per byte, -1 if absent
  std::array<int64_t, 256> fallback_ids_{};  // <0xXX> id per byte, -1 if absent
  BpeOptions options_;
};

}  // namespace ferrite::tokenizer
