// routed_swiglu_moe and routed_shared_swiglu_moe on CPU.
//
// Reference: token by token in the order the contracts state it (norm,
// router softmax, top-k, experts in increasing id, shared expert), double
// accumulation.
//
// Fast: the router is one GEMM over all tokens; tokens are then grouped by
// expert (a counting sort: expert-major, tokens in increasing order), and
// every active expert runs its gate/up and down projections once over its
// gathered rows; the (expert, row block) work items of a phase run in one
// parallel region, so a decode step with 8 active experts keeps every core
// busy. Each token's contributions are summed in increasing expert id (as
// transformers' index_add), then the shared expert's, then the residual.
// Every output element is computed by one thread in a fixed order, so
// results do not depend on the thread count or on the batch composition.
#include "contracts/routed_swiglu_moe.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backends/cpu/block_stages.h"
#include "backends/cpu/cpu_providers.h"
#include "backends/cpu/fast_util.h"
#include "backends/cpu/kernels/matmul.h"
#include "backends/cpu/kernels/vec.h"
#include "backends/cpu/reference_math.h"
#include "backends/cpu/weight_product.h"
#include "runtime/workspace.h"
#include "contracts/routed_shared_swiglu_moe.h"

namespace ferrite::cpu {
namespace {

using routed_swiglu_moe::Params;

// The top-k experts of probabilities p (ties: lower id first), returned in
// increasing id order with their (optionally renormalised) weights.
// `order`: scratch of `experts` ints.
void top_k(const float* p, int64_t experts, int64_t k, bool normalize, int32_t* ids,
           float* weights, int32_t* order) {
  std::iota(order, order + experts, 0);
  std::partial_sort(order, order + k, order + experts,
                    [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
  std::sort(order, order + k);
  float sum = 0;
  for (int64_t i = 0; i < k; ++i) sum += p[order[i]];
  for (int64_t i = 0; i < k; ++i) {
    ids[i] = order[i];
    weights[i] = normalize ? p[order[i]] / sum : p[order[i]];
  }
}

class RoutedMoeReference final : public Provider {
 public:
  explicit RoutedMoeReference(bool shared)
      : shared_(shared),
        desc_(with_input_permutation(with_block_formats(cpu_descriptor(
            shared ? "cpu.reference.routed_shared_swiglu_moe" : "cpu.reference.routed_swiglu_moe",
            shared ? routed_shared_swiglu_moe::contract() : routed_swiglu_moe::contract(), kReferencePriority,
            "scalar, token by token")))) {}
  const ProviderDescriptor& descriptor() const override { return desc_; }

  Status encode(const Invocation& inv) const override {
    using namespace routed_swiglu_moe;
    const Params& p = inv.signature->params<Params>();
    const int64_t H = static_cast<int64_t>(p.hidden_size);
    const int64_t E = static_cast<int64_t>(p.num_experts);
    const int64_t K = static_cast<int64_t>(p.top_k);
    const int64_t I = static_cast<int64_t>(p.intermediate_size);
    const int64_t Is = static_cast<int64_t>(p.shared_intermediate_size);
    const auto& b = inv.bindings;
    float* hidden = b[kHidden].as<float>();
    // partial_out (1.1): the block's contribution is written there, hidden only read.
    const size_t partial_index = shared_ ? static_cast<size_t>(routed_shared_swiglu_moe::kPartialOut)
                                         : static_cast<size_t>(routed_swiglu_moe::kPartialOut);
    float* partial = b.size() > partial_index && b[partial_index].data
                         ? b[partial_index].as<float>()
                         : nullptr;
    std::vector<float> n(H), logits(E), prob(E), g(std::max(I, Is)), u(std::max(I, Is)), d(H),
        weights(K);
    std::vector<int32_t> ids(K), order(E);
    std::vector<double> out(H);
    for (int32_t t = 0; t < inv.batch->num_tokens(); ++t) {
      float* row = hidden + t * H;
      ref::rms_norm(row, b[kNorm], H, p.eps, p.zero_centred, n.data());
      ref::matvec(n.data(), b[kRouter], H, E, logits.data());
      double mx = -INFINITY, sum = 0;
      for (float l : logits) mx = std::max<double>(mx, l);
      for (int64_t e = 0; e < E; ++e) sum += std::exp(logits[e] - mx);
      for (int64_t e = 0; e < E; ++e) prob[e] = static_cast<float>(std::exp(logits[e] - mx) / sum);
      top_k(prob.data(), E, K, p.normalize_topk, ids.data(), weights.data(), order.data());
      std::fill(out.begin(), out.end(), 0.0);
      for (int64_t i = 0; i < K; ++i) {
        const int64_t e = ids[i];
        TensorView gate = weight_rows_view(b[kGateUp], e * 2 * I * H, {I, H});
        TensorView up = weight_rows_view(b[kGateUp], (e * 2 + 1) * I * H, {I, H});
        TensorView down = weight_rows_view(b[kDown], e * H * I, {H, I});
        ref::matvec(n.data(), gate, H, I, g.data());
        ref::matvec(n.data(), up, H, I, u.data());
        for (int64_t j = 0; j < I; ++j) g[j] = ref::silu(g[j]) * u[j];
        ref::matvec(g.data(), down, I, H, d.data());
        for (int64_t j = 0; j < H; ++j) out[j] += static_cast<double>(weights[i]) * d[j];
      }
      if (shared_) {
        using namespace routed_shared_swiglu_moe;
        float sg = 0;
        ref::matvec(n.data(), b[kSharedExpertGate], H, 1, &sg);
        sg = ref::sigmoid(sg);
        ref::matvec(n.data(), b[kSharedGate], H, Is, g.data());
        ref::matvec(n.data(), b[kSharedUp], H, Is, u.data());
        for (int64_t j = 0; j < Is; ++j) g[j] = ref::silu(g[j]) * u[j];
        ref::matvec(g.data(), b[kSharedDown], Is, H, d.data());
        for (int64_t j = 0; j < H; ++j) out[j] += static_cast<double>(sg) * d[j];
      }
      for (int64_t j = 0; j < H; ++j)
        if (partial)
          partial[t * H + j] = static_cast<float>(out[j]);
        else
          row[j] = static_cast<float>(row[j] + out[j]);
    }
    return Status::ok();
  }

 private:
  bool shared_;
  ProviderDescriptor desc_;
};

class RoutedMoeFast final : public Provider {
 public:
  explicit RoutedMoeFast(bool shared)
      : shared_(shared),
        desc_(with_input_permutation(with_block_formats(cpu_descriptor(
            shared ? "cpu.fast.routed_shared_swiglu_moe" : "cpu.fast.routed_swiglu_moe",
            shared ? routed_shared_swiglu_moe::contract() : routed_swiglu_moe::contract(), kFastPriority,
            "router GEMM, tokens grouped by expert, SIMD GEMMs")))) {}
  const ProviderDescriptor& descriptor() const override { return desc_; }

  // Work items of the expert products: (expert, output row block).
  struct Item {
    int32_t expert;
    int32_t r0, r1;
  };
  // Items of a product of `rows` output rows: at most one block of >= 16
  // rows per (active expert, 16 rows), and at most min(E, T*K) experts are
  // active.
  static int64_t max_items(const Params& p, int64_t tk, int64_t rows) {
    return std::min<int64_t>(static_cast<int64_t>(p.num_experts), tk) * ((rows + 15) / 16);
  }
  // The workspace pieces of a step of `tokens` tokens (measured with the
  // step limits for workspace_bytes(), carved with the step's by encode()).
  struct Pieces {
    float *n, *logits, *xs, *gu, *ys, *out, *sgu, *sgate, *weights, *acc;
    int32_t *ids, *offset, *fill, *order, *slot_of;
    Item* items;
    int64_t item_capacity;
  };
  Pieces layout(Workspace& ws, const Params& p, int64_t tokens) const {
    const int64_t H = static_cast<int64_t>(p.hidden_size);
    const int64_t E = static_cast<int64_t>(p.num_experts);
    const int64_t TK = tokens * static_cast<int64_t>(p.top_k);
    const int64_t I = static_cast<int64_t>(p.intermediate_size);
    const int64_t Is = static_cast<int64_t>(p.shared_intermediate_size);
    Pieces s;
    s.n = ws.take<float>(tokens * H);
    s.logits = ws.take<float>(tokens * E);
    s.xs = ws.take<float>(TK * H);      // gathered rows, expert-major
    s.gu = ws.take<float>(TK * 2 * I);  // [gate | up] per gathered row
    s.ys = ws.take<float>(TK * H);      // expert outputs per gathered row
    s.out = ws.take<float>(tokens * H);
    s.sgu = shared_ ? ws.take<float>(tokens * 2 * Is) : nullptr;
    s.sgate = shared_ ? ws.take<float>(tokens) : nullptr;
    s.weights = ws.take<float>(TK);
    s.acc = ws.take<float>(tokens * H);  // combine: a row per token
    s.ids = ws.take<int32_t>(TK);
    s.offset = ws.take<int32_t>(E + 1);
    s.fill = ws.take<int32_t>(E);
    s.order = ws.take<int32_t>(E);  // top_k's ranking
    s.slot_of = ws.take<int32_t>(TK);  // (token, k) -> gathered row
    s.item_capacity = std::max(max_items(p, TK, 2 * I), max_items(p, TK, H));
    s.items = ws.take<Item>(s.item_capacity);
    return s;
  }

  int64_t workspace_bytes(const NodeSignature& node, const StepLimits& limits) const override {
    return measure_workspace(
        [&](Workspace& ws) { layout(ws, node.params<Params>(), limits.max_tokens); });
  }

  Status encode(const Invocation& inv) const override {
    using namespace routed_swiglu_moe;
    const Params& p = inv.signature->params<Params>();
    const int64_t H = static_cast<int64_t>(p.hidden_size);
    const int64_t E = static_cast<int64_t>(p.num_experts);
    const int64_t K = static_cast<int64_t>(p.top_k);
    const int64_t I = static_cast<int64_t>(p.intermediate_size);
    const int64_t Is = static_cast<int64_t>(p.shared_intermediate_size);
    const int64_t T = inv.batch->num_tokens();
    const int64_t TK = T * K;
    ThreadPool* pool = inv.ctx->pool;
    const auto& b = inv.bindings;
    float* hidden = b[kHidden].as<float>();
    // partial_out (1.1): the block's contribution is written there, hidden only read.
    const size_t partial_index = shared_ ? static_cast<size_t>(routed_shared_swiglu_moe::kPartialOut)
                                         : static_cast<size_t>(routed_swiglu_moe::kPartialOut);
    float* partial = b.size() > partial_index && b[partial_index].data
                         ? b[partial_index].as<float>()
                         : nullptr;
    Workspace ws(inv);
    const Pieces sc = layout(ws, p, T);
    FERRITE_RETURN_IF_ERROR(ws.status(desc_.name));
    float* n = sc.n;
    float* logits = sc.logits;
    float* xs = sc.xs;
    float* gu = sc.gu;
    float* ys = sc.ys;
    float* out = sc.out;
    float* sgu = sc.sgu;
    float* sgate = sc.sgate;

    normed_projections(hidden, T, H, b[kNorm], static_cast<float>(p.eps), p.zero_centred, n,
                       {{b[kRouter], E, logits}}, pool);

    // Routing: softmax in f32, top-k, grouping by expert.
    int32_t* ids = sc.ids;
    float* weights = sc.weights;
    for (int64_t t = 0; t < T; ++t) {
      float* l = logits + t * E;
      softmax_inplace(l, E);
      top_k(l, E, K, p.normalize_topk, &ids[t * K], &weights[t * K], sc.order);
    }
    int32_t* offset = sc.offset;
    std::fill_n(offset, E + 1, 0);
    for (int64_t i = 0; i < TK; ++i) ++offset[ids[i] + 1];
    for (int64_t e = 0; e < E; ++e) offset[e + 1] += offset[e];
    int32_t* slot_of = sc.slot_of;
    {
      int32_t* fill = sc.fill;
      std::copy_n(offset, E, fill);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t k = 0; k < K; ++k) slot_of[t * K + k] = fill[ids[t * K + k]]++;
    }
    auto gather = [&](int64_t a, int64_t z) {
      for (int64_t i = a; i < z; ++i)
        std::copy_n(n + (i / K) * H, H, xs + static_cast<int64_t>(slot_of[i]) * H);
    };
    if (pool)
      pool->parallel_for(TK, gather, 8);
    else
      gather(0, TK);

    // Work items: (expert, output row block) over the active experts.
    const int64_t threads = pool ? pool->size() : 1;
    struct Items {
      const Item* data;
      int64_t size;
    };
    auto make_items = [&](int64_t rows) {
      int64_t active = 0;
      for (int64_t e = 0; e < E; ++e) active += offset[e + 1] > offset[e];
      const int64_t want = std::max<int64_t>(1, 4 * threads / std::max<int64_t>(active, 1));
      const int64_t block = std::max<int64_t>(16, (rows + want - 1) / want);
      int64_t count = 0;
      for (int64_t e = 0; e < E; ++e) {
        if (offset[e + 1] == offset[e]) continue;
        for (int64_t r = 0; r < rows; r += block) {
          FERRITE_CHECK(count < sc.item_capacity) << "MoE work items exceed their bound";
          sc.items[count++] = {static_cast<int32_t>(e), static_cast<int32_t>(r),
                               static_cast<int32_t>(std::min(rows, r + block))};
        }
      }
      return Items{sc.items, count};
    };
    auto run_items = [&](const Items& items, auto&& fn) {
      auto body = [&](int64_t a, int64_t z) {
        for (int64_t i = a; i < z; ++i) fn(items.data[i]);
      };
      if (pool)
        pool->parallel_for(items.size, body);
      else
        body(0, items.size);
    };
    // Gate/up of every active expert: rows [0, 2I) of its [2, I, H] block.
    run_items(make_items(2 * I), [&](const Item& it) {
      const int64_t r0 = offset[it.expert], rows = offset[it.expert + 1] - r0;
      weight_product_rows(xs + r0 * H, H, rows, H, b[kGateUp], it.expert * 2 * I, it.r0, it.r1,
                          gu + r0 * 2 * I + it.r0, 2 * I, false, nullptr);
    });
    auto act = [&](int64_t a, int64_t z) {
      for (int64_t r = a; r < z; ++r)
        silu_mul(gu + r * 2 * I, gu + r * 2 * I + I, I, gu + r * 2 * I);
    };
    if (pool)
      pool->parallel_for(TK, act, 4);
    else
      act(0, TK);
    run_items(make_items(H), [&](const Item& it) {
      const int64_t r0 = offset[it.expert], rows = offset[it.expert + 1] - r0;
      weight_product_rows(gu + r0 * 2 * I, 2 * I, rows, I, b[kDown], it.expert * H, it.r0, it.r1,
                          ys + r0 * H + it.r0, H, false, nullptr);
    });

    if (shared_) {
      using namespace routed_shared_swiglu_moe;
      weight_product(n, T, H, b[kSharedExpertGate], 1, sgate, false, pool);
      weight_product_rows(n, H, T, H, b[kSharedGate], 0, 0, Is, sgu, 2 * Is, false, pool);
      weight_product_rows(n, H, T, H, b[kSharedUp], 0, 0, Is, sgu + Is, 2 * Is, false, pool);
      for (int64_t t = 0; t < T; ++t)
        silu_mul(sgu + t * 2 * Is, sgu + t * 2 * Is + Is, Is, sgu + t * 2 * Is);
      weight_product_rows(sgu, 2 * Is, T, Is, b[kSharedDown], 0, 0, H, out, H,
                  false, pool);
    }
    // Combine per token: experts in increasing id, then the shared expert,
    // then the residual.
    auto combine = [&](int64_t a, int64_t z) {
      for (int64_t t = a; t < z; ++t) {
        float* acc = sc.acc + t * H;
        std::fill_n(acc, H, 0.0f);
        for (int64_t k = 0; k < K; ++k)
          axpy_f32(weights[t * K + k], ys + static_cast<int64_t>(slot_of[t * K + k]) * H, acc, H);
        if (shared_) axpy_f32(ref::sigmoid(sgate[t]), out + t * H, acc, H);
        if (partial)
          std::copy_n(acc, H, partial + t * H);
        else
          add_f32(acc, hidden + t * H, H);
      }
    };
    if (pool)
      pool->parallel_for(T, combine, 4);
    else
      combine(0, T);
    return Status::ok();
  }

 private:
  bool shared_;
  ProviderDescriptor desc_;
};

}  // namespace

std::unique_ptr<Provider> make_routed_swiglu_moe_reference() {
  return std::make_unique<RoutedMoeReference>(false);
}
std::unique_ptr<Provider> make_routed_shared_swiglu_moe_reference() {
  return std::make_unique<RoutedMoeReference>(true);
}
std::unique_ptr<Provider> make_routed_swiglu_moe_fast() {
  return std::make_unique<RoutedMoeFast>(false);
}
std::unique_ptr<Provider> make_routed_shared_swiglu_moe_fast() {
  return std::make_unique<RoutedMoeFast>(true);
}

}  // namespace ferrite::cpu
