#!/usr/bin/env python3
"""Writes tests/tokenizer/data/corpus.json: >= 1,000 tricky strings for the
tokenizer oracle comparison (CJK, emoji, combining marks, digit and
whitespace runs, code, special-token text, ...). Deterministic.

Run: python3 tests/tokenizer/make_corpus.py > tests/tokenizer/data/corpus.json
"""
import json
import random

SEEDS = [
    "", " ", "  ", "\t", "\n", "\r\n", "\n\n\n", " \n ", "a", "A", "hello", " hello", "hello ",
    "Hello, world!", "Hello world! How are you?", "The quick brown fox jumps over the lazy dog.",
    "I'm", "I'M", "you're", "they've", "we'll", "she'd", "it's", "IT'S", "don't", "DON'T",
    "'s", "'ll", "''", "'", "rock 'n' roll", "O'Neil's dog",
    "你好", "你好，世界！", "中文测试：分词器是否正确？", "日本語のテキストです。", "カタカナとひらがな",
    "한국어 문장입니다.", "한글", "\u1100\u1161\u11a8", "\u1112\u1161\u11ab\u1100\u1173\u11af",
    "混合mixed文本text123数字", "Ｆｕｌｌｗｉｄｔｈ　ｔｅｘｔ", "ｱｲｳｴｵ", "漢字かなカナ123ABC",
    "😀", "😀😃😄", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇩🇪🇯🇵", "❤️", "☺︎", "🏳️‍🌈", "emoji 🎉 party 🎊!",
    "e\u0301", "caf\u00e9", "cafe\u0301", "A\u030a", "\u212b", "\u2126", "n\u0303o", "o\u0308\u0304",
    "a\u0328\u0301", "\u1e9b\u0323", "q\u0307\u0323", "\u0301", "\u0301\u0301abc", "x\u20dd",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u0334\u0335\u031c\u0330\u0354L\u0328\u0357\u036a\u0343",
    "\u00c5ngstr\u00f6m", "Cr\u00e8me br\u00fbl\u00e9e", "na\u00efve co\u00f6perate", "\u0130stanbul",
    "stra\u00dfe", "\u0391\u03b8\u03ae\u03bd\u03b1", "\u041c\u043e\u0441\u043a\u0432\u0430",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u05e9\u05dc\u05d5\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "\u1780\u1798\u17d2\u1796\u17bb\u1787\u17b6",
    "0", "1", "12", "123", "1234", "12345", "123456789012345678901234567890", "3.14159", "1,000,000",
    "-42", "+7", "1e10", "0x1F", "2024-01-31", "12:34:56", "v1.2.3", "１２３", "٣٤٥", "१२३", "Ⅻ", "½",
    "a1b2c3", "abc123def456", "100%", "$9.99", "€10", "¥1000",
    "   leading", "trailing   ", "multiple     spaces", "tab\tseparated\tvalues", "\t\t\tindent",
    "line1\nline2", "line1\r\nline2", "para1\n\npara2", "  \n  \n", "\u00a0nbsp", "ideographic\u3000space",
    "nel\u0085char", "line\u2028sep", "para\u2029sep", "mongolian\u180evs", "zw\u200bsp", "zwj\u200dx",
    "bom\ufeffmark", "\u000b\u000c", "ctrl\u0001\u0002\u001f", "del\u007f", "\u2009thin\u2009space",
    "def foo(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}",
    "#include <stdio.h>\nint main() { printf(\"hi\\n\"); }", "SELECT * FROM users WHERE id = 1;",
    "{\"key\": \"value\", \"list\": [1, 2, 3]}", "<div class=\"x\">text</div>", "x => x + 1",
    "a==b&&c!=d||e<=f", "/* comment */ // line", "    if x:\n        pass", "`code` **bold** _it_",
    "https://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32",
    "$ ls -la | grep foo > out.txt 2>&1", "import numpy as np\nnp.array([1.0, 2.0])",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
    "<|im_start|>user\nhi<|im_end|>", "<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>",
    "<s>", "</s>", "<unk>", "<s>hello</s>", "<|im_start", "im_start|>", "<|im_start|><|im_end|>",
    "<<|im_start|>>", " <|im_start|> ", "text<|endoftext|>text", "<|reserved_special_token_5|>",
    "<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>", "<think>reasoning</think>answer",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "!!!!!!!!!!!!", "............",
    "-----", "=====", "______", "~~~~", "????", "((()))", "[[[]]]", "...", "—", "–", "…", "\u00ab\u00bb",
    "\u201cquoted\u201d", "\u2018single\u2019", "¿Qué?", "¡Hola!", "Ⓐⓑⓒ", "∑∫∂√∞≠≤≥", "→←↑↓",
    "ﬁ ﬂ", "\ufb01nance", "\u2163", "x²", "H₂O", "°C", "µ", "Å", "\U0001d54f\U0001d550", "\U00020000",
    "\U0010fffd", "\ue000", "\uffff", "\ufffd", "\U0001f9d1\u200d\U0001f4bb",
]

ATOMS = [
    "the", " the", "The", " THE", "is", " a", " test", " of", " tokenization", " naïve", " café",
    "你", "好", "世界", "の", "日本", "한", "국", "😀", "👍🏽", "🇯🇵", "❤️", "\u0301", "\u0308", "e\u0301",
    "0", "7", "42", "123", "9999", "3.14", " 12345", "٣", "１",
    " ", "  ", "   ", "\t", "\n", "\r\n", "\n\n", " \n", "\u00a0", "\u3000", "\u2028", "\u0085",
    "(", ")", "{", "}", "[", "]", ";", ":", ",", ".", "!", "?", "'", "\"", "'s", "'ll", "'ve", "'RE",
    "=", "==", "->", "=>", "::", "#", "//", "/*", "*/", "<", ">", "</", "/>", "&&", "||", "+=",
    "def", " return", "int", " main", "()", "x", "_", "__init__", "self", "None",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<|begin_of_text|>",
    "<|eot_id|>", "<s>", "</s>", "<|", "|>", "<|im", "▁", "Ġ", "Ċ", "ĠĠ",
    "Ω", "Ж", "ß", "İ", "ﬁ", "ℌ", "ǅ", "\u200b", "\u200d", "\ufeff", "\u00ad", "\u180e",
]


def main():
    rng = random.Random(20240531)
    out = list(SEEDS)
    seen = set(out)
    while len(out) < 1300:
        n = rng.randint(2, 12)
        s = "".join(rng.choice(ATOMS) for _ in range(n))
        if s not in seen:
            seen.add(s)
            out.append(s)
    # A few long mixed strings.
    for _ in range(20):
        s = "".join(rng.choice(ATOMS + SEEDS[20:]) for _ in range(rng.randint(40, 120)))
        out.append(s)
    json.dump(out, __import__("sys").stdout, ensure_ascii=False, indent=0)
    print()


if __name__ == "__main__":
    main()
