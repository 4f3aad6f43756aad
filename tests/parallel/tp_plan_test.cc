// The tensor-parallel split (runtime/tensor_parallel.h) without running a
// model: the rank program's shapes, nodes and cuts, the divisibility errors
// (before any weight is allocated), the refusal on CUDA and for GGUF files,
// the per-rank figures of `ferrite info`, and the cut ranges.
#include <gtest/gtest.h>

#include "engine/model_runner.h"
#include "runtime/tensor_parallel.h"

namespace ferrite {
namespace {

const std::string kModelsDir = FERRITE_SOURCE_DIR "/tests/models/";

RunnerOptions options(const std::string& family, int tp) {
  RunnerOptions o;
  o.load.model_dir = kModelsDir + family;
  o.tensor_parallel = tp;
  o.limits.max_tokens = 64;
  o.limits.max_sequences = 4;
  o.limits.max_context = 256;
  o.load.program.max_context = 256;
  o.cache.kv_memory_bytes = 8ll << 20;
  return o;
}

const WeightDecl* weight(const ModelProgram& p, const std::string& name) {
  const WeightDecl* w = p.find_weight(name);
  EXPECT_NE(w, nullptr) << name;
  return w;
}

int count_nodes(const ModelProgram& p, const std::string& contract) {
  int n = 0;
  for (const ProgramNode& node : p.nodes) n += node.contract_id == contract;
  return n;
}

TEST(TpPlan, LlamaSplitsTwoWays) {
  auto r = ModelRunner::plan_only(options("llama", 2));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ModelProgram& p = *r->program;
  EXPECT_EQ(p.tensor_parallel, 2);
  // 4 heads of 16, 2 KV heads, hidden 64, intermediate 128, vocab 512.
  EXPECT_EQ(weight(p, "model.layers.0.self_attn.q_proj.weight")->shape, (Shape{32, 64}));
  EXPECT_EQ(weight(p, "model.layers.0.self_attn.k_proj.weight")->shape, (Shape{16, 64}));
  EXPECT_EQ(weight(p, "model.layers.0.self_attn.o_proj.weight")->shape, (Shape{64, 32}));
  EXPECT_EQ(weight(p, "model.layers.0.self_attn.o_proj.weight")->shard.dim, 1);
  EXPECT_EQ(weight(p, "model.layers.0.mlp.gate_proj.weight")->shape, (Shape{64, 64}));
  EXPECT_EQ(weight(p, "model.layers.0.mlp.down_proj.weight")->shape, (Shape{64, 64}));
  EXPECT_EQ(weight(p, "lm_head.weight")->shape, (Shape{256, 64}));
  EXPECT_FALSE(weight(p, "model.embed_tokens.weight")->shard.split());
  EXPECT_FALSE(weight(p, "model.layers.0.input_layernorm.weight")->shard.split());
  EXPECT_EQ(p.find_state("layers.0.k_cache")->shape, (Shape{1, 16}));
  // Two all-reduces per layer, one gather for the logits.
  const int layers = r->config.num_layers;
  EXPECT_EQ(count_nodes(p, "tp_all_reduce_sum"), 2 * layers);
  EXPECT_EQ(count_nodes(p, "residual_add"), 2 * layers);
  EXPECT_EQ(count_nodes(p, "tp_all_gather"), 1);
  EXPECT_EQ(r->plan.tensor_parallel, 2);
  // The sums over the ranks, and the per-rank line of `ferrite info`.
  auto one = ModelRunner::plan_only(options("llama", 1));
  ASSERT_TRUE(one.is_ok());
  EXPECT_EQ(r->kv_bytes_per_token, one->kv_bytes_per_token);
  EXPECT_LT(r->weight_bytes, 2 * one->weight_bytes);  // only norms / embedding replicated
  EXPECT_NE(r->plan.fingerprint, one->plan.fingerprint);
  const std::string info = r->to_string();
  EXPECT_NE(info.find("tensor parallel: 2 ranks, per rank: weights"), std::string::npos) << info;
  EXPECT_NE(info.find("tp_all_reduce_sum"), std::string::npos) << info;
}

TEST(TpPlan, FourRanksReplicateTheTwoKvHeadsAndKeyHeads) {
  auto r = ModelRunner::plan_only(options("qwen3_5", 4));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ModelProgram& p = *r->program;
  for (const ProgramNode& n : p.nodes) {
    if (n.contract_id == "causal_paged_attention") {
      EXPECT_EQ(n.attrs.u("num_heads"), 1u);
      EXPECT_EQ(n.attrs.u("num_kv_heads"), 1u);
    }
    if (n.contract_id == "gated_delta_recurrent_attention") {
      EXPECT_EQ(n.attrs.u("num_k_heads"), 1u);  // 2 key heads, each on 2 ranks
      EXPECT_EQ(n.attrs.u("num_v_heads"), 1u);
    }
  }
  // Of 2 KV heads of 32, ranks 0 and 1 take head 0, ranks 2 and 3 head 1.
  const WeightDecl* k = nullptr;
  for (const WeightDecl& w : p.weights)
    if (w.name.find("self_attn.k_proj.weight") != std::string::npos) k = &w;
  ASSERT_NE(k, nullptr);
  using R = std::vector<std::pair<int64_t, int64_t>>;
  const int64_t H = r->config.hidden_size;
  EXPECT_EQ(shard_ranges(k->shard, 1, 4), (R{{0, 32 * H}}));
  EXPECT_EQ(shard_ranges(k->shard, 2, 4), (R{{32 * H, 64 * H}}));
}

TEST(TpPlan, TiedEmbeddingIsKeptWholeAndCutForTheHead) {
  auto r = ModelRunner::plan_only(options("qwen3", 2));  // tie_word_embeddings
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const ModelProgram& p = *r->program;
  EXPECT_FALSE(weight(p, "model.embed_tokens.weight")->shard.split());
  const ProgramNode* lm = nullptr;
  for (const ProgramNode& n : p.nodes)
    if (n.contract_id == "last_token_dense_linear") lm = &n;
  ASSERT_NE(lm, nullptr);
  const WeightDecl* head = weight(p, lm->bindings[1].name);
  ASSERT_NE(head, nullptr);
  EXPECT_NE(head->name, "model.embed_tokens.weight");
  EXPECT_EQ(head->shape, (Shape{256, 64}));
  EXPECT_EQ(head->sources.at(0).at(0).tensor, "model.embed_tokens.weight");
}

TEST(TpPlan, ModelsThatDoNotSplitFailBeforeAnyWeightWithEveryReason) {
  // llama: 4 heads, 2 KV heads, intermediate 128, vocab 512: 3 ways fails
  // for each; the same error from plan_only (no weight memory) and open.
  auto r = ModelRunner::plan_only(options("llama", 3));
  ASSERT_FALSE(r.is_ok());
  const std::string& m = r.status().message();
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << m;
  EXPECT_NE(m.find("cannot split llama across 3 ranks"), std::string::npos) << m;
  EXPECT_NE(m.find("4 query heads do not split 3 ways"), std::string::npos) << m;
  EXPECT_NE(m.find("intermediate_size 128 does not split 3 ways"), std::string::npos) << m;
  EXPECT_NE(m.find("vocab_size 512 does not split 3 ways"), std::string::npos) << m;
  EXPECT_EQ(m.find("layers.1"), std::string::npos) << "one line per reason, not per layer: " << m;
  auto open = ModelRunner::open(options("llama", 3));
  ASSERT_FALSE(open.is_ok());
  EXPECT_EQ(open.status().message(), m);
  // 8 ranks: 4 query heads fail, 2 KV heads would replicate.
  auto eight = ModelRunner::plan_only(options("llama", 8));
  ASSERT_FALSE(eight.is_ok());
  EXPECT_NE(eight.status().message().find("4 query heads do not split 8 ways"), std::string::npos);
  EXPECT_EQ(eight.status().message().find("KV heads"), std::string::npos)
      << eight.status().message();
  // MoE experts are split within: moe_intermediate_size 32 over 64 ranks.
  auto moe = ModelRunner::plan_only(options("qwen3_moe", 64));
  ASSERT_FALSE(moe.is_ok());
  EXPECT_NE(moe.status().message().find("experts' intermediate size 32"), std::string::npos)
      << moe.status().message();
  // Out of range.
  EXPECT_FALSE(ModelRunner::plan_only(options("llama", 0)).is_ok());
  EXPECT_FALSE(ModelRunner::plan_only(options("llama", kMaxTensorParallel + 1)).is_ok());
}

TEST(TpPlan, RefusedOnCuda) {
  auto r = ModelRunner::plan_only(options("llama", 2));
  ASSERT_TRUE(r.is_ok());
  Registry cuda(BackendKind::kCuda);  // no providers needed: refused first
  auto plan = plan_program(*r->program, cuda, PlanOptions{});
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(plan.status().message().find("not verified on the cuda backend"), std::string::npos)
      << plan.status().message();
}

TEST(TpPlan, GgufFilesAreRefused) {
  RunnerOptions o = options("llama", 2);
  o.load.model_dir = kModelsDir + "gguf/llama-f16.gguf";
  auto r = ModelRunner::plan_only(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("does not load GGUF files yet"), std::string::npos)
      << r.status().message();
}

TEST(TpPlan, ProvidersWithoutPartialOutAreNotChosen) {
  // A block node with partial_out bound needs a provider that writes it.
  auto r = ModelRunner::plan_only(options("llama", 2));
  ASSERT_TRUE(r.is_ok());
  const ProgramNode* mlp = nullptr;
  for (const ProgramNode& n : r->program->nodes)
    if (n.contract_id == "dense_swiglu") mlp = &n;
  ASSERT_NE(mlp, nullptr);
  const PlannedNode* planned = nullptr;
  for (const PlannedNode& n : r->plan.nodes)
    if (n.node == mlp) planned = &n;
  ASSERT_NE(planned, nullptr);
  ASSERT_TRUE(planned->provider->descriptor().partial_out);
  class NoPartial final : public Provider {
   public:
    explicit NoPartial(const ProviderDescriptor& d) : d_(d) { d_.partial_out = false; }
    const ProviderDescriptor& descriptor() const override { return d_; }
    Status encode(const Invocation&) const override { return Status::ok(); }

   private:
    ProviderDescriptor d_;
  };
  NoPartial p(planned->provider->descriptor());
  Status s = p.supports(planned->signature);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("partial_out"), std::string::npos) << s.message();
}

TEST(TpPlan, ShardRangesOfAColumnCut) {
  WeightShard s;
  s.dim = 1;
  s.full_shape = Shape{3, 8};
  s.segments = {{8, 2}};
  using R = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(shard_ranges(s, 0, 2), (R{{0, 4}, {8, 12}, {16, 20}}));
  EXPECT_EQ(shard_ranges(s, 1, 2), (R{{4, 8}, {12, 16}, {20, 24}}));
  // Segments [2 | 2 | 4] along the rows of a [8, 3]: rank 1 of 2.
  WeightShard g;
  g.dim = 0;
  g.full_shape = Shape{8, 3};
  g.segments = {{2, 2}, {2, 2}, {4, 2}};
  EXPECT_EQ(shard_ranges(g, 1, 2), (R{{3, 6}, {9, 12}, {18, 24}}));
  // A part replicated on two of four ranks.
  g.segments = {{2, 2}, {2, 2}, {4, 4}};
  EXPECT_EQ(shard_ranges(g, 3, 4), (R{{3, 6}, {9, 12}, {21, 24}}));
}

}  // namespace
}  // namespace ferrite
