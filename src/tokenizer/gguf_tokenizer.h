// Tokenizers and chat templates from a GGUF file's `tokenizer.ggml.*` and
// `tokenizer.chat_template` metadata.
//
// The metadata is rewritten as the Hugging Face tokenizer.json /
// tokenizer_config.json / generation_config.json the converter read, and
// loaded by the same pipeline as those files (so every encode / decode rule
// is the tested one):
//   - `gpt2` (byte-level BPE): tokens + merges; NORMAL (1), UNUSED (5) and
//     BYTE (6) tokens form the BPE vocabulary, CONTROL (3) tokens become
//     special added tokens and USER_DEFINED (4) ones non-special added
//     tokens (as the converter classified them); `tokenizer.ggml.pre` picks
//     the pre-tokenizer regex of the original tokenizer.json (qwen2, qwen35,
//     llama-bpe / llama3, gpt-2, default: the names llama.cpp knows for the
//     supported model families; others are refused, naming the value);
//   - `llama` (SentencePiece-style BPE with byte fallback): tokens + scores
//     + types; merges are derived from the scores as transformers'
//     SentencePieceExtractor does (each piece split in two known pieces,
//     ranked by the piece's score), with the "▁" normalizer / decoder of
//     LlamaTokenizerFast; `add_space_prefix` (default true) adds the
//     leading "▁";
//   - special ids: bos / eos / unk / pad from tokenizer.ggml.*_token_id;
//     stop ids eos, eot, eom; add_bos_token / add_eos_token (defaults as
//     llama.cpp: BOS for `llama` and the llama-bpe pre-tokenizer).
// Errors: invalid_argument for metadata of the wrong type or out of range
// (naming the key), unsupported for a tokenizer model or pre-tokenizer that
// Ferrite does not implement.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "formats/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ferrite {

struct GgufTokenizerFiles {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
  std::string generation_config_json;
};

// The Hugging Face files equivalent to the metadata of `file`.
Result<GgufTokenizerFiles> gguf_tokenizer_files(const GgufFile& file);

// Tokenizer::load and ChatTemplate::load for a .gguf path (the first shard
// of a split set holds the metadata; any shard's name is accepted).
Result<std::unique_ptr<Tokenizer>> load_gguf_tokenizer(const std::string& path);
Result<ChatTemplate> load_gguf_chat_template(const std::string& path);

// True for a path that names a .gguf file (not a folder).
bool is_gguf_file(const std::string& path);

}  // namespace ferrite
