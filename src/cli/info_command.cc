// ferrite info --model DIR: the resolved plan (node -> provider), weight,
// KV and state memory. Reads headers only: works for models that do not fit.
#include <cstdio>
#include <memory>

#include "cli/commands.h"
#include "cli/common.h"

namespace ferrite::cli {

void register_info(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<ModelFlags>();
  auto catalog = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("info", "print the resolved plan and memory of a model");
  add_model_flags(cmd, f.get());
  cmd->add_flag("--catalog", *catalog, "also print the backend's capability catalog");
  cmd->callback([f, catalog, exit_code] {
    auto options = runner_options(*f);
    if (!options.is_ok()) {
      *exit_code = report_error(options.status());
      return;
    }
    auto report = ModelRunner::plan_only(*options);
    if (!report.is_ok()) {
      *exit_code = report_error(report.status());
      return;
    }
    std::printf("%s", report->to_string().c_str());
    if (*catalog) std::printf("capability catalog:\n%s", report->catalog.c_str());
    *exit_code = 0;
  });
}

}  // namespace ferrite::cli
