// The `ferrite` subcommands. Each register_* adds one subcommand whose
// callback stores the process exit code in *exit_code.
#pragma once

#include <CLI/CLI.hpp>

namespace ferrite::cli {

void register_generate(CLI::App& app, int* exit_code);
void register_info(CLI::App& app, int* exit_code);
void register_bench(CLI::App& app, int* exit_code);
void register_create_model(CLI::App& app, int* exit_code);
void register_serve(CLI::App& app, int* exit_code);
void register_run(CLI::App& app, int* exit_code);
void register_bench_serve(CLI::App& app, int* exit_code);
void register_perplexity(CLI::App& app, int* exit_code);

}  // namespace ferrite::cli
