// ferrite info --model DIR: the resolved plan (node -> provider), weight,
// KV and state memory, the tuning in effect. Reads headers only: works for
// models that do not fit. `ferrite info --tuning-table`: the tuning
// variables (the table of docs/tuning.md).
#include <cstdio>
#include <memory>
#include <numeric>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/default_model.h"
#include "engine/engine.h"

namespace ferrite::cli {

void register_info(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<ModelFlags>();
  f->capacity_check = false;  // info plans; it allocates nothing
  auto catalog = std::make_shared<bool>(false);
  auto tuning_table = std::make_shared<bool>(false);
  CLI::App* cmd = app.add_subcommand("info", "print the resolved plan and memory of a model");
  add_model_flags(cmd, f.get(), /*model_required=*/false);
  cmd->add_flag("--catalog", *catalog, "also print the backend's capability catalog");
  cmd->add_flag("--tuning-table", *tuning_table,
                "print the table of tuning variables (docs/tuning.md) and exit");
  cmd->callback([f, catalog, tuning_table, exit_code] {
    if (*tuning_table) {
      std::printf("%s", tuning_docs_table().c_str());
      *exit_code = 0;
      return;
    }
    if (f->model.empty()) {  // as serve / run: the embedded model
      auto dir = ensure_default_model();
      if (!dir.is_ok()) {
        *exit_code = report_error(dir.status());
        return;
      }
      f->model = *dir;
    }
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
    std::printf("tuning: %s\n", options->tuning.to_string().c_str());
    // What `serve --enable-prefix-cache` would reserve for a hybrid model's
    // state snapshots (the engine's defaults).
    if (report->state_bytes_per_sequence > 0 && report->kv_bytes_per_token > 0) {
      const RunnerOptions& o = *options;
      const int64_t page_bytes = report->kv_bytes_per_token * o.cache.page_size;
      const int32_t pages = o.cache.num_pages > 0
                                ? o.cache.num_pages
                                : static_cast<int32_t>(o.cache.kv_memory_bytes / page_bytes);
      const EngineOptions eo;
      const int64_t align = std::lcm<int64_t>(kRecurrentSplitAlign, o.cache.page_size);
      SnapshotBudget b = snapshot_budget(
          eo.snapshot_memory_fraction, eo.snapshot_interval_pages,
          static_cast<int32_t>(align / o.cache.page_size), pages, page_bytes,
          report->state_bytes_per_sequence);
      std::printf(
          "prefix-cache state snapshots: %d x %.2f MiB = %.2f MiB (%.0f %% of the %d-page KV "
          "cache); every %d pages (%d tokens), prompt ends and branch points; resume points "
          "are multiples of %lld tokens\n",
          b.slots, report->state_bytes_per_sequence / 1048576.0, b.bytes / 1048576.0,
          100.0 * static_cast<double>(b.bytes) / (static_cast<double>(pages) * page_bytes), pages,
          b.interval_pages, b.interval_pages * o.cache.page_size, static_cast<long long>(align));
    }
    if (*catalog) std::printf("capability catalog:\n%s", report->catalog.c_str());
    *exit_code = 0;
  });
}

}  // namespace ferrite::cli
