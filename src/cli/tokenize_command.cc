#include "cli/tokenize_command.h"

#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/tokenizer.h"

namespace ferrite::cli {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string text_file;
  std::string text;
  bool json = false;
  bool add_special = false;
};

struct DetokenizeOptions {
  std::string tokenizer;
  std::string ids;
  std::string ids_file;
  bool skip_special = false;
};

[[noreturn]] void fail(const Status& s) {
  std::cerr << "ferrite: " << s.to_string() << "\n";
  throw CLI::RuntimeError(1);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(not_found("cannot open " + path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  auto tok = Tokenizer::load(path);
  if (!tok.is_ok()) fail(tok.status());
  return std::move(tok).value();
}

Result<std::vector<uint32_t>> parse_ids(const std::string& text) {
  size_t b = text.find_first_not_of(" \t\r\n");
  if (b != std::string::npos && (text[b] == '[' || text[b] == '{')) {
    try {
      auto j = nlohmann::json::parse(text);
      if (j.is_object()) j = j.at("ids");
      return j.get<std::vector<uint32_t>>();
    } catch (const nlohmann::json::exception& e) {
      return invalid_argument(std::string("bad ids JSON: ") + e.what());
    }
  }
  std::vector<uint32_t> ids;
  std::string cur;
  auto flush = [&]() -> Status {
    if (cur.empty()) return Status::ok();
    size_t pos = 0;
    unsigned long v = 0;
    try {
      v = std::stoul(cur, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos != cur.size() || v > UINT32_MAX) return invalid_argument("bad token id '" + cur + "'");
    ids.push_back(static_cast<uint32_t>(v));
    cur.clear();
    return Status::ok();
  };
  for (char c : text) {
    if (c == ' ' || c == ',' || c == '\n' || c == '\t' || c == '\r') {
      FERRITE_RETURN_IF_ERROR(flush());
    } else {
      cur += c;
    }
  }
  FERRITE_RETURN_IF_ERROR(flush());
  return ids;
}

void run_tokenize(const TokenizeOptions& o) {
  auto tok = load_tokenizer(o.tokenizer);
  std::string text = o.text_file.empty() ? o.text : read_all(o.text_file);
  auto ids = tok->encode(text, o.add_special);
  if (!ids.is_ok()) fail(ids.status());
  if (o.json) {
    std::cout << nlohmann::json{{"ids", *ids}}.dump() << "\n";
    return;
  }
  for (size_t i = 0; i < ids->size(); ++i) std::cout << (i ? " " : "") << (*ids)[i];
  std::cout << "\n";
}

void run_detokenize(const DetokenizeOptions& o) {
  auto tok = load_tokenizer(o.tokenizer);
  auto ids = parse_ids(o.ids_file.empty() ? o.ids : read_all(o.ids_file));
  if (!ids.is_ok()) fail(ids.status());
  auto text = tok->decode(*ids, o.skip_special);
  if (!text.is_ok()) fail(text.status());
  std::cout << *text;
  std::cout.flush();
}

}  // namespace

void register_tokenize_commands(CLI::App& app) {
  auto t = std::make_shared<TokenizeOptions>();
  CLI::App* tokenize = app.add_subcommand("tokenize", "Text to token ids");
  tokenize->add_option("--tokenizer", t->tokenizer, "tokenizer.json or model directory")
      ->required();
  auto* file = tokenize->add_option("--text-file", t->text_file, "UTF-8 text to tokenize");
  auto* text = tokenize->add_option("--text", t->text, "text to tokenize");
  file->excludes(text);
  tokenize->add_flag("--json", t->json, "print {\"ids\": [...]}");
  tokenize->add_flag("--add-special-tokens", t->add_special,
                     "apply the tokenizer's post-processor (e.g. BOS)");
  tokenize->callback([t]() {
    if (t->text_file.empty() && t->text.empty()) {
      fail(invalid_argument("tokenize needs --text-file or --text"));
    }
    run_tokenize(*t);
  });

  auto d = std::make_shared<DetokenizeOptions>();
  CLI::App* detokenize = app.add_subcommand("detokenize", "Token ids to text");
  detokenize->add_option("--tokenizer", d->tokenizer, "tokenizer.json or model directory")
      ->required();
  auto* ids = detokenize->add_option("--ids", d->ids, "ids separated by spaces or commas");
  auto* ids_file =
      detokenize->add_option("--ids-file", d->ids_file, "file with ids (plain list or JSON)");
  ids->excludes(ids_file);
  detokenize->add_flag("--skip-special-tokens", d->skip_special, "drop special tokens");
  detokenize->callback([d]() {
    if (d->ids.empty() && d->ids_file.empty()) {
      fail(invalid_argument("detokenize needs --ids or --ids-file"));
    }
    run_detokenize(*d);
  });
}

}  // namespace ferrite::cli
