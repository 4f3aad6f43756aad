// Text <-> token ids, exactly as Hugging Face `tokenizers` does it for the
// tokenizer.json files of Qwen3 / Qwen3-Next, Llama-3 (byte-level BPE) and
// Llama-2 / TinyLlama (SentencePiece-style BPE with byte fallback).
//
// Pipeline of encode(): added/special tokens are split out first (leftmost
// longest match), the rest is normalized, pre-tokenized and run through the
// BPE model; with add_special_tokens the post-processor template adds BOS/EOS
// exactly as tokenizer.json declares. decode() maps ids back through the
// decoder chain. A Tokenizer is immutable after load() and safe to use from
// many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace ferrite {

class ChatTemplate;

// What encode() does with text that spells an added token marked
// "special": true in tokenizer.json (e.g. "<|im_start|>").
enum class SpecialText {
  // Becomes the special token's id (Hugging Face's default). Right for text
  // the server itself assembled, e.g. a rendered chat template.
  kParse,
  // Is encoded as ordinary text through normalizer, pre-tokenizer and BPE,
  // exactly as Hugging Face tokenizers' encode_special_tokens=True (transformers'
  // split_special_tokens=True). Added tokens that are not special are still
  // matched, as there. Right for untrusted text (a completions prompt): a
  // client cannot forge control tokens by typing their text.
  kPlain,
};

class Tokenizer {
 public:
  // `path_or_model_dir`: a tokenizer.json file, or a directory holding
  // tokenizer.json and optionally tokenizer_config.json (BOS/EOS names) and
  // generation_config.json (extra stop ids). A tokenizer_config.json beside a
  // given tokenizer.json file is read too.
  static Result<std::unique_ptr<Tokenizer>> load(const std::string& path_or_model_dir);
  // From file contents; the configs may be empty.
  static Result<std::unique_ptr<Tokenizer>> from_json(std::string_view tokenizer_json,
                                                      std::string_view tokenizer_config_json = {},
                                                      std::string_view generation_config_json = {});
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // `text` must be valid UTF-8 (else InvalidArgument naming the bad byte).
  // `special` says whether special-token text such as "<|im_start|>" becomes
  // its id (kParse) or is plain text (kPlain); see SpecialText.
  // add_special_tokens applies the post-processor template (e.g. BOS).
  Result<std::vector<uint32_t>> encode(std::string_view text, bool add_special_tokens,
                                       SpecialText special = SpecialText::kParse) const;

  // Ids to text; invalid UTF-8 produced by partial byte tokens becomes U+FFFD.
  // An id outside the vocabulary is InvalidArgument.
  Result<std::string> decode(std::span<const uint32_t> ids, bool skip_special_tokens) const;
  // As decode(), but the bytes as produced, possibly ending in (or containing)
  // an incomplete UTF-8 sequence. Used by StreamDecoder.
  Result<std::string> decode_bytes(std::span<const uint32_t> ids, bool skip_special_tokens) const;

  std::optional<uint32_t> bos_id() const;
  std::optional<uint32_t> eos_id() const;
  // BOS/EOS token text from tokenizer_config.json ("" when absent); chat
  // templates receive them as bos_token / eos_token.
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  // Ids that end generation: eos_id plus generation_config.json's
  // eos_token_id (int or list), deduplicated, in that order.
  const std::vector<uint32_t>& stop_ids() const;
  // One past the largest id of the model vocab and the added tokens.
  size_t vocab_size() const;

  std::optional<uint32_t> token_to_id(std::string_view token) const;
  // The token string of `id` (byte-level tokens in their mapped form).
  std::optional<std::string> id_to_token(uint32_t id) const;
  // True for added tokens marked "special" (skipped by skip_special_tokens).
  bool is_special(uint32_t id) const;

  struct Impl;

 private:
  // ChatTemplate::render_tokens encodes a rendered template whose byte ranges
  // `plain` (sorted, disjoint [begin, end)) came from request data: a special
  // token whose text overlaps one of them is plain text, every other one is
  // parsed. With `plain` empty this is encode(text, add_special_tokens).
  friend class ChatTemplate;
  Result<std::vector<uint32_t>> encode_marked(
      std::string_view text, bool add_special_tokens, SpecialText special,
      std::span<const std::pair<size_t, size_t>> plain) const;

  Result<std::string> decode_impl(std::span<const uint32_t> ids, bool skip_special_tokens,
                                  bool raw) const;
  Result<std::string> decode_ids(std::span<const uint32_t> ids, bool skip_special_tokens,
                                 bool raw) const;
  Result<std::vector<uint32_t>> encode_impl(std::string_view text, bool add_special_tokens,
                                            SpecialText special,
                                            std::span<const std::pair<size_t, size_t>> plain) const;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenizer for streaming: push() one id at a time and get the
// text that became complete. Never emits a partial UTF-8 character and, over
// a whole stream, concatenated outputs + finish() equal
// tokenizer.decode(all ids) whenever that decode is valid UTF-8. Context-
// dependent decoders (e.g. SentencePiece's leading-space strip) are handled
// by decoding a sliding window of ids and emitting only the difference.
// Not thread-safe; one per sequence. The tokenizer must outlive it.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = true);
  // The newly complete text ("" while a character is still partial).
  Result<std::string> push(uint32_t id);
  // Whatever is held back at the end of the stream, as U+FFFD replacements.
  std::string finish();

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::vector<uint32_t> ids_;  // the window: ids_[0] is the first id decoded
  size_t emitted_ = 0;         // bytes of decode_bytes(ids_) already emitted
  std::string pending_;        // decoded bytes not yet emitted
};

}  // namespace ferrite
