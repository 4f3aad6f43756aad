#include "server/chat_output.h"

#include <fmt/format.h>

#include <mutex>
#include <random>

namespace ferrite {

namespace {

using json = nlohmann::ordered_json;

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

// Length of the longest suffix of `s` that is a proper prefix of `tag`.
size_t partial_tag(const std::string& s, std::string_view tag) {
  for (size_t k = std::min(tag.size() - 1, s.size()); k > 0; --k)
    if (s.compare(s.size() - k, k, tag.data(), k) == 0) return k;
  return 0;
}

bool all_space(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

}  // namespace

std::string random_tool_call_id() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}());
  std::lock_guard<std::mutex> lock(mu);
  return fmt::format("call_{:016x}{:08x}", rng(), static_cast<uint32_t>(rng()));
}

ChatOutput::ChatOutput(bool reasoning, bool reasoning_open, ToolCallFormat tools)
    : reasoning_enabled_(reasoning),
      format_(tools),
      mode_(reasoning && reasoning_open ? Mode::kReasoning
            : reasoning                 ? Mode::kStart
                                        : Mode::kContent) {}

void ChatOutput::emit_content(Delta* d, const std::string& s) {
  std::string t = s;
  if (after_think_) {
    size_t k = t.find_first_not_of(" \t\r\n");
    if (k == std::string::npos) return;
    t.erase(0, k);
    after_think_ = false;
  }
  if (t.empty()) return;
  if (!all_space(t)) content_started_ = true;
  d->content += t;
  content_ += t;
}

// Qwen3-Coder / Qwen3.5 XML calls: <function=NAME><parameter=K>V</parameter>...</function>
// (values that parse as JSON are taken as JSON, the rest as strings).
bool parse_xml_call(const std::string& text, ToolCall* c) {
  size_t f = text.find("<function=");
  if (f == std::string::npos || text.find_first_not_of(" \t\r\n") != f) return false;
  size_t close = text.find('>', f);
  if (close == std::string::npos) return false;
  c->name = text.substr(f + 10, close - f - 10);
  json args = json::object();
  size_t pos = close + 1;
  for (;;) {
    size_t ps = text.find("<parameter=", pos);
    if (ps == std::string::npos) break;
    size_t pe = text.find('>', ps);
    size_t end = text.find("</parameter>", pe == std::string::npos ? ps : pe);
    if (pe == std::string::npos || end == std::string::npos) return false;
    std::string key = text.substr(ps + 11, pe - ps - 11);
    std::string value = text.substr(pe + 1, end - pe - 1);
    if (!value.empty() && value.front() == '\n') value.erase(0, 1);
    if (!value.empty() && value.back() == '\n') value.pop_back();
    json v = json::parse(value, nullptr, false);
    args[key] = v.is_discarded() ? json(value) : v;
    pos = end + 12;
  }
  c->id = random_tool_call_id();
  c->arguments = args.dump(-1, ' ', false, json::error_handler_t::replace);
  return !c->name.empty();
}

bool ChatOutput::parse_call(const std::string& text, Delta* d) {
  if (ToolCall x; parse_xml_call(text, &x)) {
    d->calls.push_back(x);
    calls_.push_back(std::move(x));
    return true;
  }
  json j = json::parse(text, nullptr, false);
  std::vector<json> items;
  if (j.is_discarded()) {
    // Llama: several calls separated by ';'.
    size_t start = 0;
    while (start < text.size()) {
      size_t semi = text.find(';', start);
      std::string part = text.substr(start, semi == std::string::npos ? std::string::npos : semi - start);
      json p = json::parse(part, nullptr, false);
      if (p.is_discarded()) return false;
      items.push_back(p);
      if (semi == std::string::npos) break;
      start = semi + 1;
    }
  } else if (j.is_array()) {
    for (const json& x : j) items.push_back(x);
  } else {
    items.push_back(j);
  }
  std::vector<ToolCall> out;
  for (const json& it : items) {
    if (!it.is_object() || !it.contains("name") || !it["name"].is_string()) return false;
    const json* args = nullptr;
    if (it.contains("arguments")) args = &it["arguments"];
    else if (it.contains("parameters")) args = &it["parameters"];
    ToolCall c;
    c.id = random_tool_call_id();
    c.name = it["name"].get<std::string>();
    if (!args || args->is_null())
      c.arguments = "{}";
    else if (args->is_string())
      c.arguments = args->get<std::string>();
    else
      c.arguments = args->dump(-1, ' ', false, json::error_handler_t::replace);
    out.push_back(std::move(c));
  }
  for (ToolCall& c : out) {
    d->calls.push_back(c);
    calls_.push_back(std::move(c));
  }
  return true;
}

void ChatOutput::run(Delta* d, bool final) {
  for (;;) {
    switch (mode_) {
      case Mode::kStart: {
        size_t k = buf_.find_first_not_of(" \t\r\n");
        if (k == std::string::npos) {
          if (!final) return;
          mode_ = Mode::kContent;
          continue;
        }
        std::string_view rest(buf_.data() + k, buf_.size() - k);
        if (rest.substr(0, kThinkOpen.size()) == kThinkOpen) {
          buf_.erase(0, k + kThinkOpen.size());
          mode_ = Mode::kReasoning;
          continue;
        }
        if (!final && rest.size() < kThinkOpen.size() && kThinkOpen.substr(0, rest.size()) == rest)
          return;  // maybe "<think>" still
        mode_ = Mode::kContent;
        continue;
      }
      case Mode::kReasoning: {
        size_t at = buf_.find(kThinkClose);
        if (at != std::string::npos) {
          std::string r = buf_.substr(0, at);
          if (reasoning_.empty()) r.erase(0, std::min(r.size(), r.find_first_not_of('\n')));
          d->reasoning += r;
          reasoning_ += r;
          buf_.erase(0, at + kThinkClose.size());
          after_think_ = true;
          mode_ = Mode::kContent;
          continue;
        }
        size_t keep = final ? 0 : partial_tag(buf_, kThinkClose);
        std::string r = buf_.substr(0, buf_.size() - keep);
        if (reasoning_.empty()) r.erase(0, std::min(r.size(), r.find_first_not_of('\n')));
        d->reasoning += r;
        reasoning_ += r;
        buf_.erase(0, buf_.size() - keep);
        return;
      }
      case Mode::kContent: {
        if (format_ == ToolCallFormat::kHermes) {
          size_t at = buf_.find(kCallOpen);
          if (at != std::string::npos) {
            std::string before = buf_.substr(0, at);
            if (!(calls_.size() && all_space(before))) emit_content(d, before);
            buf_.erase(0, at + kCallOpen.size());
            mode_ = Mode::kToolCall;
            continue;
          }
          size_t keep = final ? 0 : partial_tag(buf_, kCallOpen);
          std::string out = buf_.substr(0, buf_.size() - keep);
          if (!(calls_.size() && all_space(out))) emit_content(d, out);
          buf_.erase(0, buf_.size() - keep);
          return;
        }
        if (format_ == ToolCallFormat::kLlama3Json && !content_started_) {
          size_t k = buf_.find_first_not_of(" \t\r\n");
          if (k == std::string::npos) {
            if (final) emit_content(d, buf_), buf_.clear();
            return;
          }
          std::string_view rest(buf_.data() + k, buf_.size() - k);
          if (rest[0] == '{' || rest.substr(0, kPythonTag.size()) == kPythonTag) {
            mode_ = Mode::kJson;
            continue;
          }
          if (!final && rest.size() < kPythonTag.size() && kPythonTag.substr(0, rest.size()) == rest)
            return;
        }
        emit_content(d, buf_);
        buf_.clear();
        return;
      }
      case Mode::kToolCall: {
        size_t at = buf_.find(kCallClose);
        if (at == std::string::npos && !final) return;
        std::string body = buf_.substr(0, at);
        if (!parse_call(body, d)) {
          // Not a call after all: the text stays content.
          emit_content(d, std::string(kCallOpen) + body + (at == std::string::npos ? "" : std::string(kCallClose)));
        }
        buf_.erase(0, at == std::string::npos ? buf_.size() : at + kCallClose.size());
        mode_ = Mode::kContent;
        if (final && buf_.empty()) return;
        continue;
      }
      case Mode::kJson: {
        if (!final) return;
        std::string body = buf_;
        size_t tag = body.find(kPythonTag);
        if (tag != std::string::npos) body.erase(0, tag + kPythonTag.size());
        if (!parse_call(body, d)) emit_content(d, buf_);
        buf_.clear();
        mode_ = Mode::kContent;
        return;
      }
    }
  }
}

ChatOutput::Delta ChatOutput::feed(const std::string& text) {
  Delta d;
  buf_ += text;
  run(&d, false);
  return d;
}

ChatOutput::Delta ChatOutput::finish() {
  Delta d;
  run(&d, true);
  return d;
}

}  // namespace ferrite
