// libFuzzer target: the OpenAI request parser (src/server/request_parser.h).
//
// Input: a request body, parsed as a /v1/chat/completions, a
// /v1/completions and a /v1/responses body against the Qwen3 tokenizer and chat template
// (server_fixture.h) with a small context. Oracle: no crash, no sanitizer
// report, no hang; a rejected body is a 4xx with a message; an accepted one
// has a prompt of in-vocabulary ids that, with max_tokens (>= 1), fits the
// context, and respects the request limits.
#include <cstdint>
#include <string_view>

#include "fuzz_util.h"
#include "server/request_parser.h"
#include "server_fixture.h"

using namespace ferrite;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)ferrite::fuzz::served_model();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& model = ferrite::fuzz::served_model();
  static const RequestContext ctx = [&] {
    RequestContext c;
    c.tokenizer = model.tokenizer.get();
    c.chat = model.chat.get();
    c.model_name = "ferrite-fuzz";
    c.vocab_size = static_cast<int64_t>(model.tokenizer->vocab_size());
    c.max_context = 256;
    c.stop_ids = model.tokenizer->stop_ids();
    c.max_prompt_bytes = max_prompt_bytes_for(*model.tokenizer, c.max_context);
    return c;
  }();
  std::string_view body(reinterpret_cast<const char*>(data), size);
  enum class Api { kChat, kCompletions, kResponses };
  for (Api api : {Api::kChat, Api::kCompletions, Api::kResponses}) {
    const bool chat_api = api != Api::kCompletions;
    ParsedRequest req;
    auto err = api == Api::kResponses ? parse_responses_request(ctx, body, &req)
                                      : parse_request(ctx, body, chat_api, &req);
    if (err) {
      FERRITE_FUZZ_CHECK(err->status >= 400 && err->status < 500);
      FERRITE_FUZZ_CHECK(!err->message.empty());
      (void)api_error_body(*err);
      continue;
    }
    const EngineRequest& e = req.engine;
    FERRITE_FUZZ_CHECK(!e.prompt.empty());
    for (uint32_t id : e.prompt) FERRITE_FUZZ_CHECK(id < static_cast<uint64_t>(ctx.vocab_size));
    FERRITE_FUZZ_CHECK(e.max_tokens >= 1);
    FERRITE_FUZZ_CHECK(static_cast<int64_t>(e.prompt.size()) + e.max_tokens <= ctx.max_context);
    FERRITE_FUZZ_CHECK(req.stop.size() <= ctx.limits.max_stop_strings);
    for (const auto& s : req.stop) FERRITE_FUZZ_CHECK(s.size() <= ctx.limits.max_stop_bytes);
    FERRITE_FUZZ_CHECK(req.logprobs <= ctx.limits.max_logprobs);
    FERRITE_FUZZ_CHECK(req.chat == chat_api);
  }
  return 0;
}
