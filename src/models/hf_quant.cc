#include "models/hf_quant.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "tensor/dtype.h"

namespace ferrite {

namespace {

using Kind = HfQuantScheme::Kind;
using quant::kQKHf;

constexpr const char* kSupported =
    "supported: fp8 (e4m3, weight_block_size [128, 128] or per tensor, dynamic activations), "
    "compressed-tensors (float-quantized FP8 per channel / tensor / block, pack-quantized int4 "
    "W4A16), gptq (4-bit), awq (4-bit GEMM)";

Status unsupported_variant(const JsonConfig& q, const std::string& what) {
  return unsupported(fmt::format("{}: quantization_config: {} is not supported ({})", q.source(),
                                 what, kSupported));
}

// Group sizes the u4_g128 blocks represent: a multiple of 128, or -1 (one
// group per row; the rows must then be whole 128-element blocks).
Status check_group(const JsonConfig& q, const char* key, int64_t g) {
  if (g == -1 || (g > 0 && g % kQKHf == 0)) return Status::ok();
  return unsupported_variant(
      q, fmt::format("{} {} (groups of 128 or a multiple, or -1 / per channel)", key, g));
}

Result<HfQuantScheme> parse_fp8(const JsonConfig& q) {
  HfQuantScheme s;
  s.kind = Kind::kFp8;
  s.method = "fp8";
  FERRITE_ASSIGN_OR_RETURN(std::string fmt_name, q.get_string_or("fmt", "e4m3"));
  if (fmt_name != "e4m3") return unsupported_variant(q, "fp8 fmt '" + fmt_name + "'");
  FERRITE_ASSIGN_OR_RETURN(std::string act, q.get_string_or("activation_scheme", "dynamic"));
  if (act != "dynamic")
    return unsupported_variant(q, "fp8 activation_scheme '" + act + "' (static input scales)");
  if (q.has("weight_block_size")) {
    FERRITE_ASSIGN_OR_RETURN(auto bs, q.get_int_list("weight_block_size"));
    if (bs.size() != 2 || bs[0] <= 0 || bs[1] <= 0 || bs[1] % kQKHf != 0)
      return unsupported_variant(q, "fp8 weight_block_size " + q.dump("weight_block_size") +
                                        " (blocks of [rows, 128 x k])");
    s.description = fmt::format("fp8 e4m3, {}x{} blocks", bs[0], bs[1]);
  } else {
    s.description = "fp8 e4m3, per-tensor scales";
  }
  return s;
}

Result<HfQuantScheme> parse_gptq(const JsonConfig& q) {
  HfQuantScheme s;
  s.kind = Kind::kGptq;
  s.method = "gptq";
  FERRITE_ASSIGN_OR_RETURN(int64_t bits, q.get_int("bits"));
  if (bits != 4) return unsupported_variant(q, fmt::format("gptq bits {} (4)", bits));
  FERRITE_ASSIGN_OR_RETURN(s.group_size, q.get_int_or("group_size", 128));
  FERRITE_RETURN_IF_ERROR(check_group(q, "group_size", s.group_size));
  FERRITE_ASSIGN_OR_RETURN(s.symmetric, q.get_bool_or("sym", true));
  FERRITE_ASSIGN_OR_RETURN(bool desc_act, q.get_bool_or("desc_act", false));
  FERRITE_ASSIGN_OR_RETURN(std::string ckpt_format, q.get_string_or("checkpoint_format", "gptq"));
  if (ckpt_format == "gptq") {
    s.gptq_v1_zeros = true;
  } else if (ckpt_format == "gptq_v2") {
    s.gptq_v1_zeros = false;
  } else {
    return unsupported_variant(q, "gptq checkpoint_format '" + ckpt_format + "' (gptq, gptq_v2)");
  }
  s.description = fmt::format("gptq int4, {}, {}{}{}",
                              s.group_size < 0 ? "per channel" : fmt::format("group {}", s.group_size),
                              s.symmetric ? "sym" : "zero points", desc_act ? ", desc_act" : "",
                              s.gptq_v1_zeros ? "" : ", v2 zeros");
  return s;
}

Result<HfQuantScheme> parse_awq(const JsonConfig& q) {
  HfQuantScheme s;
  s.kind = Kind::kAwq;
  s.method = "awq";
  s.symmetric = false;
  int64_t bits = 4;
  for (const char* k : {"bits", "w_bit"}) {
    if (q.has(k)) {
      FERRITE_ASSIGN_OR_RETURN(bits, q.get_int(k));
    }
  }
  if (bits != 4) return unsupported_variant(q, fmt::format("awq bits {} (4)", bits));
  for (const char* k : {"group_size", "q_group_size"}) {
    if (q.has(k)) {
      FERRITE_ASSIGN_OR_RETURN(s.group_size, q.get_int(k));
    }
  }
  FERRITE_RETURN_IF_ERROR(check_group(q, "group_size", s.group_size));
  FERRITE_ASSIGN_OR_RETURN(bool zero_point, q.get_bool_or("zero_point", true));
  if (!zero_point) return unsupported_variant(q, "awq zero_point false");
  FERRITE_ASSIGN_OR_RETURN(std::string version, q.get_string_or("version", "gemm"));
  std::transform(version.begin(), version.end(), version.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (version != "gemm")
    return unsupported_variant(q, "awq version '" + version + "' (gemm)");
  s.description = fmt::format("awq int4 gemm, {}",
                              s.group_size < 0 ? "per channel" : fmt::format("group {}", s.group_size));
  return s;
}

Result<HfQuantScheme> parse_compressed_tensors(const JsonConfig& q) {
  HfQuantScheme s;
  s.method = "compressed-tensors";
  FERRITE_ASSIGN_OR_RETURN(std::string format, q.get_string_or("format", ""));
  FERRITE_ASSIGN_OR_RETURN(std::string status, q.get_string_or("quantization_status", "compressed"));
  if (status != "compressed")
    return unsupported_variant(q, "compressed-tensors quantization_status '" + status +
                                      "' (compressed)");
  if (q.has("sparsity_config")) {
    FERRITE_ASSIGN_OR_RETURN(JsonConfig sp, q.get_object("sparsity_config"));
    FERRITE_ASSIGN_OR_RETURN(std::string sf, sp.get_string_or("format", "dense"));
    if (sf != "dense") return unsupported_variant(q, "compressed-tensors sparsity '" + sf + "'");
  }
  if (q.has("kv_cache_scheme")) return unsupported_variant(q, "compressed-tensors kv_cache_scheme");
  FERRITE_ASSIGN_OR_RETURN(JsonConfig groups, q.get_object("config_groups"));
  std::optional<HfQuantScheme> found;
  std::string found_key;
  for (const std::string& key : groups.keys()) {
    FERRITE_ASSIGN_OR_RETURN(JsonConfig g, groups.get_object(key));
    FERRITE_ASSIGN_OR_RETURN(JsonConfig w, g.get_object("weights"));
    FERRITE_ASSIGN_OR_RETURN(std::string type, w.get_string("type"));
    FERRITE_ASSIGN_OR_RETURN(int64_t bits, w.get_int("num_bits"));
    FERRITE_ASSIGN_OR_RETURN(std::string strategy, w.get_string("strategy"));
    FERRITE_ASSIGN_OR_RETURN(bool sym, w.get_bool_or("symmetric", true));
    FERRITE_ASSIGN_OR_RETURN(bool dynamic, w.get_bool_or("dynamic", false));
    if (dynamic) return unsupported_variant(q, "compressed-tensors dynamic weights");
    HfQuantScheme g_s = s;
    if (type == "float" && bits == 8) {
      if (strategy != "channel" && strategy != "tensor" && strategy != "block")
        return unsupported_variant(q, "compressed-tensors fp8 weight strategy '" + strategy +
                                          "' (channel, tensor, block)");
      if (!sym) return unsupported_variant(q, "compressed-tensors fp8 with zero points");
      if (format != "float-quantized" && format != "naive-quantized")
        return unsupported_variant(q, "compressed-tensors fp8 in format '" + format +
                                          "' (float-quantized)");
      g_s.kind = Kind::kFp8;
      g_s.description = "compressed-tensors fp8 e4m3, " + strategy + " scales";
    } else if (type == "int" && bits == 4) {
      if (format != "pack-quantized")
        return unsupported_variant(q, "compressed-tensors int4 in format '" + format +
                                          "' (pack-quantized)");
      if (strategy == "group") {
        FERRITE_ASSIGN_OR_RETURN(g_s.group_size, w.get_int("group_size"));
        FERRITE_RETURN_IF_ERROR(check_group(q, "group_size", g_s.group_size));
      } else if (strategy == "channel") {
        g_s.group_size = -1;
      } else {
        return unsupported_variant(q, "compressed-tensors int4 strategy '" + strategy +
                                          "' (group, channel)");
      }
      g_s.kind = Kind::kPackedInt;
      g_s.symmetric = sym;
      g_s.description = fmt::format(
          "compressed-tensors int4 (W4A16), {}, {}",
          g_s.group_size < 0 ? "per channel" : fmt::format("group {}", g_s.group_size),
          sym ? "sym" : "zero points");
    } else {
      return unsupported_variant(
          q, fmt::format("compressed-tensors {} weights of {} bits", type, bits));
    }
    if (g.has("input_activations")) {
      FERRITE_ASSIGN_OR_RETURN(JsonConfig a, g.get_object("input_activations"));
      FERRITE_ASSIGN_OR_RETURN(bool a_dynamic, a.get_bool_or("dynamic", false));
      if (!a_dynamic)
        return unsupported_variant(q, "compressed-tensors static input activation scales");
    }
    if (g.has("output_activations"))
      return unsupported_variant(q, "compressed-tensors output activation quantization");
    if (found && (found->kind != g_s.kind || found->group_size != g_s.group_size ||
                  found->symmetric != g_s.symmetric))
      return unsupported_variant(q, "compressed-tensors config groups '" + found_key + "' and '" +
                                        key + "' with different schemes");
    found = g_s;
    found_key = key;
  }
  if (!found) return unsupported_variant(q, "compressed-tensors without config_groups");
  return *found;
}

// --- reading checkpoint tensors -------------------------------------------

int32_t i32_at(const SafetensorsTensor& t, int64_t i) {
  int32_t v;
  std::memcpy(&v, t.data + 4 * i, 4);
  return v;
}

float scale_at(const SafetensorsTensor& t, int64_t i) { return load_as_f32(t.data, t.dtype, i); }

bool is_scale_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

std::string shape_str(const SafetensorsTensor& t) {
  return fmt::format("{} {}", dtype_name(t.dtype), t.shape.to_string());
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

class Scanner {
 public:
  Scanner(const HfQuantScheme& s, const SafetensorsCheckpoint& c) : s_(s), c_(c) {}
  std::vector<std::string> problems;
  std::map<std::string, HfQuantWeights::Module> modules;

  void scan() {
    for (const std::string& name : c_.names()) {
      const SafetensorsTensor* t = c_.find(name);
      switch (s_.kind) {
        case Kind::kFp8:
          if (ends_with(name, ".weight") && t->dtype == DType::kF8E4M3)
            fp8(name.substr(0, name.size() - 7), t);
          break;
        case Kind::kGptq:
        case Kind::kAwq:
          if (ends_with(name, ".qweight")) int4_gptq_awq(name.substr(0, name.size() - 8), t);
          break;
        case Kind::kPackedInt:
          if (ends_with(name, ".weight_packed")) packed(name.substr(0, name.size() - 14), t);
          break;
      }
      if (problems.size() > 40) return;
    }
    if (modules.empty() && problems.empty())
      problems.push_back(fmt::format("no {} quantized module found ({})", s_.method,
                                     s_.kind == Kind::kFp8 ? "no e4m3 '.weight' tensor"
                                     : s_.kind == Kind::kPackedInt ? "no '.weight_packed' tensor"
                                                                   : "no '.qweight' tensor"));
  }

 private:
  const SafetensorsTensor* need(const std::string& name) {
    const SafetensorsTensor* t = c_.find(name);
    if (!t) problems.push_back(fmt::format("missing tensor '{}'", name));
    return t;
  }

  bool check(bool ok, const std::string& what) {
    if (!ok) problems.push_back(what);
    return ok;
  }

  // The [out, in] rows must be whole 128-element blocks.
  bool rows_ok(const std::string& m, int64_t out, int64_t in) {
    return check(out > 0 && in > 0 && in % kQKHf == 0,
                 fmt::format("'{}': a [{}, {}] weight; Ferrite's blocks need input features that "
                             "are a multiple of {}",
                             m, out, in, kQKHf));
  }

  void add(const std::string& m, HfQuantWeights::Module mod, DType format, int64_t out,
           int64_t in) {
    mod.virt.name = m + ".weight";
    mod.virt.dtype = format;
    mod.virt.shape = Shape{out, in};
    mod.virt.nbytes = dtype_bytes(format, out * in);
    modules.emplace(mod.virt.name, std::move(mod));
  }

  void fp8(const std::string& m, const SafetensorsTensor* w) {
    if (!check(w->shape.rank() == 2, fmt::format("'{}.weight' is {}, not a matrix", m,
                                                 shape_str(*w))))
      return;
    const int64_t out = w->shape[0], in = w->shape[1];
    if (!rows_ok(m, out, in)) return;
    const SafetensorsTensor* sc = c_.find(m + ".weight_scale_inv");
    if (!sc) sc = c_.find(m + ".weight_scale");
    if (!check(sc != nullptr, fmt::format("missing tensor '{}.weight_scale_inv' / "
                                          "'{}.weight_scale' (the scales of e4m3 '{}.weight')",
                                          m, m, m)))
      return;
    if (!check(is_scale_dtype(sc->dtype), fmt::format("'{}' is {}, scales must be f32, bf16 or "
                                                      "f16", sc->name, shape_str(*sc))))
      return;
    HfQuantWeights::Module mod;
    mod.codes = w;
    mod.scales = sc;
    const int64_t n = sc->shape.numel();
    if (n == 1) {  // per tensor
      mod.scale_rows = out;
      mod.scale_cols = in;
    } else if (sc->shape.rank() == 2 && sc->shape[1] == 1 && sc->shape[0] == out) {  // channel
      mod.scale_rows = 1;
      mod.scale_cols = in;
    } else if (sc->shape.rank() == 2) {  // blocks: [ceil(out / br), ceil(in / bc)]
      // The block is the one the grid implies (128 x 128 in every released
      // checkpoint): the smallest rows / columns whose ceil-division gives it.
      const int64_t gr = sc->shape[0], gc = sc->shape[1];
      int64_t br = 0, bc = 0;
      for (int64_t b : {128, 64, 256, 32, 512, 16, 1024}) {
        if (!br && ceil_div(out, b) == gr) br = b;
        if (!bc && b % kQKHf == 0 && ceil_div(in, b) == gc) bc = b;
      }
      if (!check(br > 0 && bc > 0,
                 fmt::format("'{}' is {}: not a block scale grid of the [{}, {}] weight with "
                             "blocks of a multiple of 128 columns",
                             sc->name, shape_str(*sc), out, in)))
        return;
      mod.scale_rows = br;
      mod.scale_cols = bc;
    } else {
      problems.push_back(fmt::format("'{}' is {}: not a tensor, channel or block scale of the "
                                     "[{}, {}] weight",
                                     sc->name, shape_str(*sc), out, in));
      return;
    }
    add(m, std::move(mod), DType::kF8B128, out, in);
  }

  // The group of each input column (g_idx; absent: column / group). In group
  // order the module repacks into u4_g128 blocks; a permuted (act-order,
  // desc_act) g_idx is recorded on the module, and open() then sorts its
  // columns or expands the checkpoint's 4-bit modules to 16 bits (u4_g128
  // blocks need each 128 columns in one group). False (a problem recorded)
  // for a g_idx that is not an i32 [in] of groups in range.
  bool g_idx_ok(const std::string& m, const SafetensorsTensor* g_idx, int64_t in, int64_t group,
                HfQuantWeights::Module* mod) {
    if (!g_idx) return true;
    if (!check(g_idx->dtype == DType::kI32 && g_idx->shape.numel() == in,
               fmt::format("'{}' is {}, expected i32 [{}]", g_idx->name, shape_str(*g_idx), in)))
      return false;
    const int64_t groups = ceil_div(in, group);
    for (int64_t i = 0; i < in; ++i) {
      const int32_t g = i32_at(*g_idx, i);
      if (g < 0 || g >= groups) {
        problems.push_back(fmt::format("'{}': column {} is in group {}, outside 0..{} ({}: {} "
                                       "groups of {})",
                                       g_idx->name, i, g, groups - 1, m, groups, group));
        return false;
      }
      if (g != i / group) mod->g_idx = g_idx;
    }
    return true;
  }

  void int4_gptq_awq(const std::string& m, const SafetensorsTensor* qw) {
    const bool awq = s_.kind == Kind::kAwq;
    const SafetensorsTensor* qz = need(m + ".qzeros");
    const SafetensorsTensor* sc = need(m + ".scales");
    if (!qz || !sc) return;
    if (!check(qw->dtype == DType::kI32 && qw->shape.rank() == 2 && qz->dtype == DType::kI32 &&
                   qz->shape.rank() == 2 && is_scale_dtype(sc->dtype) && sc->shape.rank() == 2,
               fmt::format("'{}': qweight {}, qzeros {}, scales {}: expected i32, i32 and "
                           "f16 / bf16 / f32 matrices",
                           m, shape_str(*qw), shape_str(*qz), shape_str(*sc))))
      return;
    // GPTQ: qweight [in / 8, out]; AWQ: qweight [in, out / 8]; both scales [G, out].
    const int64_t out = sc->shape[1];
    const int64_t in = awq ? qw->shape[0] : qw->shape[0] * 8;
    const int64_t groups = sc->shape[0];
    const int64_t group = s_.group_size < 0 ? in : s_.group_size;
    const bool shapes = (awq ? qw->shape[1] * 8 == out : qw->shape[1] == out) &&
                        groups == ceil_div(in, group) && qz->shape[0] == groups &&
                        qz->shape[1] * 8 == out;
    if (!check(shapes, fmt::format("'{}': qweight {}, qzeros {}, scales {} do not fit one "
                                   "4-bit {} weight with group size {}",
                                   m, shape_str(*qw), shape_str(*qz), shape_str(*sc), s_.method,
                                   s_.group_size)))
      return;
    if (!rows_ok(m, out, in)) return;
    HfQuantWeights::Module mod;
    if (!g_idx_ok(m, c_.find(m + ".g_idx"), in, group, &mod)) return;
    mod.codes = qw;
    mod.scales = sc;
    mod.zeros = qz;
    mod.group = group;
    add(m, std::move(mod), DType::kU4G128, out, in);
  }

  void packed(const std::string& m, const SafetensorsTensor* wp) {
    const SafetensorsTensor* shape = need(m + ".weight_shape");
    const SafetensorsTensor* sc = need(m + ".weight_scale");
    if (!shape || !sc) return;
    if (!check((shape->dtype == DType::kI32 || shape->dtype == DType::kI64) &&
                   shape->shape.numel() == 2,
               fmt::format("'{}' is {}, expected 2 integers", shape->name, shape_str(*shape))))
      return;
    int64_t dims[2];
    for (int k = 0; k < 2; ++k) {
      if (shape->dtype == DType::kI32) {
        dims[k] = i32_at(*shape, k);
      } else {
        std::memcpy(&dims[k], shape->data + 8 * k, 8);
      }
    }
    const int64_t out = dims[0], in = dims[1];
    if (!check(out > 0 && in > 0 && out <= (int64_t{1} << 24) && in <= (int64_t{1} << 24),
               fmt::format("'{}' holds [{}, {}]", shape->name, out, in)))
      return;
    const int64_t group = s_.group_size < 0 ? in : s_.group_size;
    const int64_t groups = ceil_div(in, group);
    if (!check(wp->dtype == DType::kI32 && wp->shape == Shape{out, ceil_div(in, 8)} &&
                   is_scale_dtype(sc->dtype) && sc->shape == Shape{out, groups},
               fmt::format("'{}': weight_packed {}, weight_scale {}: expected i32 [{}, {}] and "
                           "[{}, {}] for a [{}, {}] weight",
                           m, shape_str(*wp), shape_str(*sc), out, ceil_div(in, 8), out, groups,
                           out, in)))
      return;
    if (!rows_ok(m, out, in)) return;
    const SafetensorsTensor* zp = c_.find(m + ".weight_zero_point");
    if (!s_.symmetric) {
      if (!zp) {
        problems.push_back(fmt::format("missing tensor '{}.weight_zero_point' (asymmetric)", m));
        return;
      }
      if (!check(zp->dtype == DType::kI32 && zp->shape == Shape{ceil_div(out, 8), groups},
                 fmt::format("'{}' is {}, expected i32 [{}, {}] (packed along the output)",
                             zp->name, shape_str(*zp), ceil_div(out, 8), groups)))
        return;
    } else {
      zp = nullptr;
    }
    HfQuantWeights::Module mod;
    if (!g_idx_ok(m, c_.find(m + ".weight_g_idx"), in, group, &mod)) return;
    mod.codes = wp;
    mod.scales = sc;
    mod.zeros = zp;
    mod.group = group;
    add(m, std::move(mod), DType::kU4G128, out, in);
  }

  const HfQuantScheme& s_;
  const SafetensorsCheckpoint& c_;
};

// AWQ packs the 8 output columns 8k + c of a word at nibble kAwqPos[c]
// (AutoAWQ's order_map 0, 2, 4, 6, 1, 3, 5, 7, inverted).
constexpr int kAwqPos[8] = {0, 4, 1, 5, 2, 6, 3, 7};

}  // namespace

Result<HfQuantScheme> parse_hf_quant_config(const JsonConfig& q) {
  FERRITE_ASSIGN_OR_RETURN(std::string method, q.get_string("quant_method"));
  if (method == "fp8") return parse_fp8(q);
  if (method == "gptq") return parse_gptq(q);
  if (method == "awq") return parse_awq(q);
  if (method == "compressed-tensors") return parse_compressed_tensors(q);
  return unsupported_variant(q, "quant_method '" + method + "'");
}

namespace {

// The input columns of an act-order module sorted by group, stably (the
// order the 4-bit providers multiply them in), or empty when some group is
// not whole 128-column blocks (a u4_g128 block holds one group).
std::vector<int32_t> group_sorted_columns(const SafetensorsTensor& g_idx, int64_t in,
                                          int64_t groups) {
  std::vector<int64_t> start(static_cast<size_t>(groups) + 1, 0);
  for (int64_t i = 0; i < in; ++i) ++start[i32_at(g_idx, i) + 1];
  for (int64_t g = 0; g < groups; ++g) {
    if (start[g + 1] % kQKHf != 0) return {};
    start[g + 1] += start[g];
  }
  std::vector<int32_t> perm(static_cast<size_t>(in));
  for (int64_t i = 0; i < in; ++i) perm[start[i32_at(g_idx, i)]++] = static_cast<int32_t>(i);
  return perm;
}

}  // namespace

Result<std::shared_ptr<HfQuantWeights>> HfQuantWeights::open(
    const HfQuantScheme& scheme, const SafetensorsCheckpoint& ckpt,
    std::optional<DType> expand_dtype, const std::function<bool(const std::string&)>& permutable) {
  Scanner scan(scheme, ckpt);
  scan.scan();
  if (!scan.problems.empty()) {
    std::string msg = fmt::format("{}: the {} checkpoint ({}) does not hold what Ferrite loads "
                                  "({} problem{}):",
                                  ckpt.path(), scheme.method, scheme.description,
                                  scan.problems.size(), scan.problems.size() == 1 ? "" : "s");
    const size_t shown = std::min<size_t>(scan.problems.size(), 20);
    for (size_t i = 0; i < shown; ++i) msg += "\n  - " + scan.problems[i];
    if (shown < scan.problems.size())
      msg += fmt::format("\n  ... and {} more", scan.problems.size() - shown);
    return unsupported(msg);
  }
  auto w = std::make_shared<HfQuantWeights>();
  w->scheme_ = scheme;
  w->modules_ = std::move(scan.modules);
  // Act-order: each permuted module whose readers take an input permutation
  // keeps its 4 bits with its columns sorted by group, when every permuted
  // module's groups are whole blocks. The other 4-bit modules (all of them
  // when some groups are not whole blocks) expand to expand_dtype, else the
  // 16-bit type of their scales (f32 scales: bf16), dequantized at load as
  // the tools do, when any of them is permuted: all of them, not only the
  // permuted ones, because a stacked MoE weight needs one dtype (and a
  // module's readers are one node's or several nodes of one contract).
  int act_order = 0;
  for (const auto& [name, m] : w->modules_) act_order += m.g_idx != nullptr;
  if (act_order == 0) return w;
  std::string unsorted;  // a module whose groups are not whole blocks
  auto keeps = [&](const std::string& name) { return permutable && permutable(name); };
  for (auto& [name, m] : w->modules_) {
    if (!m.g_idx || !keeps(name)) continue;
    const int64_t in = m.virt.shape[1];
    m.perm = group_sorted_columns(*m.g_idx, in, ceil_div(in, m.group));
    if (m.perm.empty() && unsorted.empty()) unsorted = name;
  }
  int kept = 0, expanded = 0;
  bool expand_others = false;  // an act-order module that does not keep its permutation
  for (auto& [name, m] : w->modules_) {
    if (!unsorted.empty()) m.perm.clear();
    kept += !m.perm.empty();
    expand_others = expand_others || (m.g_idx && m.perm.empty());
  }
  if (expand_others) {
    for (auto& [name, m] : w->modules_) {
      if (m.virt.dtype != DType::kU4G128 || !m.perm.empty()) continue;
      if (unsorted.empty() && keeps(name)) continue;  // a natural-order module of a taker
      m.virt.dtype = expand_dtype && (*expand_dtype == DType::kF16 || *expand_dtype == DType::kBF16)
                         ? *expand_dtype
                         : m.scales->dtype == DType::kF16 ? DType::kF16 : DType::kBF16;
      m.virt.nbytes = dtype_bytes(m.virt.dtype, m.virt.shape.numel());
      ++expanded;
    }
  }
  std::string what;
  if (kept > 0)
    what = fmt::format("{} kept in 4 bits, input columns sorted by group at load", kept);
  if (expanded > 0)
    what += fmt::format(
        "{}{} 4-bit module{} expanded to 16 bits at load{}", what.empty() ? "" : "; ", expanded,
        expanded == 1 ? "" : "s",
        !unsorted.empty()
            ? fmt::format(" ('{}' has a group that is not whole 128-column blocks)", unsorted)
            : std::string(" (their providers take no input permutation)"));
  w->scheme_.description += fmt::format(", act-order ({} module{} with a permuted g_idx): {}",
                                        act_order, act_order == 1 ? "" : "s", what);
  return w;
}

const SafetensorsTensor* HfQuantWeights::find(const std::string& name) const {
  auto it = modules_.find(name);
  return it == modules_.end() ? nullptr : &it->second.virt;
}

const std::vector<int32_t>* HfQuantWeights::input_perm(const std::string& name) const {
  auto it = modules_.find(name);
  return it == modules_.end() || it->second.perm.empty() ? nullptr : &it->second.perm;
}

namespace {

// The scale and zero point of group g of output row o of a 4-bit module, and
// the code of element (o, i), as each tool stores them (GPTQ: qweight [in/8,
// out], qzeros [G, out/8] holding zero - 1 in v1; AWQ: its reversed nibble
// order along the output; compressed-tensors: weight_packed [out, in/8],
// scales [out, G], zero points packed along the output). Shared by the
// u4_g128 repack and the act-order expansion.
struct Int4Group {
  float d;
  int z;
};
Int4Group int4_group(const HfQuantScheme& s, const HfQuantWeights::Module& m, int64_t out,
                     int64_t in, int64_t o, int64_t g) {
  Int4Group e{0.0f, 8};
  switch (s.kind) {
    case Kind::kGptq:
    case Kind::kAwq: {
      e.d = scale_at(*m.scales, g * out + o);
      const uint32_t zw = static_cast<uint32_t>(i32_at(*m.zeros, g * (out / 8) + o / 8));
      const int shift = 4 * (s.kind == Kind::kAwq ? kAwqPos[o % 8] : o % 8);
      e.z = static_cast<int>((zw >> shift) & 15) +
            (s.kind == Kind::kGptq && s.gptq_v1_zeros ? 1 : 0);
      break;
    }
    case Kind::kPackedInt: {
      const int64_t groups = ceil_div(in, m.group);
      e.d = scale_at(*m.scales, o * groups + g);
      if (m.zeros) {
        const uint32_t zw = static_cast<uint32_t>(i32_at(*m.zeros, (o / 8) * groups + g));
        e.z = static_cast<int>((zw >> (4 * (o % 8))) & 15);
      }
      break;
    }
    case Kind::kFp8:
      FERRITE_CHECK(false);
  }
  return e;
}
int int4_code(const HfQuantScheme& s, const HfQuantWeights::Module& m, int64_t out, int64_t in,
              int64_t o, int64_t i) {
  uint32_t w = 0;
  int shift = 4 * static_cast<int>(i % 8);
  switch (s.kind) {
    case Kind::kGptq:
      w = static_cast<uint32_t>(i32_at(*m.codes, (i / 8) * out + o));
      break;
    case Kind::kAwq:
      w = static_cast<uint32_t>(i32_at(*m.codes, i * (out / 8) + o / 8));
      shift = 4 * kAwqPos[o % 8];
      break;
    case Kind::kPackedInt:
      w = static_cast<uint32_t>(i32_at(*m.codes, o * ceil_div(in, 8) + i / 8));
      break;
    case Kind::kFp8:
      FERRITE_CHECK(false);
  }
  return static_cast<int>((w >> shift) & 15);
}

// Rows of an act-order module expanded to f16 / bf16: element (o, i) is
// scale[g] * (q - zero[g]) with g = g_idx[i] (the tools' dequantization; the
// product of an f16 scale and a 5-bit difference, rounded once).
void expand_module_rows(const HfQuantScheme& s, const HfQuantWeights::Module& m, int64_t out,
                        int64_t in, int64_t row_begin, int64_t rows, DType dt, uint8_t* dst) {
  std::vector<int32_t> group(static_cast<size_t>(in));
  for (int64_t i = 0; i < in; ++i)
    group[i] = m.g_idx ? i32_at(*m.g_idx, i) : static_cast<int32_t>(i / m.group);
  std::vector<Int4Group> groups(static_cast<size_t>(ceil_div(in, m.group)));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = row_begin + r;
    for (size_t g = 0; g < groups.size(); ++g)
      groups[g] = int4_group(s, m, out, in, o, static_cast<int64_t>(g));
    uint8_t* d = dst + r * dtype_bytes(dt, in);
    for (int64_t i = 0; i < in; ++i) {
      const Int4Group& e = groups[group[i]];
      store_from_f32(d, dt, i, e.d * static_cast<float>(int4_code(s, m, out, in, o, i) - e.z));
    }
  }
}

}  // namespace

void HfQuantWeights::repack_rows(const SafetensorsTensor& t, int64_t row_begin, int64_t rows,
                                 uint8_t* dst) const {
  const Module& m = modules_.at(t.name);
  const int64_t out = t.shape[0], in = t.shape[1], nb = in / kQKHf;
  FERRITE_CHECK(row_begin >= 0 && rows >= 0 && row_begin + rows <= out) << t.name;
  const int64_t row_bytes = dtype_bytes(t.dtype, in);
  if (t.dtype != DType::kF8B128 && t.dtype != DType::kU4G128) {
    expand_module_rows(scheme_, m, out, in, row_begin, rows, t.dtype, dst);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = row_begin + r;
    uint8_t* row = dst + r * row_bytes;
    if (t.dtype == DType::kF8B128) {
      const int64_t grid_cols = ceil_div(in, m.scale_cols);
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = row + b * 132;
        const float d =
            scale_at(*m.scales, (o / m.scale_rows) * grid_cols + (b * kQKHf) / m.scale_cols);
        std::memcpy(blk, &d, 4);
        std::memcpy(blk + 4, m.codes->data + o * in + b * kQKHf, kQKHf);
      }
      continue;
    }
    // u4_g128; an act-order module's stored column c is input column perm[c]
    // (each 128 of them one group).
    const int32_t* perm = m.perm.empty() ? nullptr : m.perm.data();
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = row + b * 72;
      std::memset(blk, 0, 72);
      const int64_t c0 = b * kQKHf;
      const Int4Group e = int4_group(scheme_, m, out, in, o,
                                     perm ? i32_at(*m.g_idx, perm[c0]) : c0 / m.group);
      for (int j = 0; j < kQKHf; ++j) {
        const int q = int4_code(scheme_, m, out, in, o, perm ? perm[c0 + j] : c0 + j);
        blk[8 + j / 2] |= static_cast<uint8_t>((j & 1) ? q << 4 : q);
      }
      std::memcpy(blk, &e.d, 4);
      blk[4] = static_cast<uint8_t>(e.z);
    }
  }
}

}  // namespace ferrite
