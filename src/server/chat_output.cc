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

// {"name": "<name>", "arguments": {   (or "parameters") at the start of a
// Hermes call body: the header of a call whose arguments can stream.
enum class Header { kNeedMore, kNo, kYes };
Header match_call_header(const std::string& s, std::string* name, size_t* consumed) {
  size_t i = 0;
  auto ws = [&] {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r' || s[i] == '\n')) ++i;
  };
  auto lit = [&](std::string_view t) {
    const size_t n = std::min(t.size(), s.size() - i);
    if (s.compare(i, n, t.data(), n) != 0) return Header::kNo;
    if (n < t.size()) return Header::kNeedMore;
    i += n;
    return Header::kYes;
  };
  auto next = [&](std::string_view t) {
    ws();
    return lit(t);
  };
  for (std::string_view t : {"{", "\"name\"", ":"})
    if (Header h = next(t); h != Header::kYes) return h;
  ws();
  if (i >= s.size()) return Header::kNeedMore;
  if (s[i] != '"') return Header::kNo;
  const size_t start = i++;
  for (bool esc = false;; ++i) {
    if (i >= s.size()) return Header::kNeedMore;
    const char c = s[i];
    if (esc) esc = false;
    else if (c == '\\') esc = true;
    else if (c == '"') break;
    else if (static_cast<unsigned char>(c) < 0x20) return Header::kNo;
  }
  ++i;
  json n = json::parse(s.substr(start, i - start), nullptr, false);
  if (!n.is_string() || n.get<std::string>().empty()) return Header::kNo;
  if (Header h = next(","); h != Header::kYes) return h;
  ws();
  const size_t key = i;
  Header h = lit("\"arguments\"");
  if (h == Header::kNo) i = key, h = lit("\"parameters\"");
  if (h != Header::kYes) return h;
  if (h = next(":"); h != Header::kYes) return h;
  ws();
  if (i >= s.size()) return Header::kNeedMore;
  if (s[i] != '{') return Header::kNo;
  *name = n.get<std::string>();
  *consumed = i;
  return Header::kYes;
}

}  // namespace

void ChatOutput::Delta::add_call(ToolCallDelta c) {
  if (!calls.empty() && calls.back().index == c.index) {
    calls.back().arguments += c.arguments;
    calls.back().done = calls.back().done || c.done;
    return;
  }
  calls.push_back(std::move(c));
}

void ChatOutput::Delta::append(Delta&& later) {
  reasoning += later.reasoning;
  content += later.content;
  for (ToolCallDelta& c : later.calls) add_call(std::move(c));
}

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
    d->add_call({calls_.size(), x.id, x.name, x.arguments, true});
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
    d->add_call({calls_.size(), c.id, c.name, c.arguments, true});
    calls_.push_back(std::move(c));
  }
  return true;
}

ChatOutput::Step ChatOutput::stream_call(Delta* d, bool final) {
  if (call_state_ == CallState::kUndecided) {
    std::string name;
    size_t consumed = 0;
    Header h = match_call_header(buf_, &name, &consumed);
    // A header still incomplete when the call closes (or the text ends) is
    // no streamable call: the whole-call path decides what it is.
    if (h == Header::kNeedMore) {
      if (!final && buf_.find(kCallClose) == std::string::npos) return Step::kWait;
      h = Header::kNo;
    }
    if (h == Header::kNo) {
      call_state_ = CallState::kWhole;
      return Step::kNotStreamable;
    }
    ToolCall c{random_tool_call_id(), std::move(name), ""};
    d->add_call({calls_.size(), c.id, c.name, "", false});
    calls_.push_back(std::move(c));
    buf_.erase(0, consumed);
    call_state_ = CallState::kStreaming;
    args_depth_ = 0;
    args_in_string_ = args_escape_ = args_done_ = false;
  }
  const size_t index = calls_.size() - 1;
  if (!args_done_) {
    // The arguments object ends where its brackets balance (strings and
    // escapes tracked). A '<' outside a string cannot be JSON: the model
    // broke off the arguments (e.g. wrote </tool_call> early); the call then
    // ends at its close tag with what was streamed.
    size_t i = 0;
    for (; i < buf_.size() && !args_done_; ++i) {
      const char ch = buf_[i];
      if (args_in_string_) {
        if (args_escape_) args_escape_ = false;
        else if (ch == '\\') args_escape_ = true;
        else if (ch == '"') args_in_string_ = false;
      } else if (ch == '"') {
        args_in_string_ = true;
      } else if (ch == '{' || ch == '[') {
        ++args_depth_;
      } else if (ch == '}' || ch == ']') {
        if (--args_depth_ == 0) args_done_ = true;
      } else if (ch == '<') {
        args_done_ = true;
        break;
      }
    }
    if (i > 0) {
      std::string piece = buf_.substr(0, i);
      calls_[index].arguments += piece;
      d->add_call({index, "", "", std::move(piece), false});
      buf_.erase(0, i);
    }
    if (!args_done_) {
      if (!final) return Step::kWait;
      call_cut_short_ = true;  // the text ended inside the arguments
      d->add_call({index, "", "", "", true});
      buf_.clear();
      call_state_ = CallState::kUndecided;
      return Step::kDone;
    }
  }
  const size_t at = buf_.find(kCallClose);
  if (at == std::string::npos && !final) return Step::kWait;
  d->add_call({index, "", "", "", true});
  buf_.erase(0, at == std::string::npos ? buf_.size() : at + kCallClose.size());
  call_state_ = CallState::kUndecided;
  after_call_ = true;
  return Step::kDone;
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
          // Whitespace right after a call is held: dropped when another call
          // or the end follows, shown when text does (so the answer does not
          // depend on how the text was cut into pieces).
          if (at != std::string::npos) {
            std::string before = buf_.substr(0, at);
            if (!(after_call_ && all_space(before))) emit_content(d, before);
            buf_.erase(0, at + kCallOpen.size());
            mode_ = Mode::kToolCall;
            continue;
          }
          size_t keep = final ? 0 : partial_tag(buf_, kCallOpen);
          std::string out = buf_.substr(0, buf_.size() - keep);
          if (after_call_ && all_space(out)) {
            if (final) buf_.clear();
            return;
          }
          emit_content(d, out);
          after_call_ = false;
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
        if (call_state_ != CallState::kWhole) {
          const Step st = stream_call(d, final);
          if (st == Step::kWait) return;
          if (st == Step::kDone) {
            mode_ = Mode::kContent;
            if (final && buf_.empty()) return;
            continue;
          }
        }
        size_t at = buf_.find(kCallClose);
        if (at == std::string::npos && !final) return;
        std::string body = buf_.substr(0, at);
        if (parse_call(body, d)) {
          after_call_ = true;
        } else {
          // Not a call after all: the text stays content.
          emit_content(d, std::string(kCallOpen) + body + (at == std::string::npos ? "" : std::string(kCallClose)));
          after_call_ = false;
        }
        buf_.erase(0, at == std::string::npos ? buf_.size() : at + kCallClose.size());
        mode_ = Mode::kContent;
        call_state_ = CallState::kUndecided;
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
