// Planner, registry/catalog, memory and executor behaviour on CPU.
#include <gtest/gtest.h>

#include <tuple>

#include "backends/cpu/cpu_providers.h"
#include "base/thread_pool.h"
#include "contracts/rms_norm.h"
#include "runtime/executor.h"
#include "runtime/planner.h"
#include "runtime/workspace.h"

namespace ferrite {
namespace {

// hidden -> rms_norm -> normed ... -> logits, with configurable weight dtypes.
ModelProgram tiny_program(DType norm_dtype) {
  ModelProgram p;
  p.family = "test";
  p.vocab_size = 8;
  p.values = {{"ids", ValueRows::kTokens, 1, false, DType::kU32},
              {"hidden", ValueRows::kTokens, 4, true},
              {"normed", ValueRows::kTokens, 4, true},
              {"logits", ValueRows::kSequences, 8, false, DType::kF32}};
  p.weights = {{"emb", {8, 4}, DType::kF32}, {"norm", {4}, norm_dtype}};
  ProgramNode e;
  e.name = "embed";
  e.contract_id = "token_embedding";
  e.attrs.set("vocab_size", uint64_t{8}).set("hidden_size", uint64_t{4});
  e.bindings = {BindingRef::value("ids"), BindingRef::weight("emb"), BindingRef::value("hidden")};
  ProgramNode n;
  n.name = "norm";
  n.contract_id = "rms_norm";
  n.attrs.set("hidden_size", uint64_t{4}).set("eps", 1e-6);
  n.bindings = {BindingRef::value("hidden"), BindingRef::weight("norm"),
                BindingRef::value("normed")};
  ProgramNode h;
  h.name = "head";
  h.contract_id = "last_token_dense_linear";
  h.attrs.set("hidden_size", uint64_t{4}).set("vocab_size", uint64_t{8});
  h.bindings = {BindingRef::value("normed"), BindingRef::weight("emb"),
                BindingRef::value("logits")};
  p.nodes = {e, n, h};
  return p;
}

// The one bump allocator: a layout measured is the layout carved (same
// offsets, aligned pieces), and a carve past the end fails with a status
// instead of handing out memory it does not have.
TEST(WorkspaceTest, MeasuredLayoutIsTheCarvedOneAndOverflowIsAStatus) {
  auto layout = [](Workspace& ws, int64_t n) {
    float* a = ws.take<float>(n);
    int32_t* b = ws.take<int32_t>(3);
    double* c = ws.take<double>(n / 2);
    return std::make_tuple(a, b, c);
  };
  const int64_t bytes = measure_workspace([&](Workspace& ws) { layout(ws, 100); });
  // 400 bytes of floats end at 400: the ints start at 512; their 12 bytes
  // end at 524: the doubles start at 768 and end 400 bytes later.
  EXPECT_EQ(bytes, 768 + 50 * 8);
  alignas(256) static char buf[4096];
  Workspace ws(buf, bytes);
  auto [a, b, c] = layout(ws, 100);
  EXPECT_TRUE(ws.status("test").is_ok());
  EXPECT_EQ(reinterpret_cast<char*>(a), buf);
  EXPECT_EQ(reinterpret_cast<char*>(b), buf + 2 * Workspace::kAlign);
  EXPECT_EQ(reinterpret_cast<char*>(c), buf + 3 * Workspace::kAlign);
  EXPECT_EQ(ws.used(), bytes);
  // A smaller step carves within the measured bound.
  Workspace small(buf, bytes);
  layout(small, 10);
  EXPECT_TRUE(small.status("test").is_ok());
  // A larger one does not fit: null pieces and an internal error.
  Workspace big(buf, bytes);
  auto [ba, bb, bc] = layout(big, 200);
  EXPECT_NE(ba, nullptr);  // 800 bytes and then 12 still fit
  EXPECT_NE(bb, nullptr);
  EXPECT_EQ(bc, nullptr);
  const Status st = big.status("test.provider");
  EXPECT_EQ(st.code(), StatusCode::kInternal);
  EXPECT_NE(st.message().find("test.provider: workspace too small"), std::string::npos)
      << st.message();
}

TEST(PlannerTest, ResolvesEveryNodeToAProvider) {
  auto registry = make_cpu_registry(CpuProviderSet::kBoth);
  ModelProgram p = tiny_program(DType::kBF16);
  auto plan = plan_program(p, *registry, PlanOptions{});
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  ASSERT_EQ(plan->nodes.size(), 3u);
  EXPECT_EQ(plan->nodes[1].provider->descriptor().name, "cpu.fast.rms_norm");
  PlanOptions reference;
  reference.prefer = "reference";
  auto ref_plan = plan_program(p, *registry, reference);
  ASSERT_TRUE(ref_plan.is_ok());
  EXPECT_EQ(ref_plan->nodes[1].provider->descriptor().name, "cpu.reference.rms_norm");
  EXPECT_NE(plan->fingerprint, ref_plan->fingerprint);
  EXPECT_NE(plan->to_string().find("norm"), std::string::npos);
}

// The planner checks the contracts' declared dims against what a program
// binds: a weight of the wrong shape, a value of the wrong width.
TEST(PlannerTest, DeclaredDimsAreCheckedAgainstBoundShapes) {
  auto registry = make_cpu_registry(CpuProviderSet::kBoth);
  ModelProgram p = tiny_program(DType::kF32);
  p.weights[1].shape = Shape{5};  // rms_norm weight: [hidden_size] = [4]
  p.values[2].width = 3;          // "normed": [tokens, hidden_size]
  auto plan = plan_program(p, *registry, PlanOptions{});
  ASSERT_FALSE(plan.is_ok());
  const std::string msg = plan.status().message();
  EXPECT_NE(msg.find("weight 'norm' bound to 'weight' is [5], the contract declares "
                     "[hidden_size=4]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("value 'normed' bound to 'out' has 3 elements per row"), std::string::npos)
      << msg;
}

TEST(PlannerTest, OneErrorNamesEveryMissingCapability) {
  auto registry = make_cpu_registry(CpuProviderSet::kBoth);
  ModelProgram p = tiny_program(DType::kQ8_0);  // a q8_0 norm of 4: not whole blocks
  ProgramNode unknown;
  unknown.name = "mystery";
  unknown.contract_id = "flux_capacitor";
  p.nodes.push_back(unknown);
  ProgramNode unbound = p.nodes[1];
  unbound.name = "unbound_norm";
  unbound.bindings[1] = BindingRef::none();
  p.nodes.push_back(unbound);
  auto plan = plan_program(p, *registry, PlanOptions{});
  ASSERT_FALSE(plan.is_ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kUnsupported);
  const std::string& m = plan.status().message();
  EXPECT_NE(m.find("3 missing capabilities"), std::string::npos) << m;
  EXPECT_NE(m.find("q8_0"), std::string::npos) << m;
  EXPECT_NE(m.find("flux_capacitor"), std::string::npos) << m;
  EXPECT_NE(m.find("unbound_norm"), std::string::npos) << m;
}

TEST(PlannerTest, WeightFormatsChooseAProviderThatAcceptsThem) {
  auto registry = make_cpu_registry(CpuProviderSet::kBoth);
  // GGUF blocks plan on CPU (rows of whole blocks), mixed with f32.
  ModelProgram p = tiny_program(DType::kF32);
  p.weights[0] = {"emb", {8, 256}, DType::kQ4_K};
  p.weights[1] = {"norm", {256}, DType::kF32};
  p.values[1].width = p.values[2].width = 256;
  for (ProgramNode& n : p.nodes) n.attrs.set("hidden_size", uint64_t{256});
  auto plan = plan_program(p, *registry, PlanOptions{});
  ASSERT_TRUE(plan.is_ok()) << plan.status().to_string();
  // A format no provider accepts fails at plan time, naming it.
  p.weights[0].dtype = DType::kF8E4M3;
  auto bad = plan_program(p, *registry, PlanOptions{});
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("no f8_e4m3 weights for 'table'"), std::string::npos)
      << bad.status().message();
  // Rows that are not whole blocks fail at plan time too.
  p.weights[0] = {"emb", {8, 128}, DType::kQ6_K};
  auto ragged = plan_program(p, *registry, PlanOptions{});
  ASSERT_FALSE(ragged.is_ok());
  EXPECT_NE(ragged.status().message().find("not whole q6_k blocks of 256"), std::string::npos)
      << ragged.status().message();
}

TEST(PlannerTest, RejectsInvalidAttributes) {
  auto registry = make_cpu_registry(CpuProviderSet::kBoth);
  ModelProgram p = tiny_program(DType::kF32);
  p.nodes[1].attrs.set("eps", uint64_t{1});  // wrong type
  auto plan = plan_program(p, *registry, PlanOptions{});
  ASSERT_FALSE(plan.is_ok());
  EXPECT_NE(plan.status().message().find("'eps'"), std::string::npos);
}

TEST(RegistryTest, CatalogIsDerivedFromProviders) {
  auto registry = make_cpu_registry(CpuProviderSet::kBoth);
  CapabilityCatalog catalog = registry->catalog();
  EXPECT_EQ(catalog.entries().size(), registry->providers().size());
  EXPECT_TRUE(catalog.has_contract("causal_paged_attention"));
  EXPECT_FALSE(catalog.has_contract("flux_capacitor"));
  EXPECT_NE(catalog.to_string().find("cpu.fast.dense_linear"), std::string::npos);
}

TEST(ContractTest, FingerprintsDifferAndAreStable) {
  EXPECT_EQ(rms_norm::contract().fingerprint(), rms_norm::contract().fingerprint());
  Attributes a;
  a.set("hidden_size", uint64_t{4}).set("eps", 1e-6).set("bogus", true);
  EXPECT_FALSE(rms_norm::contract().validate(a).is_ok());
}

TEST(PagePoolTest, AllocateReleaseAndExhaustion) {
  PagePool pool;
  pool.init(4, 16);
  EXPECT_EQ(pool.pages_for(0), 0);
  EXPECT_EQ(pool.pages_for(16), 1);
  EXPECT_EQ(pool.pages_for(17), 2);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(3, &a).is_ok());
  Status s = pool.allocate(2, &b);
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(b.empty());  // nothing taken on failure
  pool.retain(a[0]);
  pool.release_all(a);
  EXPECT_EQ(pool.free_pages(), 3);  // a[0] still shared
  pool.release(a[0]);
  EXPECT_EQ(pool.free_pages(), 4);
}

TEST(StateSlotsTest, AllocateAndRelease) {
  StateSlots slots;
  slots.init(2);
  auto a = slots.allocate();
  auto b = slots.allocate();
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(slots.allocate().status().code(), StatusCode::kResourceExhausted);
  slots.release(*a);
  EXPECT_TRUE(slots.allocate().is_ok());
}

TEST(ExecutorTest, RejectsBadBatchesWithoutRunning) {
  auto registry = make_cpu_registry(CpuProviderSet::kBoth);
  ModelProgram p = tiny_program(DType::kF32);
  auto plan = plan_program(p, *registry, PlanOptions{});
  ASSERT_TRUE(plan.is_ok());
  auto device = make_cpu_device();
  auto weights = std::make_unique<WeightStore>();
  std::vector<float> emb(32, 0.5f), norm(4, 1.0f);
  weights->add("emb", TensorView{emb.data(), DType::kF32, {8, 4}});
  weights->add("norm", TensorView{norm.data(), DType::kF32, {4}});
  ExecContext ctx;
  ctx.device = device.get();
  ctx.pool = &ThreadPool::global();
  auto bound = BoundPlan::bind(*plan, p, std::move(weights), *device, ctx, CacheConfig{});
  ASSERT_TRUE(bound.is_ok()) << bound.status().to_string();
  StepBatch batch;
  batch.token_ids = {1, 9};  // 9 is outside the vocabulary of 8
  batch.sequences.push_back({0, 2, 0, {}, -1});
  Status s = (*bound)->forward(batch);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos);
  batch.token_ids = {1, 2};
  batch.sequences[0].token_count = 1;  // ranges do not cover the tokens
  EXPECT_EQ((*bound)->forward(batch).code(), StatusCode::kInvalidArgument);
  batch.sequences[0].token_count = 2;
  EXPECT_TRUE((*bound)->forward(batch).is_ok());
}

TEST(ExecutorTest, BindRejectsWeightsThatDisagreeWithThePlan) {
  auto registry = make_cpu_registry(CpuProviderSet::kBoth);
  ModelProgram p = tiny_program(DType::kF32);
  auto plan = plan_program(p, *registry, PlanOptions{});
  ASSERT_TRUE(plan.is_ok());
  auto device = make_cpu_device();
  auto weights = std::make_unique<WeightStore>();
  std::vector<float> emb(32), norm(5);
  weights->add("emb", TensorView{emb.data(), DType::kF32, {8, 4}});
  weights->add("norm", TensorView{norm.data(), DType::kF32, {5}});
  auto bound = BoundPlan::bind(*plan, p, std::move(weights), *device, ExecContext{device.get()},
                               CacheConfig{});
  ASSERT_FALSE(bound.is_ok());
  EXPECT_NE(bound.status().message().find("'norm'"), std::string::npos);
}

}  // namespace
}  // namespace ferrite
