// `ferrite tokenize` and `ferrite detokenize`.
//   ferrite tokenize --tokenizer PATH (--text-file FILE | --text TEXT) [--json]
//                    [--add-special-tokens]
//     PATH: tokenizer.json or a model directory. Prints the ids separated by
//     spaces, or with --json one object {"ids": [...]}. No BOS/EOS unless
//     --add-special-tokens.
//   ferrite detokenize --tokenizer PATH (--ids "1 2 3" | --ids-file FILE)
//                      [--skip-special-tokens]
//     Ids separated by spaces, commas or newlines, or a JSON array / {"ids": [...]}.
#pragma once

#include <CLI/CLI.hpp>

namespace ferrite::cli {

void register_tokenize_commands(CLI::App& app);

}  // namespace ferrite::cli
