// Internal: the parts of a loaded Tokenizer. Shared by tokenizer.cc (encode,
// decode) and tokenizer_load.cc (tokenizer.json parsing). Not a public API.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/bpe.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer.h"

namespace ferrite {

struct AddedToken {
  std::string content;
  uint32_t id = 0;
  bool special = false;
  bool lstrip = false, rstrip = false, single_word = false, normalized = false;
};

// Whether a match of `token` at [begin, end) of the searched string may be
// used (the match itself, before lstrip/rstrip extension).
using AddedTokenFilter = std::function<bool(const AddedToken& token, size_t begin, size_t end)>;

// Leftmost-longest matcher over a set of added tokens.
class AddedTokenMatcher {
 public:
  void add(const AddedToken* token);
  void finalize();
  bool empty() const { return all_.empty(); }
  // Finds the leftmost-longest match at or after `from`; returns the token
  // or nullptr, and sets [begin, end) of the (strip-extended) match. A match
  // that `filter` rejects is passed over whole (the search resumes at its
  // end), as Hugging Face's non-overlapping scan does when
  // encode_special_tokens skips a special token: text inside a skipped
  // special token is never matched as another added token.
  const AddedToken* find(std::string_view s, size_t from, size_t& begin, size_t& end,
                         const AddedTokenFilter* filter = nullptr) const;

 private:
  std::vector<const AddedToken*> all_;
  std::array<std::vector<const AddedToken*>, 256> by_first_byte_;  // longest first
};

struct Tokenizer::Impl {
  std::vector<tokenizer::NormalizerStep> normalizers;
  std::vector<tokenizer::PreTokenizerStep> pre_tokenizers;
  bool byte_level = false;  // the pre-tokenizer chain ends in ByteLevel
  std::optional<tokenizer::Bpe> model;
  std::vector<tokenizer::DecoderStep> decoders;
  bool has_decoder = false;
  std::vector<uint32_t> prefix_ids, suffix_ids;  // post-processor, single sequence

  std::vector<AddedToken> added;  // stable storage; matchers point into it
  std::unordered_map<uint32_t, size_t> added_by_id;
  std::unordered_map<std::string, size_t> added_by_content;
  AddedTokenMatcher raw_matcher;         // normalized == false
  AddedTokenMatcher normalized_matcher;  // normalized == true

  std::string bos_token, eos_token;
  std::optional<uint32_t> bos_id, eos_id;
  std::vector<uint32_t> stop_ids;
  size_t vocab_size = 0;
};

}  // namespace ferrite
