#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <new>
#include <stdexcept>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"

namespace ferrite {
namespace {

bool is_ascii_word_char(char c) {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// Unicode White_Space for the lstrip/rstrip options of added tokens.
bool is_whitespace_at(std::string_view s, size_t pos, size_t& len) {
  size_t p = pos;
  char32_t cp = tokenizer::next_code_point(s, p);
  len = p - pos;
  return (cp >= 0x9 && cp <= 0xD) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Length of the UTF-8 character ending at s[end-1].
size_t prev_char_len(std::string_view s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return end - b;
}

}  // namespace

void AddedTokenMatcher::add(const AddedToken* token) {
  if (token->content.empty()) return;
  all_.push_back(token);
  by_first_byte_[static_cast<unsigned char>(token->content[0])].push_back(token);
}

void AddedTokenMatcher::finalize() {
  for (auto& bucket : by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [](const AddedToken* a, const AddedToken* b) {
      return a->content.size() > b->content.size();
    });
  }
}

const AddedToken* AddedTokenMatcher::find(std::string_view s, size_t from, size_t& begin,
                                          size_t& end, const AddedTokenFilter* filter) const {
  if (all_.empty()) return nullptr;
  for (size_t i = from; i < s.size(); ++i) {
    const auto& bucket = by_first_byte_[static_cast<unsigned char>(s[i])];
    for (const AddedToken* t : bucket) {
      if (s.compare(i, t->content.size(), t->content) != 0) continue;
      size_t b = i, e = i + t->content.size();
      if (t->single_word &&
          ((b > 0 && is_ascii_word_char(s[b - 1])) || (e < s.size() && is_ascii_word_char(s[e])))) {
        continue;
      }
      if (filter != nullptr && !(*filter)(*t, b, e)) {
        i = e - 1;  // skip the whole rejected match (the loop's ++i lands on e)
        break;
      }
      size_t len;
      if (t->lstrip) {
        while (b > from) {
          size_t pl = prev_char_len(s, b);
          if (!is_whitespace_at(s, b - pl, len)) break;
          b -= pl;
        }
      }
      if (t->rstrip) {
        while (e < s.size() && is_whitespace_at(s, e, len)) e += len;
      }
      begin = b;
      end = e;
      return t;
    }
  }
  return nullptr;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

Result<std::vector<uint32_t>> Tokenizer::encode(std::string_view text, bool add_special_tokens,
                                                SpecialText special) const {
  return encode_marked(text, add_special_tokens, special, {});
}

Result<std::vector<uint32_t>> Tokenizer::encode_marked(
    std::string_view text, bool add_special_tokens, SpecialText special,
    std::span<const std::pair<size_t, size_t>> plain) const {
  // Nothing below throws on any input; the catch keeps the API promise
  // (Status, never an exception) should an allocation fail on a huge text.
  try {
    return encode_impl(text, add_special_tokens, special, plain);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("encode: out of memory for a text of " +
                              std::to_string(text.size()) + " bytes");
  } catch (const std::exception& e) {
    return internal_error(std::string("encode: unexpected error: ") + e.what());
  }
}

Result<std::vector<uint32_t>> Tokenizer::encode_impl(
    std::string_view text, bool add_special_tokens, SpecialText special,
    std::span<const std::pair<size_t, size_t>> plain) const {
  FERRITE_RETURN_IF_ERROR(tokenizer::validate_utf8(text));
  const Impl& im = *impl_;
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids.insert(ids.end(), im.prefix_ids.begin(), im.prefix_ids.end());

  // Whether [b, e) of `text` overlaps a plain (data) range.
  auto overlaps_plain = [&](size_t b, size_t e) {
    auto it = std::upper_bound(plain.begin(), plain.end(), b,
                               [](size_t x, const std::pair<size_t, size_t>& r) {
                                 return x < r.second;
                               });
    return it != plain.end() && it->first < e;
  };
  // Raw matches are in `text` coordinates: a special token is parsed unless
  // it is plain text altogether or any byte of it came from data.
  const AddedTokenFilter raw_filter = [&](const AddedToken& t, size_t b, size_t e) {
    if (!t.special) return true;
    if (special == SpecialText::kPlain) return false;
    return !overlaps_plain(b, e);
  };
  const bool filtering = special == SpecialText::kPlain || !plain.empty();

  auto encode_normalized = [&](std::string_view piece_text, bool at_start) -> Status {
    std::vector<tokenizer::Piece> pieces;
    pieces.push_back({std::string(piece_text), at_start});
    tokenizer::pre_tokenize(im.pre_tokenizers, pieces);
    for (const auto& p : pieces) {
      FERRITE_RETURN_IF_ERROR(im.model->encode_word(p.text, im.byte_level, ids));
    }
    return Status::ok();
  };
  // `segment` starts at byte `offset` of `text`.
  auto encode_text = [&](std::string_view segment, size_t offset, bool at_start) -> Status {
    if (segment.empty()) return Status::ok();
    std::string normalized = tokenizer::normalize(im.normalizers, segment);
    // Normalized matches are in normalized coordinates, which do not map back
    // to `text` bytes; a special token matched there is rejected when its
    // text occurs inside a data range of this segment (raw or normalized),
    // i.e. when the data could have supplied it. Only tokenizers with
    // "normalized": true special tokens reach this.
    std::vector<std::string> data_pieces;
    bool data_pieces_ready = false;
    const AddedTokenFilter normalized_filter = [&](const AddedToken& t, size_t, size_t) {
      if (!t.special) return true;
      if (special == SpecialText::kPlain) return false;
      if (!data_pieces_ready) {
        data_pieces_ready = true;
        for (const auto& [rb, re] : plain) {
          size_t b = std::max(rb, offset), e = std::min(re, offset + segment.size());
          if (b >= e) continue;
          std::string_view piece = text.substr(b, e - b);
          data_pieces.emplace_back(piece);
          data_pieces.push_back(tokenizer::normalize(im.normalizers, piece));
        }
      }
      for (const auto& piece : data_pieces) {
        if (piece.find(t.content) != std::string::npos) return false;
      }
      return true;
    };
    size_t pos = 0, b, e;
    while (pos < normalized.size()) {
      const AddedToken* t =
          im.normalized_matcher.find(normalized, pos, b, e, filtering ? &normalized_filter : nullptr);
      if (t == nullptr) break;
      if (b > pos) {
        FERRITE_RETURN_IF_ERROR(encode_normalized(std::string_view(normalized).substr(pos, b - pos),
                                                  at_start && pos == 0));
      }
      ids.push_back(t->id);
      pos = e;
    }
    if (pos < normalized.size()) {
      FERRITE_RETURN_IF_ERROR(
          encode_normalized(std::string_view(normalized).substr(pos), at_start && pos == 0));
    }
    return Status::ok();
  };

  size_t pos = 0, b, e;
  while (pos < text.size()) {
    const AddedToken* t = im.raw_matcher.find(text, pos, b, e, filtering ? &raw_filter : nullptr);
    if (t == nullptr) break;
    FERRITE_RETURN_IF_ERROR(encode_text(text.substr(pos, b - pos), pos, pos == 0));
    ids.push_back(t->id);
    pos = e;
  }
  FERRITE_RETURN_IF_ERROR(encode_text(text.substr(pos), pos, pos == 0));
  if (add_special_tokens) ids.insert(ids.end(), im.suffix_ids.begin(), im.suffix_ids.end());
  return ids;
}

// decode and decode_bytes differ only in the last step: decode applies
// Hugging Face's byte-fallback replacement (invalid UTF-8 -> U+FFFD), while
// decode_bytes keeps raw bytes for the streaming decoder.
Result<std::string> Tokenizer::decode_impl(std::span<const uint32_t> ids, bool skip_special_tokens,
                                           bool raw) const {
  try {
    return decode_ids(ids, skip_special_tokens, raw);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("decode: out of memory for " + std::to_string(ids.size()) + " ids");
  } catch (const std::exception& e) {
    return internal_error(std::string("decode: unexpected error: ") + e.what());
  }
}

Result<std::string> Tokenizer::decode_ids(std::span<const uint32_t> ids, bool skip_special_tokens,
                                          bool raw) const {
  const Impl& im = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (uint32_t id : ids) {
    if (auto it = im.added_by_id.find(id); it != im.added_by_id.end()) {
      const AddedToken& t = im.added[it->second];
      if (skip_special_tokens && t.special) continue;
      tokens.push_back(t.content);
      continue;
    }
    const std::string* token = im.model->id_to_token(id);
    if (token == nullptr) {
      return invalid_argument("token id " + std::to_string(id) +
                              " is not in the vocabulary (size " + std::to_string(im.vocab_size) +
                              ")");
    }
    tokens.push_back(*token);
  }
  if (!im.has_decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  std::string out = tokenizer::run_decoders(im.decoders, std::move(tokens), raw);
  return raw ? out : tokenizer::utf8_lossy(out);
}

Result<std::string> Tokenizer::decode_bytes(std::span<const uint32_t> ids,
                                            bool skip_special_tokens) const {
  return decode_impl(ids, skip_special_tokens, /*raw=*/true);
}

Result<std::string> Tokenizer::decode(std::span<const uint32_t> ids,
                                      bool skip_special_tokens) const {
  return decode_impl(ids, skip_special_tokens, /*raw=*/false);
}

std::optional<uint32_t> Tokenizer::bos_id() const { return impl_->bos_id; }
std::optional<uint32_t> Tokenizer::eos_id() const { return impl_->eos_id; }
const std::string& Tokenizer::bos_token() const { return impl_->bos_token; }
const std::string& Tokenizer::eos_token() const { return impl_->eos_token; }
const std::vector<uint32_t>& Tokenizer::stop_ids() const { return impl_->stop_ids; }
size_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<uint32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = impl_->added_by_content.find(std::string(token));
      it != impl_->added_by_content.end()) {
    return impl_->added[it->second].id;
  }
  return impl_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(uint32_t id) const {
  if (auto it = impl_->added_by_id.find(id); it != impl_->added_by_id.end()) {
    return impl_->added[it->second].content;
  }
  if (const std::string* t = impl_->model->id_to_token(id)) return *t;
  return std::nullopt;
}

bool Tokenizer::is_special(uint32_t id) const {
  auto it = impl_->added_by_id.find(id);
  return it != impl_->added_by_id.end() && impl_->added[it->second].special;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_(skip_special_tokens) {}

Result<std::string> StreamDecoder::push(uint32_t id) {
  // Keep this many ids of context when the window slides, so decoders that
  // look at neighbouring tokens see the same context as a full decode.
  constexpr size_t kContext = 4, kMaxWindow = 16;
  ids_.push_back(id);
  FERRITE_ASSIGN_OR_RETURN(std::string full, tokenizer_.decode_bytes(ids_, skip_special_));
  if (full.size() < emitted_) {
    // A decoder rewrote earlier output; nothing safe to emit for it.
    emitted_ = full.size();
  }
  std::string_view fresh = std::string_view(full).substr(emitted_);
  size_t n = tokenizer::utf8_emittable_prefix(fresh);
  std::string out = tokenizer::utf8_lossy(fresh.substr(0, n));
  emitted_ += n;
  pending_ = std::string(fresh.substr(n));
  if (pending_.empty() && ids_.size() >= kMaxWindow) {
    ids_.erase(ids_.begin(), ids_.end() - kContext);
    FERRITE_ASSIGN_OR_RETURN(std::string ctx, tokenizer_.decode_bytes(ids_, skip_special_));
    emitted_ = ctx.size();
  }
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = tokenizer::utf8_lossy(pending_);
  pending_.clear();
  ids_.clear();
  emitted_ = 0;
  return out;
}

}  // namespace ferrite
