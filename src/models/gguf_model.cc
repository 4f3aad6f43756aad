#include "models/gguf_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>

namespace ferrite {

namespace {

namespace lim = model_limits;
using nlohmann::ordered_json;

// ---------------------------------------------------------------------------
// Architectures

struct ArchInfo {
  const char* gguf;        // general.architecture
  const char* model_type;  // the family's config.json model_type
  bool zero_centred;       // norms stored as 1 + w by the converter
  bool llama_rope_permute; // Q / K rows permuted for ggml's adjacent-pair RoPE
  bool hybrid;             // gated-delta + gated full attention layers
  bool tiled_v_heads;      // value heads reordered grouped -> tiled (Hv > Hk)
};

constexpr ArchInfo kArchs[] = {
    {"llama", "llama", false, true, false, false},
    {"qwen3", "qwen3", false, false, false, false},
    {"qwen3moe", "qwen3_moe", false, false, false, false},
    {"qwen3next", "qwen3_next", true, false, true, false},
    {"qwen35", "qwen3_5_text", true, false, true, true},
    {"qwen35moe", "qwen3_5_moe_text", true, false, true, true},
};

Result<const ArchInfo*> find_arch(const GgufFile& f) {
  if (!f.has("general.architecture"))
    return invalid_argument(f.path() + ": no metadata key 'general.architecture'");
  FERRITE_ASSIGN_OR_RETURN(std::string_view arch, f.get_string("general.architecture"));
  std::string known;
  for (const ArchInfo& a : kArchs) {
    if (arch == a.gguf) return &a;
    known += (known.empty() ? "" : ", ") + std::string(a.gguf);
  }
  return unsupported(fmt::format("{}: architecture '{}' (general.architecture) is not supported "
                                 "(supported: {})",
                                 f.path(), arch, known));
}

// ---------------------------------------------------------------------------
// Metadata, read with the key in every error.

class Meta {
 public:
  Meta(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  std::string key(std::string_view k) const { return arch_ + "." + std::string(k); }
  bool has(std::string_view k) const { return f_.has(key(k)); }

  Result<int64_t> get_int(std::string_view k, int64_t lo, int64_t hi) const {
    const std::string name = key(k);
    if (!f_.has(name)) return invalid_argument(f_.path() + ": no metadata key '" + name + "'");
    FERRITE_ASSIGN_OR_RETURN(int64_t v, f_.get_int(name));
    return in_range(name, v, lo, hi);
  }
  Result<int64_t> get_int_or(std::string_view k, int64_t lo, int64_t hi, int64_t fallback) const {
    if (!has(k)) return fallback;
    return get_int(k, lo, hi);
  }
  // A per-layer value: an integer, or an array of one integer per layer
  // whose non-zero entries agree (llama.cpp writes either).
  Result<int64_t> get_uniform_int(std::string_view k, int64_t lo, int64_t hi) const {
    const std::string name = key(k);
    const GgufValue* v = f_.find(name);
    if (v == nullptr) return invalid_argument(f_.path() + ": no metadata key '" + name + "'");
    if (v->type != GgufType::kArray) return get_int(k, lo, hi);
    FERRITE_ASSIGN_OR_RETURN(auto values, f_.get_int_array(name));
    int64_t out = 0;
    for (int64_t x : values) {
      if (x == 0) continue;
      if (out != 0 && x != out)
        return unsupported(fmt::format("{}: metadata key '{}' has different values per layer "
                                       "({} and {}); Ferrite needs one value for every layer",
                                       f_.path(), name, out, x));
      out = x;
    }
    return in_range(name, out, lo, hi);
  }
  Result<int64_t> get_uniform_int_or(std::string_view k, int64_t lo, int64_t hi,
                                     int64_t fallback) const {
    if (!has(k)) return fallback;
    return get_uniform_int(k, lo, hi);
  }
  Result<double> get_positive_float(std::string_view k) const {
    const std::string name = key(k);
    if (!f_.has(name)) return invalid_argument(f_.path() + ": no metadata key '" + name + "'");
    FERRITE_ASSIGN_OR_RETURN(double v, f_.get_float(name));
    if (!(v > 0) || !std::isfinite(v))
      return invalid_argument(
          fmt::format("{}: metadata key '{}' must be a finite number > 0, got {}", f_.path(),
                      name, v));
    return v;
  }
  Result<double> get_positive_float_or(std::string_view k, double fallback) const {
    if (!has(k)) return fallback;
    return get_positive_float(k);
  }

 private:
  Result<int64_t> in_range(const std::string& name, int64_t v, int64_t lo, int64_t hi) const {
    if (v < lo || v > hi)
      return invalid_argument(fmt::format("{}: metadata key '{}' must be in [{}, {}], got {}",
                                          f_.path(), name, lo, hi, v));
    return v;
  }
  const GgufFile& f_;
  std::string arch_;
};

std::string blk(int64_t layer, std::string_view rest) {
  return fmt::format("blk.{}.{}", layer, rest);
}

// Llama-3 rope scaling: the converter writes no metadata, only the per-pair
// frequency divisors `rope_freqs.weight` computed from (factor, low, high,
// original context). Recovers parameters that reproduce every divisor
// (low_freq_factor 1 and high_freq_factor 4, as every Llama-3 release; the
// divisors depend on the context only through its ratio to them) and
// verifies them; anything else is refused rather than approximated.
Status read_llama3_rope(const GgufModelFile& file, const GgufTensor& t, double theta,
                        int64_t rope_dim, ordered_json* j) {
  const std::string where = file.path() + ": tensor 'rope_freqs.weight'";
  if (t.dtype != DType::kF32 || t.shape.numel() != rope_dim / 2)
    return invalid_argument(fmt::format("{} must be f32 with {} values (rope dimension / 2), got "
                                        "{} {}",
                                        where, rope_dim / 2, dtype_name(t.dtype),
                                        t.shape.to_string()));
  std::vector<double> f(rope_dim / 2), wavelen(rope_dim / 2);
  double factor = 1;
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    float v;
    std::memcpy(&v, t.data + 4 * i, 4);
    if (!(v > 0) || !std::isfinite(v)) return invalid_argument(where + ": divisors must be > 0");
    f[i] = v;
    factor = std::max(factor, f[i]);
    const double freq = 1.0 / std::pow(theta, 2.0 * static_cast<double>(i) / rope_dim);
    wavelen[i] = 2 * M_PI / freq;
  }
  const double low = 1, high = 4;
  // Smoothed pairs (1 < f < factor) give s = (old / wavelen - low) / (high - low)
  // with 1 / f = (1 - s) / factor + s; else any context between the pairs of
  // divisor 1 and those of divisor `factor` does.
  std::optional<double> old;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] > 1 + 1e-6 && f[i] < factor - 1e-6) {
      const double s = (1 / f[i] - 1 / factor) / (1 - 1 / factor);
      old = wavelen[i] * (s * (high - low) + low);
      break;
    }
  }
  if (!old) {
    double lo_w = 0, hi_w = 1e300;  // wavelengths of the last 1 and the first `factor`
    for (size_t i = 0; i < f.size(); ++i) {
      if (f[i] <= 1 + 1e-6) lo_w = std::max(lo_w, wavelen[i]);
      else hi_w = std::min(hi_w, wavelen[i]);
    }
    // high_wavelen = old / high must exceed lo_w; low_wavelen = old / low below hi_w.
    old = std::min(lo_w * high * 1.0001, hi_w * low * 0.9999);
    if (hi_w >= 1e300) old = lo_w * high * 2;
  }
  const double o = std::round(*old);
  for (size_t i = 0; i < f.size(); ++i) {
    const double lw = o / low, hw = o / high;
    double expect;
    if (wavelen[i] < hw) expect = 1;
    else if (wavelen[i] > lw) expect = factor;
    else {
      const double s = (o / wavelen[i] - low) / (high - low);
      expect = 1 / ((1 - s) / factor + s);
    }
    if (std::abs(expect - f[i]) > 1e-4 * f[i])
      return unsupported(where + ": the frequency divisors are not of the Llama-3 form "
                                 "(low_freq_factor 1, high_freq_factor 4)");
  }
  if (factor > 1 + 1e-6) {
    (*j)["rope_scaling"] = {{"rope_type", "llama3"},
                            {"factor", factor},
                            {"low_freq_factor", low},
                            {"high_freq_factor", high},
                            {"original_max_position_embeddings", static_cast<int64_t>(o)}};
  }
  return Status::ok();
}

}  // namespace

// ---------------------------------------------------------------------------
// Files

bool is_gguf_path(const std::string& path) {
  namespace fs = std::filesystem;
  if (path.size() < 5) return false;
  std::string ext = path.substr(path.size() - 5);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  std::error_code ec;
  return ext == ".gguf" && !fs::is_directory(path, ec);
}

Result<std::shared_ptr<GgufModelFile>> GgufModelFile::open(const std::string& path) {
  auto out = std::shared_ptr<GgufModelFile>(new GgufModelFile());
  out->path_ = path;
  FERRITE_ASSIGN_OR_RETURN(GgufFile first, GgufFile::open(path));
  std::vector<std::string> paths = {path};
  int64_t count = 1, index = 0;
  if (first.has("split.count")) {
    FERRITE_ASSIGN_OR_RETURN(count, first.get_int("split.count"));
    if (first.has("split.no")) {
      FERRITE_ASSIGN_OR_RETURN(index, first.get_int("split.no"));
    }
    if (count < 1 || count > 9999 || index < 0 || index >= count)
      return invalid_argument(fmt::format("{}: split.no {} / split.count {} are out of range", path,
                                          index, count));
  }
  if (count > 1) {
    // PREFIX-%05d-of-%05d.gguf (llama.cpp's llama_split_path), numbered from 1.
    static const std::regex kSplit(R"(^(.*)-(\d{5})-of-(\d{5})\.gguf$)", std::regex::icase);
    std::smatch m;
    if (!std::regex_match(path, m, kSplit) || std::stoll(m[3].str()) != count ||
        std::stoll(m[2].str()) != index + 1)
      return invalid_argument(fmt::format(
          "{}: shard {} of a {}-file split GGUF, but the name is not PREFIX-{:05d}-of-{:05d}.gguf",
          path, index + 1, count, index + 1, count));
    paths.clear();
    for (int64_t i = 0; i < count; ++i)
      paths.push_back(fmt::format("{}-{:05d}-of-{:05d}.gguf", m[1].str(), i + 1, count));
  }
  int64_t expected_tensors = -1;
  for (int64_t i = 0; i < count; ++i) {
    std::unique_ptr<GgufFile> shard;
    if (paths[i] == path) {
      shard = std::make_unique<GgufFile>(std::move(first));
    } else {
      FERRITE_ASSIGN_OR_RETURN(GgufFile f, GgufFile::open(paths[i]));
      shard = std::make_unique<GgufFile>(std::move(f));
    }
    if (count > 1) {
      int64_t no = -1;
      if (shard->has("split.no")) {
        FERRITE_ASSIGN_OR_RETURN(no, shard->get_int("split.no"));
      }
      if (no != i)
        return invalid_argument(fmt::format("{}: split.no is {}, expected {}", paths[i], no, i));
      if (shard->has("split.tensors.count") && expected_tensors < 0) {
        FERRITE_ASSIGN_OR_RETURN(expected_tensors, shard->get_int("split.tensors.count"));
      }
    }
    out->shards_.push_back(std::move(shard));
  }
  for (const auto& shard : out->shards_) {
    for (const GgufTensor& t : shard->tensors()) {
      if (!out->tensors_.emplace(t.name, &t).second)
        return invalid_argument(
            fmt::format("{}: tensor '{}' is in more than one shard", shard->path(), t.name));
    }
  }
  if (expected_tensors >= 0 && static_cast<int64_t>(out->tensors_.size()) != expected_tensors)
    return invalid_argument(fmt::format("{}: the {} shards hold {} tensors, split.tensors.count "
                                        "says {}",
                                        path, count, out->tensors_.size(), expected_tensors));
  return out;
}

const GgufTensor* GgufModelFile::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second;
}

// ---------------------------------------------------------------------------
// Metadata -> config.json

Result<std::string> gguf_hf_config_json(const GgufModelFile& file) {
  const GgufFile& f = file.meta();
  FERRITE_ASSIGN_OR_RETURN(const ArchInfo* arch, find_arch(f));
  Meta m(f, arch->gguf);
  ordered_json j;
  j["model_type"] = arch->model_type;
  const GgufTensor* embd = file.find("token_embd.weight");
  if (embd == nullptr || embd->shape.rank() != 2)
    return invalid_argument(file.path() + ": no 2-D tensor 'token_embd.weight'");
  FERRITE_ASSIGN_OR_RETURN(int64_t hidden, m.get_int("embedding_length", 1, lim::kMaxHidden));
  const int64_t vocab = embd->shape[0];
  if (m.has("vocab_size")) {
    FERRITE_ASSIGN_OR_RETURN(int64_t v, m.get_int("vocab_size", 1, lim::kMaxVocab));
    if (v != vocab)
      return invalid_argument(fmt::format("{}: {} is {}, token_embd.weight has {} rows",
                                          file.path(), m.key("vocab_size"), v, vocab));
  }
  j["vocab_size"] = vocab;
  j["hidden_size"] = hidden;
  FERRITE_ASSIGN_OR_RETURN(int64_t blocks, m.get_int("block_count", 1, lim::kMaxLayers));
  FERRITE_ASSIGN_OR_RETURN(int64_t nextn, m.get_int_or("nextn_predict_layers", 0, blocks - 1, 0));
  const int64_t layers = blocks - nextn;  // MTP layers come last and are not used
  j["num_hidden_layers"] = layers;
  FERRITE_ASSIGN_OR_RETURN(int64_t heads, m.get_uniform_int("attention.head_count", 1,
                                                            lim::kMaxHeads));
  FERRITE_ASSIGN_OR_RETURN(int64_t kv_heads, m.get_uniform_int_or("attention.head_count_kv", 1,
                                                                  heads, heads));
  j["num_attention_heads"] = heads;
  j["num_key_value_heads"] = kv_heads;
  int64_t head_dim = hidden / heads;
  if (m.has("attention.key_length")) {
    FERRITE_ASSIGN_OR_RETURN(head_dim, m.get_int("attention.key_length", 1, lim::kMaxHeadDim));
    FERRITE_ASSIGN_OR_RETURN(int64_t vl, m.get_int_or("attention.value_length", 1,
                                                      lim::kMaxHeadDim, head_dim));
    if (vl != head_dim)
      return unsupported(fmt::format("{}: key_length {} and value_length {} differ", file.path(),
                                     head_dim, vl));
  } else if (hidden % heads != 0) {
    return invalid_argument(fmt::format("{}: embedding_length {} is not a multiple of {} heads",
                                        file.path(), hidden, heads));
  }
  j["head_dim"] = head_dim;
  FERRITE_ASSIGN_OR_RETURN(int64_t ff, m.get_uniform_int_or("feed_forward_length", 0,
                                                            lim::kMaxIntermediate, 0));
  j["intermediate_size"] = ff;
  FERRITE_ASSIGN_OR_RETURN(int64_t ctx, m.get_int_or("context_length", 1, lim::kMaxPositions,
                                                     4096));
  j["max_position_embeddings"] = ctx;
  FERRITE_ASSIGN_OR_RETURN(double eps, m.get_positive_float("attention.layer_norm_rms_epsilon"));
  j["rms_norm_eps"] = eps;
  FERRITE_ASSIGN_OR_RETURN(double theta, m.get_positive_float_or("rope.freq_base", 10000.0));
  j["rope_theta"] = theta;
  FERRITE_ASSIGN_OR_RETURN(int64_t rope_dim, m.get_int_or("rope.dimension_count", 2, head_dim,
                                                          head_dim));
  // int(head_dim * factor) must give rope_dim back (parse_model_config).
  j["partial_rotary_factor"] =
      rope_dim == head_dim ? 1.0 : (static_cast<double>(rope_dim) + 0.25) / head_dim;
  if (m.has("rope.scaling.type")) {
    FERRITE_ASSIGN_OR_RETURN(std::string_view type, f.get_string(m.key("rope.scaling.type")));
    if (type == "linear") {
      FERRITE_ASSIGN_OR_RETURN(double factor, m.get_positive_float("rope.scaling.factor"));
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", factor}};
    } else if (type != "none") {
      return unsupported(fmt::format("{}: rope scaling '{}' ({}) is not supported (none, linear, "
                                     "llama3 frequency factors)",
                                     file.path(), type, m.key("rope.scaling.type")));
    }
  }
  if (const GgufTensor* freqs = file.find("rope_freqs.weight")) {
    if (j.contains("rope_scaling"))
      return unsupported(file.path() + ": rope_freqs.weight together with rope.scaling.type");
    FERRITE_RETURN_IF_ERROR(read_llama3_rope(file, *freqs, theta, rope_dim, &j));
  }
  j["tie_word_embeddings"] = file.find("output.weight") == nullptr;
  bool bias = false;
  for (int64_t i = 0; i < layers; ++i) bias = bias || file.find(blk(i, "attn_q.bias")) != nullptr;
  j["attention_bias"] = bias;
  for (const char* k : {"bos", "eos"}) {
    const std::string key = fmt::format("tokenizer.ggml.{}_token_id", k);
    if (!f.has(key)) continue;
    FERRITE_ASSIGN_OR_RETURN(int64_t id, f.get_int(key));
    if (id < 0 || id >= vocab)
      return invalid_argument(fmt::format("{}: {} {} is outside the vocabulary of {}",
                                          file.path(), key, id, vocab));
    j[fmt::format("{}_token_id", k)] = id;
  }

  FERRITE_ASSIGN_OR_RETURN(int64_t experts, m.get_int_or("expert_count", 0, lim::kMaxExperts, 0));
  if (experts > 0) {
    j["num_experts"] = experts;
    FERRITE_ASSIGN_OR_RETURN(int64_t used, m.get_int("expert_used_count", 1, experts));
    j["num_experts_per_tok"] = used;
    FERRITE_ASSIGN_OR_RETURN(int64_t eff, m.get_uniform_int("expert_feed_forward_length", 1,
                                                            lim::kMaxIntermediate));
    j["moe_intermediate_size"] = eff;
    FERRITE_ASSIGN_OR_RETURN(int64_t sff, m.get_int_or("expert_shared_feed_forward_length", 0,
                                                       lim::kMaxIntermediate, 0));
    j["shared_expert_intermediate_size"] = sff;
    // llama.cpp renormalises the top-k weights for these architectures.
    bool norm = true;
    if (m.has("expert_weights_norm")) {
      FERRITE_ASSIGN_OR_RETURN(norm, f.get_bool(m.key("expert_weights_norm")));
    }
    j["norm_topk_prob"] = norm;
    if (m.has("expert_gating_func")) {
      FERRITE_ASSIGN_OR_RETURN(int64_t g, m.get_int("expert_gating_func", 0, 1000));
      if (g != 1)  // LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX
        return unsupported(fmt::format("{}: {} {} (only softmax routing, 1, is supported)",
                                       file.path(), m.key("expert_gating_func"), g));
    }
    if (m.has("expert_weights_scale")) {
      FERRITE_ASSIGN_OR_RETURN(double s, m.get_positive_float("expert_weights_scale"));
      if (s != 1.0)
        return unsupported(fmt::format("{}: {} {} (only 1 is supported)", file.path(),
                                       m.key("expert_weights_scale"), s));
    }
    // Dense layers are those without a router.
    ordered_json dense = ordered_json::array();
    for (int64_t i = 0; i < layers; ++i)
      if (file.find(blk(i, "ffn_gate_inp.weight")) == nullptr) dense.push_back(i);
    j["mlp_only_layers"] = dense;
  }
  if (arch->hybrid) {
    FERRITE_ASSIGN_OR_RETURN(int64_t kernel, m.get_int("ssm.conv_kernel", 1, lim::kMaxConvKernel));
    FERRITE_ASSIGN_OR_RETURN(int64_t dk, m.get_int("ssm.state_size", 1, lim::kMaxHeadDim));
    FERRITE_ASSIGN_OR_RETURN(int64_t hk, m.get_int("ssm.group_count", 1, lim::kMaxHeads));
    FERRITE_ASSIGN_OR_RETURN(int64_t hv, m.get_int("ssm.time_step_rank", 1, lim::kMaxHeads));
    FERRITE_ASSIGN_OR_RETURN(int64_t inner, m.get_int("ssm.inner_size", 1, lim::kMaxHidden));
    if (inner % hv != 0)
      return invalid_argument(fmt::format("{}: {} {} is not a multiple of {} {}", file.path(),
                                          m.key("ssm.inner_size"), inner,
                                          m.key("ssm.time_step_rank"), hv));
    j["linear_conv_kernel_dim"] = kernel;
    j["linear_key_head_dim"] = dk;
    j["linear_value_head_dim"] = inner / hv;
    j["linear_num_key_heads"] = hk;
    j["linear_num_value_heads"] = hv;
    // Full-attention layers are those with a q projection.
    ordered_json types = ordered_json::array();
    for (int64_t i = 0; i < layers; ++i)
      types.push_back(file.find(blk(i, "attn_q.weight")) ? "full_attention" : "linear_attention");
    j["layer_types"] = types;
  }
  return j.dump();
}

// ---------------------------------------------------------------------------
// Weights

namespace {

// A run of rows (first dimension) of a file tensor.
struct Piece {
  const GgufTensor* tensor = nullptr;
  int64_t row_begin = 0;
  int64_t rows = 0;
};

enum class Elementwise { kNone, kMinusOne, kLogOfNegated };

// How one program weight is made: the pieces' rows concatenated, then rows
// permuted, then an elementwise f32 transform.
struct WeightPlan {
  Shape shape;
  DType dtype = DType::kF32;
  std::vector<Piece> pieces;
  std::vector<int64_t> row_perm;  // out row r = in row row_perm[r]
  Elementwise op = Elementwise::kNone;
  bool zero_copy() const {
    return pieces.size() == 1 && pieces[0].row_begin == 0 &&
           pieces[0].rows == (pieces[0].tensor->shape.rank() ? pieces[0].tensor->shape[0] : 1) &&
           row_perm.empty() && op == Elementwise::kNone;
  }
};

}  // namespace

struct GgufWeights {
  std::shared_ptr<GgufModelFile> file;
  std::map<std::string, WeightPlan> plans;
};

namespace {

// Leading 1-dims do not change the layout: [H] and [1, H] are one tensor.
Shape squeeze(const Shape& s) {
  Shape out;
  int i = 0;
  while (i + 1 < s.rank() && s[i] == 1) ++i;
  for (; i < s.rank(); ++i) out.push_back(s[i]);
  return out;
}

int64_t rows_of(const GgufTensor& t) { return t.shape.rank() == 0 ? 1 : t.shape[0]; }

class Planner {
 public:
  Planner(const GgufModelFile& file, const ArchInfo& arch, const ModelConfig& c)
      : file_(file), arch_(arch), c_(c) {}

  std::vector<std::string> problems;

  // The first present tensor of `names`; a problem naming the first when
  // none is.
  const GgufTensor* need(std::initializer_list<std::string> names, const std::string& for_weight,
                         const Shape& expected) {
    for (const std::string& n : names) {
      if (const GgufTensor* t = file_.find(n)) {
        if (squeeze(t->shape) != squeeze(expected)) {
          problems.push_back(fmt::format("tensor '{}' has shape {}, {} needs {}", n,
                                         t->shape.to_string(), for_weight, expected.to_string()));
          return nullptr;
        }
        return t;
      }
    }
    problems.push_back(fmt::format("missing tensor '{}' (for {} {})", *names.begin(), for_weight,
                                   expected.to_string()));
    return nullptr;
  }

  // Plans weight `w` (its Hugging Face name and shape) onto the file.
  std::optional<WeightPlan> plan(const WeightDecl& w) {
    const std::string& n = w.name;
    const std::string pre = c_.weight_prefix;
    if (n == pre + "embed_tokens.weight") return whole(w, {"token_embd.weight"});
    if (n == pre + "norm.weight") return norm(w, {"output_norm.weight"});
    if (n == "lm_head.weight") return whole(w, {"output.weight"});
    const std::string lp = pre + "layers.";
    if (n.compare(0, lp.size(), lp) != 0) return unknown(w);
    size_t dot = n.find('.', lp.size());
    if (dot == std::string::npos) return unknown(w);
    const int64_t layer = std::stoll(n.substr(lp.size(), dot - lp.size()));
    const std::string rest = n.substr(dot + 1);
    auto b = [&](std::string_view s) { return blk(layer, s); };

    if (rest == "input_layernorm.weight") return norm(w, {b("attn_norm.weight")});
    if (rest == "post_attention_layernorm.weight")
      return norm(w, {b("ffn_norm.weight"), b("post_attention_norm.weight")});
    if (rest == "self_attn.q_norm.weight") return norm(w, {b("attn_q_norm.weight")});
    if (rest == "self_attn.k_norm.weight") return norm(w, {b("attn_k_norm.weight")});
    if (rest == "self_attn.q_proj.weight" || rest == "self_attn.q_proj.bias")
      return rope_rows(w, b(rest.ends_with("bias") ? "attn_q.bias" : "attn_q.weight"),
                       c_.num_heads);
    if (rest == "self_attn.k_proj.weight" || rest == "self_attn.k_proj.bias")
      return rope_rows(w, b(rest.ends_with("bias") ? "attn_k.bias" : "attn_k.weight"),
                       c_.num_kv_heads);
    if (rest == "self_attn.v_proj.weight") return whole(w, {b("attn_v.weight")});
    if (rest == "self_attn.v_proj.bias") return whole(w, {b("attn_v.bias")});
    if (rest == "self_attn.o_proj.weight") return whole(w, {b("attn_output.weight")});
    if (rest == "mlp.gate_proj.weight") return whole(w, {b("ffn_gate.weight")});
    if (rest == "mlp.up_proj.weight") return whole(w, {b("ffn_up.weight")});
    if (rest == "mlp.down_proj.weight") return whole(w, {b("ffn_down.weight")});
    if (rest == "mlp.gate.weight") return whole(w, {b("ffn_gate_inp.weight")});
    if (rest == "mlp.shared_expert_gate.weight") return whole(w, {b("ffn_gate_inp_shexp.weight")});
    if (rest == "mlp.shared_expert.gate_proj.weight") return whole(w, {b("ffn_gate_shexp.weight")});
    if (rest == "mlp.shared_expert.up_proj.weight") return whole(w, {b("ffn_up_shexp.weight")});
    if (rest == "mlp.shared_expert.down_proj.weight") return whole(w, {b("ffn_down_shexp.weight")});
    if (rest == "mlp.experts.down_proj") return whole(w, {b("ffn_down_exps.weight")});
    if (rest == "mlp.experts.gate_up_proj") return experts_gate_up(w, layer);
    if (rest.starts_with("linear_attn.")) return linear_attn(w, layer, rest.substr(12));
    return unknown(w);
  }

 private:
  std::optional<WeightPlan> unknown(const WeightDecl& w) {
    problems.push_back(fmt::format("no GGUF tensor is known for {}", w.name));
    return std::nullopt;
  }

  std::optional<WeightPlan> whole(const WeightDecl& w, std::initializer_list<std::string> names) {
    const GgufTensor* t = need(names, w.name, w.shape);
    if (!t) return std::nullopt;
    WeightPlan p;
    p.shape = w.shape;
    p.dtype = t->dtype;
    p.pieces = {{t, 0, rows_of(*t)}};
    return p;
  }

  // Norms: zero-centred ones were stored as 1 + w.
  std::optional<WeightPlan> norm(const WeightDecl& w, std::initializer_list<std::string> names) {
    auto p = whole(w, names);
    if (p && arch_.zero_centred) set_op(&*p, Elementwise::kMinusOne, w.name);
    return p;
  }

  void set_op(WeightPlan* p, Elementwise op, const std::string& for_weight) {
    const DType d = p->pieces.at(0).tensor->dtype;
    if (d != DType::kF32 && d != DType::kF16 && d != DType::kBF16) {
      problems.push_back(fmt::format("tensor '{}' for {} is {}; it must be f32, f16 or bf16",
                                     p->pieces[0].tensor->name, for_weight, dtype_name(d)));
      return;
    }
    p->op = op;
    p->dtype = DType::kF32;
  }

  // Llama's converter permuted Q / K rows per head from the half-split order
  // (i, i + hd/2) into adjacent pairs (2i, 2i + 1); put them back.
  std::optional<WeightPlan> rope_rows(const WeightDecl& w, const std::string& name,
                                      int64_t heads) {
    auto p = whole(w, {name});
    if (!p || !arch_.llama_rope_permute) return p;
    const int64_t rows = w.shape[0];
    if (rows % (2 * heads) != 0) {
      problems.push_back(fmt::format("{} has {} rows, not a multiple of 2 x {} heads", name, rows,
                                     heads));
      return std::nullopt;
    }
    const int64_t hd = rows / heads, half = hd / 2;
    p->row_perm.resize(rows);
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t j = 0; j < 2; ++j)
        for (int64_t i = 0; i < half; ++i) p->row_perm[h * hd + j * half + i] = h * hd + 2 * i + j;
    return p;
  }

  // [E, 2, I, H]: one packed tensor, or gate and up stacked per expert.
  std::optional<WeightPlan> experts_gate_up(const WeightDecl& w, int64_t layer) {
    const int64_t E = w.shape[0], I = w.shape[2], H = w.shape[3];
    if (const GgufTensor* t = file_.find(blk(layer, "ffn_gate_up_exps.weight")))
      return whole(w, {t->name});
    const GgufTensor* g = need({blk(layer, "ffn_gate_exps.weight")}, w.name, {E, I, H});
    const GgufTensor* u = need({blk(layer, "ffn_up_exps.weight")}, w.name, {E, I, H});
    if (!g || !u) return std::nullopt;
    if (g->dtype != u->dtype) {
      problems.push_back(fmt::format("{} and {} differ in type ({} and {})", g->name, u->name,
                                     dtype_name(g->dtype), dtype_name(u->dtype)));
      return std::nullopt;
    }
    WeightPlan p;
    p.shape = w.shape;
    p.dtype = g->dtype;
    for (int64_t e = 0; e < E; ++e) {
      p.pieces.push_back({g, e, 1});
      p.pieces.push_back({u, e, 1});
    }
    return p;
  }

  // Gated DeltaNet tensors.
  std::optional<WeightPlan> linear_attn(const WeightDecl& w, int64_t layer,
                                        const std::string& rest) {
    auto b = [&](std::string_view s) { return blk(layer, s); };
    const JsonConfig& j = *c_.json;
    const int64_t Hk = j.get_int("linear_num_key_heads").value();
    const int64_t Hv = j.get_int("linear_num_value_heads").value();
    const int64_t dk = j.get_int("linear_key_head_dim").value();
    const int64_t dv = j.get_int("linear_value_head_dim").value();
    const int64_t r = Hv / Hk;
    // Qwen3.5's converter stores value heads in tiled order (head i Hk + g
    // of key head g): kept as they are, the node reads them so
    // (tiled_value_heads, set in open_gguf_model).
    if (rest == "in_proj_qkv.weight") {
      if (file_.find(b("attn_qkv.weight")) == nullptr && file_.find(b("ssm_in.weight")))
        return legacy_qkvz(w, layer, Hk, dk, r * dv, /*z=*/false);
      return whole(w, {b("attn_qkv.weight")});
    }
    if (rest == "in_proj_z.weight") {
      if (file_.find(b("attn_gate.weight")) == nullptr && file_.find(b("ssm_in.weight")))
        return legacy_qkvz(w, layer, Hk, dk, r * dv, /*z=*/true);
      return whole(w, {b("attn_gate.weight")});
    }
    if (rest == "in_proj_b.weight" || rest == "in_proj_a.weight") {
      const bool is_a = rest == "in_proj_a.weight";
      if (const GgufTensor* ba = file_.find(b("ssm_ba.weight"))) {
        // Qwen3-Next: per key head g, b_g (r rows) then a_g (r rows).
        if (!need({ba->name}, w.name, {2 * Hv, c_.hidden_size})) return std::nullopt;
        WeightPlan p;
        p.shape = w.shape;
        p.dtype = ba->dtype;
        for (int64_t g = 0; g < Hk; ++g) p.pieces.push_back({ba, g * 2 * r + (is_a ? r : 0), r});
        return p;
      }
      return whole(w, {b(is_a ? "ssm_alpha.weight" : "ssm_beta.weight")});
    }
    if (rest == "conv1d.weight") return whole(w, {b("ssm_conv1d.weight")});
    if (rest == "A_log") {
      auto p = whole(w, {b("ssm_a")});
      if (p) set_op(&*p, Elementwise::kLogOfNegated, w.name);
      return p;
    }
    if (rest == "dt_bias") return whole(w, {b("ssm_dt.bias")});
    if (rest == "norm.weight") return whole(w, {b("ssm_norm.weight")});
    if (rest == "out_proj.weight") return whole(w, {b("ssm_out.weight")});
    return unknown(w);
  }

  // Older Qwen3-Next GGUFs keep in_proj_qkvz as `ssm_in` (grouped per key
  // head: q_g, k_g, v_g (rv rows), z_g (rv rows)).
  std::optional<WeightPlan> legacy_qkvz(const WeightDecl& w, int64_t layer, int64_t Hk,
                                        int64_t dk, int64_t rv, bool z) {
    const int64_t stride = 2 * dk + 2 * rv;
    const GgufTensor* t = need({blk(layer, "ssm_in.weight")}, w.name, {Hk * stride,
                                                                       c_.hidden_size});
    if (!t) return std::nullopt;
    WeightPlan p;
    p.shape = w.shape;
    p.dtype = t->dtype;
    if (z) {
      for (int64_t g = 0; g < Hk; ++g) p.pieces.push_back({t, g * stride + 2 * dk + rv, rv});
    } else {
      for (int64_t g = 0; g < Hk; ++g) p.pieces.push_back({t, g * stride, dk});
      for (int64_t g = 0; g < Hk; ++g) p.pieces.push_back({t, g * stride + dk, dk});
      for (int64_t g = 0; g < Hk; ++g) p.pieces.push_back({t, g * stride + 2 * dk, rv});
    }
    return p;
  }

  const GgufModelFile& file_;
  const ArchInfo& arch_;
  const ModelConfig& c_;
};

int64_t row_bytes_of(const GgufTensor& t) {
  const int64_t rows = rows_of(t);
  return rows == 0 ? 0 : t.nbytes / rows;
}

// Builds one weight of `p` into `dst` (dtype_bytes(p.dtype, numel) bytes).
void build_weight(const WeightPlan& p, uint8_t* dst) {
  // 1. Concatenate the pieces' rows (in the stored type).
  const int64_t numel = p.shape.numel();
  const DType src_dtype = p.pieces[0].tensor->dtype;
  const int64_t src_bytes = dtype_bytes(src_dtype, numel);
  std::vector<uint8_t> staged;
  const bool transform = p.op != Elementwise::kNone || !p.row_perm.empty();
  uint8_t* cat = transform ? (staged.resize(src_bytes), staged.data()) : dst;
  int64_t off = 0;
  for (const Piece& piece : p.pieces) {
    const int64_t rb = row_bytes_of(*piece.tensor);
    std::memcpy(cat + off, piece.tensor->data + piece.row_begin * rb, piece.rows * rb);
    off += piece.rows * rb;
  }
  FERRITE_CHECK(off == src_bytes);
  if (!transform) return;
  // 2. Rows, still in the stored type.
  const int64_t rows = p.shape.rank() == 0 ? 1 : p.shape[0];
  const int64_t row_bytes = rows == 0 ? 0 : src_bytes / rows;
  std::vector<uint8_t> moved(src_bytes);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t from = p.row_perm.empty() ? r : p.row_perm[r];
    const uint8_t* in = cat + from * row_bytes;
    uint8_t* out = moved.data() + r * row_bytes;
    std::memcpy(out, in, row_bytes);
  }
  // 3. The elementwise transform (f32 out), or the result as it is.
  if (p.op == Elementwise::kNone) {
    std::memcpy(dst, moved.data(), src_bytes);
    return;
  }
  for (int64_t i = 0; i < numel; ++i) {
    const float x = load_as_f32(moved.data(), src_dtype, i);
    const float y = p.op == Elementwise::kMinusOne ? x - 1.0f : std::log(-x);
    store_from_f32(dst, DType::kF32, i, y);
  }
}

}  // namespace

Result<ModelSource> open_gguf_model(const LoadOptions& options) {
  const std::string& path = options.model_dir;
  FERRITE_ASSIGN_OR_RETURN(std::shared_ptr<GgufModelFile> file, GgufModelFile::open(path));
  FERRITE_ASSIGN_OR_RETURN(const ArchInfo* arch, find_arch(file->meta()));
  FERRITE_ASSIGN_OR_RETURN(std::string config_text, gguf_hf_config_json(*file));
  FERRITE_ASSIGN_OR_RETURN(JsonConfig json, JsonConfig::parse(config_text, path));
  ModelSource src;
  FERRITE_ASSIGN_OR_RETURN(src.config, parse_model_config(json));
  FERRITE_ASSIGN_OR_RETURN(src.family, find_family(src.config.model_type));
  ProgramOptions po = options.program;
  po.weight_dtype = options.dummy_weights ? options.dummy_dtype : DType::kF32;
  if (po.max_context > src.config.max_position_embeddings && !po.allow_long_context)
    po.max_context = src.config.max_position_embeddings;
  FERRITE_ASSIGN_OR_RETURN(src.program, src.family->build(src.config, po));
  if (arch->tiled_v_heads) {
    // The file's value heads stay in the converter's tiled order.
    for (ProgramNode& n : src.program.nodes)
      if (n.contract_id == "gated_delta_recurrent_attention") n.attrs.set("tiled_value_heads", true);
  }
  if (options.dummy_weights) return src;

  auto weights = std::make_shared<GgufWeights>();
  weights->file = file;
  Planner planner(*file, *arch, src.config);
  for (WeightDecl& w : src.program.weights) {
    std::optional<WeightPlan> p = planner.plan(w);
    if (!p) continue;
    w.dtype = p->dtype;
    w.sources.clear();  // the plan replaces the safetensors slices
    weights->plans.emplace(w.name, std::move(*p));
  }
  if (!planner.problems.empty()) {
    std::string msg = fmt::format("{} does not hold the {} model its metadata describes ({} "
                                  "problem{}):",
                                  path, arch->gguf, planner.problems.size(),
                                  planner.problems.size() == 1 ? "" : "s");
    const size_t shown = std::min<size_t>(planner.problems.size(), 20);
    for (size_t i = 0; i < shown; ++i) msg += "\n  - " + planner.problems[i];
    if (shown < planner.problems.size())
      msg += fmt::format("\n  ... and {} more", planner.problems.size() - shown);
    return invalid_argument(msg);
  }
  src.gguf = std::move(weights);
  return src;
}

Result<std::unique_ptr<WeightStore>> materialize_gguf_weights(const ModelSource& src,
                                                              Device& device) {
  FERRITE_CHECK(src.gguf != nullptr);
  auto store = std::make_unique<WeightStore>();
  store->keep_alive(src.gguf);
  for (const WeightDecl& w : src.program.weights) {
    const WeightPlan& p = src.gguf->plans.at(w.name);
    if (p.zero_copy() && device.host_accessible() &&
        reinterpret_cast<uintptr_t>(p.pieces[0].tensor->data) % 16 == 0) {
      store->add(w.name, TensorView{const_cast<uint8_t*>(p.pieces[0].tensor->data), p.dtype,
                                    w.shape});
      continue;
    }
    const int64_t bytes = dtype_bytes(p.dtype, w.shape.numel());
    FERRITE_ASSIGN_OR_RETURN(auto buf, DeviceBuffer::allocate(device, bytes));
    if (device.host_accessible()) {
      build_weight(p, static_cast<uint8_t*>(buf.data()));
    } else {
      std::vector<uint8_t> host(bytes);
      build_weight(p, host.data());
      FERRITE_RETURN_IF_ERROR(device.copy_to_device(buf.data(), host.data(), bytes));
    }
    store->add(w.name, TensorView{buf.data(), p.dtype, w.shape});
    store->own(std::move(buf));
  }
  return store;
}

}  // namespace ferrite
