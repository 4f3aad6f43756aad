// Tuning: parsed once from the environment, typed, part of the plan
// fingerprint, and documented by the table it generates.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "backends/cpu/cpu_providers.h"
#include "runtime/planner.h"
#include "runtime/tuning.h"

namespace ferrite {
namespace {

std::function<const char*(const char*)> env(std::map<std::string, std::string> vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [held](const char* name) -> const char* {
    auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

TEST(TuningTest, DefaultsWhenNothingIsSet) {
  auto t = Tuning::from_environment(env({}));
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(*t, Tuning{});
  EXPECT_EQ(t->threads, 0);
  EXPECT_TRUE(t->cuda_graphs);
  EXPECT_FALSE(t->profile);
  EXPECT_EQ(t->to_string(), "threads=0 cpu_quant_dot=1 cpu_quant_isa=0 cuda_graphs=1 cuda_quant_dot=1 cuda_quant_fused=1 cuda_quant_fused_fp8=1 cuda_quant_stream_tokens=8 cuda_quant_stream_blocks=1 cuda_quant_stream_item_steps=4 cuda_quant_stream_mixed=1 cuda_quant_mma_fp8=1 cuda_quant_mma_u4=5 cuda_quant_mma_fp8_act=0 cuda_quant_mma_smem_kib=0 cuda_moe_dequant=512 cuda_moe_mma_fp8=1 cuda_moe_mma_u4=9 cuda_moe_fused_tokens=8 cuda_moe_gate_up_warp_outputs=4 cuda_moe_route_in_router=0 cuda_moe_route_block=1 cuda_moe_route_in_experts=1 cuda_moe_shared_in_experts=1 cuda_moe_down_pdl_trigger=1 cuda_pdl_trigger_small=0 cuda_gated_delta_fused_norm=1 cuda_gated_delta_pdl=0 cuda_gated_delta_conv_in_projection=1 cuda_moe_down_form=2 cuda_decode_split_positions=64 cuda_decode_reduce_scatter=0 cuda_decode_colocate=2 cuda_decode_colocate_min_mib=8 cuda_decode_cluster=1 cuda_decode_cluster_late_stores=1 cuda_decode_cluster_staged_pages=1 cuda_decode_cluster_bulk_copies=1 cuda_decode_cluster_copy_warps=1 cuda_decode_cluster_rope_table=1 cuda_decode_mma_tokens=9 cuda_rope_token_warps=0 cuda_prefill_short_tiles=0 cuda_dequant_slice_mib=512 cuda_quant_tile_tokens=32 cuda_quant_mmq_tokens=64 cuda_quant_mmq_min_tokens=5 cuda_quant_mmq_waves=1 cuda_quant_mmq_share_act=1 cuda_u4_tile_tokens=64 cuda_u4_tile_wgmma=0 cuda_fp8_lt_tokens=128 profile=0 ncu_decode_step=0 cuda_cluster_trace=0");
}

TEST(TuningTest, EnvironmentOverridesEachKnob) {
  auto t = Tuning::from_environment(env({{"FERRITE_THREADS", "3"},
                                         {"FERRITE_CUDA_GRAPHS", "0"},
                                         {"FERRITE_PROFILE", "1"},
                                         {"FERRITE_NCU_DECODE_STEP", "10"}}));
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t->threads, 3);
  EXPECT_FALSE(t->cuda_graphs);
  EXPECT_TRUE(t->profile);
  EXPECT_EQ(t->ncu_decode_step, 10);
}

TEST(TuningTest, MalformedValuesAreErrorsNamingTheVariable) {
  for (auto [var, value] : std::vector<std::pair<std::string, std::string>>{
           {"FERRITE_THREADS", "many"},
           {"FERRITE_THREADS", "-2"},
           {"FERRITE_THREADS", "2000"},
           {"FERRITE_CUDA_GRAPHS", "maybe"},
           {"FERRITE_CUDA_MOE_GATE_UP_WARP_OUTPUTS", "3"},
           {"FERRITE_CUDA_MOE_DOWN_FORM", "3"},
           {"FERRITE_CUDA_DECODE_COLOCATE", "3"},
           {"FERRITE_CUDA_DECODE_COLOCATE_MIN_MIB", "-1"}}) {
    auto t = Tuning::from_environment(env({{var, value}}));
    ASSERT_FALSE(t.is_ok()) << var << "=" << value;
    EXPECT_NE(t.status().message().find(var), std::string::npos) << t.status().to_string();
  }
  Tuning t;
  EXPECT_FALSE(t.set("FERRITE_NO_SUCH_KNOB", "1").is_ok());
}

TEST(TuningTest, EveryKnobChangesThePlanFingerprint) {
  auto registry = make_cpu_registry(CpuProviderSet::kBoth);
  ModelProgram p;
  p.family = "test";
  p.vocab_size = 8;
  p.values = {{"hidden", ValueRows::kTokens, 4, true}, {"logits", ValueRows::kSequences, 8, false, DType::kF32}};
  p.weights = {{"emb", {8, 4}, DType::kF32}};
  ProgramNode h;
  h.name = "head";
  h.contract_id = "last_token_dense_linear";
  h.attrs.set("hidden_size", uint64_t{4}).set("vocab_size", uint64_t{8});
  h.bindings = {BindingRef::value("hidden"), BindingRef::weight("emb"), BindingRef::value("logits")};
  p.nodes = {h};
  PlanOptions base;
  auto plan = plan_program(p, *registry, base);
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  std::vector<PlanOptions> variants(4, base);
  variants[0].tuning.threads = 2;
  variants[1].tuning.cuda_graphs = false;
  variants[2].tuning.profile = true;
  variants[3].tuning.ncu_decode_step = 5;
  for (const PlanOptions& o : variants) {
    auto other = plan_program(p, *registry, o);
    ASSERT_TRUE(other.is_ok());
    EXPECT_NE(other->fingerprint, plan->fingerprint) << o.tuning.to_string();
  }
  EXPECT_EQ(plan_program(p, *registry, base)->fingerprint, plan->fingerprint);
}

// docs/tuning.md carries the generated table verbatim between its markers.
TEST(TuningTest, DocsTableMatchesTheStruct) {
  std::ifstream in(FERRITE_SOURCE_DIR "/docs/tuning.md");
  ASSERT_TRUE(in) << "docs/tuning.md is missing";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin = "<!-- tuning table: generated by tuning_docs_table() -->\n";
  const std::string end = "<!-- end of tuning table -->";
  const size_t a = doc.find(begin), b = doc.find(end);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  EXPECT_EQ(doc.substr(a + begin.size(), b - a - begin.size()), tuning_docs_table())
      << "regenerate the table: ferrite info --tuning-table";
}

}  // namespace
}  // namespace ferrite
