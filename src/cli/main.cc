// The ferrite binary: one entry point for every command.
#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/tokenize_command.h"

int main(int argc, char** argv) {
  CLI::App app{"ferrite: a C++ LLM inference and serving engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ferrite ") + FERRITE_VERSION + " (commit " + FERRITE_COMMIT + ")");
  // Every option's default is shown in --help (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  int exit_code = 0;
  ferrite::cli::register_generate(app, &exit_code);
  ferrite::cli::register_info(app, &exit_code);
  ferrite::cli::register_bench(app, &exit_code);
  ferrite::cli::register_create_model(app, &exit_code);
  ferrite::cli::register_serve(app, &exit_code);
  ferrite::cli::register_run(app, &exit_code);
  ferrite::cli::register_bench_serve(app, &exit_code);
  ferrite::cli::register_perplexity(app, &exit_code);
  ferrite::cli::register_tokenize_commands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }
  return exit_code;
}
