#include "server/stream_text.h"

#include <algorithm>

namespace ferrite {

using json = nlohmann::ordered_json;

std::string StopFilter::feed(const std::string& s, bool* hit) {
  held_ += s;
  size_t best = std::string::npos;
  for (const std::string& st : stops_) best = std::min(best, held_.find(st));
  if (best != std::string::npos) {
    *hit = true;
    std::string out = held_.substr(0, best);
    held_.clear();
    return out;
  }
  // Keep the longest tail that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& st : stops_) {
    for (size_t k = std::min(st.size() - 1, held_.size()); k > keep; --k) {
      if (held_.compare(held_.size() - k, k, st, 0, k) == 0) {
        keep = k;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop, bool chat,
                       int32_t logprobs)
    : tok_(tokenizer),
      decoder_(tokenizer, true),
      stop_(std::move(stop)),
      chat_(chat),
      logprobs_(logprobs) {}

std::string TextStream::consume(const RequestStream::Update& u, json* lp_entries) {
  std::string text;
  for (const TokenOutput& t : u.tokens) {
    if (stopped_) break;
    ++completion_tokens_;
    auto piece = decoder_.push(t.token);
    std::string s = piece.is_ok() ? *piece : std::string();
    bool hit = false;
    text += stop_.feed(s, &hit);
    if (logprobs_ >= 0 && lp_entries) lp_entries->push_back(logprob_entry(t));
    if (hit) stopped_ = true;
  }
  if (u.finished && !stopped_) {
    bool hit = false;
    text += stop_.feed(decoder_.finish(), &hit);
    if (hit)
      stopped_ = true;
    else
      text += stop_.flush();
  }
  return text;
}

std::string TextStream::token_text(uint32_t id) const {
  auto s = tok_.decode(std::span<const uint32_t>(&id, 1), false);
  return s.is_ok() ? *s : std::string();
}

json TextStream::bytes_of(uint32_t id) const {
  auto s = tok_.decode_bytes(std::span<const uint32_t>(&id, 1), false);
  json b = json::array();
  if (s.is_ok())
    for (unsigned char c : *s) b.push_back(static_cast<int>(c));
  return b;
}

json TextStream::logprob_entry(const TokenOutput& t) const {
  if (chat_) {
    json top = json::array();
    for (const TokenLogprob& a : t.top)
      top.push_back(
          {{"token", token_text(a.token)}, {"logprob", a.logprob}, {"bytes", bytes_of(a.token)}});
    return {{"token", token_text(t.token)},
            {"logprob", t.logprob},
            {"bytes", bytes_of(t.token)},
            {"top_logprobs", top}};
  }
  json top = json::object();
  for (const TokenLogprob& a : t.top) top[token_text(a.token)] = a.logprob;
  return {{"token", token_text(t.token)}, {"logprob", t.logprob}, {"top", top}};
}

json completion_logprobs(const json& entries, size_t text_offset_base) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
  size_t off = text_offset_base;
  for (const json& e : entries) {
    tokens.push_back(e["token"]);
    lps.push_back(e["logprob"]);
    tops.push_back(e["top"]);
    offs.push_back(off);
    off += e["token"].get<std::string>().size();
  }
  return {
      {"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
}

std::string sse_event(const json& chunk) {
  return "data: " + chunk.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace ferrite
