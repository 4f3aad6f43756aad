#include "models/loader.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <vector>

#include "base/thread_pool.h"
#include "models/dummy_formats.h"
#include "models/gguf_model.h"
#include "models/hf_quant.h"
#include "runtime/tensor_parallel.h"

namespace ferrite {

namespace {

// Fills n elements of `dt` at dst with uniform values in [-scale, scale]
// (or the constant `fill` when scale == 0), deterministic in (seed, index).
void fill_dummy(void* dst, DType dt, int64_t n, float scale, float fill, uint64_t seed) {
  if (dtype_is_quantized(dt)) {  // f32 values quantized in chunks of whole blocks
    const int64_t chunk = 1 << 16;
    ThreadPool::global().parallel_for(
        (n + chunk - 1) / chunk,
        [&](int64_t c0, int64_t c1) {
          std::vector<float> v(chunk);
          for (int64_t c = c0; c < c1; ++c) {
            const int64_t begin = c * chunk, len = std::min(chunk, n - begin);
            uint64_t s = seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(begin + 1));
            for (int64_t i = 0; i < len; ++i) {
              s ^= s << 13;
              s ^= s >> 7;
              s ^= s << 17;
              v[i] = scale == 0 ? fill : scale * (static_cast<float>(s >> 40) / 8388608.0f - 1.0f);
            }
            uint8_t* out = static_cast<uint8_t*>(dst) + dtype_bytes(dt, begin);
            if (dt == DType::kF8B128 && scale != 0) {
              // One scale for every block (values within +-scale): 128 x 128
              // blocks share it, as in the FP8 checkpoints (weight_block_size
              // [128, 128]), so that benchmarks take their paths.
              const float d = scale / 448.0f;
              for (int64_t b = 0; b < len / 128; ++b) {
                uint8_t* blk = out + b * 132;
                std::memcpy(blk, &d, 4);
                for (int j = 0; j < 128; ++j) blk[4 + j] = f32_to_f8e4m3(v[b * 128 + j] / d);
              }
            } else {
              quantize_row(dt, v.data(), out, len);
            }
          }
        },
        1);
    return;
  }
  ThreadPool::global().parallel_for(
      n,
      [&](int64_t begin, int64_t end) {
        uint64_t s = seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(begin + 1));
        for (int64_t i = begin; i < end; ++i) {
          s ^= s << 13;
          s ^= s >> 7;
          s ^= s << 17;
          float v = scale == 0 ? fill : scale * (static_cast<float>(s >> 40) / 8388608.0f - 1.0f);
          store_from_f32(dst, dt, i, v);
        }
      },
      1 << 16);
}

// True when `data` may be read as elements of `dt` in place. Safetensors does
// not require it: a header length that is not a multiple of 8, or a 1-byte
// tensor of odd size before a bf16 one, leaves tensors at any address; such
// tensors are copied into aligned memory instead of viewed in the mapping,
// since kernels read elements through typed pointers.
bool aligned_for(const uint8_t* data, DType dt) {
  const uint64_t elem = static_cast<uint64_t>(std::min<int64_t>(dtype_block_bytes(dt), 8));
  const uint64_t align = dtype_block_elems(dt) == 1 ? elem : 2;  // blocks start with f16 scales
  return reinterpret_cast<uintptr_t>(data) % align == 0;
}

// Rows and row width of a checkpoint tensor (rows: its first dimension).
int64_t tensor_rows(const SafetensorsTensor& t) { return t.shape.rank() == 0 ? 1 : t.shape[0]; }
int64_t tensor_row_elems(const SafetensorsTensor& t) {
  const int64_t rows = tensor_rows(t);
  return rows == 0 ? 0 : t.shape.numel() / rows;
}

// The checkpoint's tensors, with the quantized modules of a quantized
// checkpoint seen as virtual [out, in] tensors in a repacked block format
// (models/hf_quant.h; their `data` is null: rows are made by repack_rows).
struct TensorLookup {
  const SafetensorsCheckpoint& ckpt;
  const HfQuantWeights* quant = nullptr;
  const SafetensorsTensor* find(const std::string& name) const {
    if (quant)
      if (const SafetensorsTensor* t = quant->find(name)) return t;
    return ckpt.find(name);
  }
};

// Rows [row_begin, row_begin + rows) of `t` into dst, in t's dtype.
void copy_rows(const TensorLookup& ckpt, const SafetensorsTensor& t, int64_t row_begin,
               int64_t rows, int64_t row_bytes, uint8_t* dst) {
  if (t.data == nullptr) {
    ckpt.quant->repack_rows(t, row_begin, rows, dst);
  } else {
    std::memcpy(dst, t.data + row_begin * row_bytes, rows * row_bytes);
  }
}

// Picks the first alternative of `w.sources` whose tensors all exist, checks
// it (dtypes agree, slices in range, element count of `w.shape`) and keeps
// only it; else appends the problems of the first alternative.
void check_sources(const TensorLookup& ckpt, WeightDecl* w,
                   std::vector<std::string>* problems) {
  size_t chosen = w->sources.size();
  for (size_t a = 0; a < w->sources.size() && chosen == w->sources.size(); ++a) {
    bool all = true;
    for (const WeightSlice& s : w->sources[a]) all = all && ckpt.find(s.tensor) != nullptr;
    if (all) chosen = a;
  }
  if (chosen == w->sources.size()) {
    std::string missing;
    int count = 0;
    for (const WeightSlice& s : w->sources[0]) {
      if (ckpt.find(s.tensor)) continue;
      if (count++ < 3) missing += (missing.empty() ? "'" : ", '") + s.tensor + "'";
    }
    if (count > 3) missing += fmt::format(" and {} more", count - 3);
    problems->push_back(
        fmt::format("missing tensor {} (for {} {})", missing, w->name, w->shape.to_string()));
    return;
  }
  std::vector<WeightSlice> alt = w->sources[chosen];
  int64_t elems = 0;
  std::optional<DType> dtype;
  for (WeightSlice& s : alt) {
    const SafetensorsTensor* t = ckpt.find(s.tensor);
    const int64_t rows = tensor_rows(*t);
    if (s.rows < 0) s.rows = rows - s.row_begin;
    if (s.row_begin < 0 || s.rows < 0 || s.row_begin + s.rows > rows) {
      problems->push_back(fmt::format("tensor '{}' has shape {}, rows [{}, {}) are needed for {}",
                                      s.tensor, t->shape.to_string(), s.row_begin,
                                      s.row_begin + s.rows, w->name));
      return;
    }
    // Slices stack rows (and per-expert tensors stack matrices), so every
    // source keeps the declared innermost width; a tensor of the right
    // element count but another width would be read with the wrong layout.
    const int64_t inner = w->shape.rank() == 0 ? 1 : w->shape[w->shape.rank() - 1];
    const int64_t t_inner = t->shape.rank() == 0 ? 1 : t->shape[t->shape.rank() - 1];
    if (t_inner != inner) {
      problems->push_back(fmt::format("tensor '{}' has shape {}, rows of {} elements are needed "
                                      "for {} {}",
                                      s.tensor, t->shape.to_string(), inner, w->name,
                                      w->shape.to_string()));
      return;
    }
    if (dtype && *dtype != t->dtype) {
      problems->push_back(fmt::format("tensors making {} differ in dtype ({} and {})", w->name,
                                      dtype_name(*dtype), dtype_name(t->dtype)));
      return;
    }
    dtype = t->dtype;
    elems += s.rows * tensor_row_elems(*t);
  }
  if (elems != w->shape.numel()) {
    problems->push_back(
        fmt::format("tensors '{}'... give {} elements for {}, config.json implies {} {}",
                    alt[0].tensor, elems, w->name, w->shape.to_string(), w->shape.numel()));
    return;
  }
  w->dtype = *dtype;
  w->sources = {std::move(alt)};
}

// Act-order 4-bit weights (HfQuantWeights::input_perm): the rows of one
// input permutation in the bound weight: all of them when every slice's
// module has the same permutation (a dense weight: one module, or slices of
// one, as Qwen3-Next's regrouped in_proj_qkvz), else the gcd of the slices'
// row counts (each slice is rows of one module; a stacked MoE weight's
// slices are its experts' matrices, so one permutation per expert matrix);
// 0 when no source has a permutation.
int64_t act_order_perm_rows(const TensorLookup& ckpt, const WeightDecl& w) {
  if (!ckpt.quant) return 0;
  if (w.sources.empty()) {
    const SafetensorsTensor* t = ckpt.find(w.name);
    return t && ckpt.quant->input_perm(w.name) ? tensor_rows(*t) : 0;
  }
  bool permuted = false, uniform = true;
  const std::vector<int32_t>* first = ckpt.quant->input_perm(w.sources.at(0).at(0).tensor);
  int64_t run = 0, rows = 0;
  for (const WeightSlice& s : w.sources.at(0)) {
    const std::vector<int32_t>* perm = ckpt.quant->input_perm(s.tensor);
    permuted = permuted || perm != nullptr;
    uniform = uniform && (perm == first || (perm && first && *perm == *first));
    run = std::gcd(run, s.rows);
    rows += s.rows;
  }
  if (!permuted) return 0;
  return uniform ? rows : run;
}

// The device copies of the permutation tables bound so far (one per distinct
// table: the q, k and v projections of an act-order checkpoint share their
// inputs' order, and so one table, which lets a fused decode launch stage
// their common input once).
using PermTables = std::map<std::vector<int32_t>, const int32_t*>;

// The permutation table of an act-order weight (TensorView::input_perm):
// one permutation per run of w.perm_rows rows, the module's of the slice the
// run starts in (the identity for a module in natural order), bound on
// `device`.
Status bind_input_perm(const TensorLookup& ckpt, const WeightDecl& w, Device& device,
                       TensorView* view, WeightStore* store, PermTables* tables) {
  const int64_t in = w.shape[w.shape.rank() - 1];
  std::vector<int32_t> table;
  int64_t slice_end = 0, run = 0;
  for (const WeightSlice& s : w.sources.at(0)) {
    slice_end += s.rows;
    const std::vector<int32_t>* perm = ckpt.quant->input_perm(s.tensor);
    for (; run * w.perm_rows < slice_end; ++run) {
      if (perm) {
        table.insert(table.end(), perm->begin(), perm->end());
      } else {
        for (int64_t c = 0; c < in; ++c) table.push_back(static_cast<int32_t>(c));
      }
    }
  }
  FERRITE_CHECK(static_cast<int64_t>(table.size()) == w.shape.numel() / w.perm_rows) << w.name;
  view->perm_rows = w.perm_rows;
  if (auto it = tables->find(table); it != tables->end()) {
    view->input_perm = it->second;
    return Status::ok();
  }
  const int64_t bytes = static_cast<int64_t>(table.size() * sizeof(int32_t));
  FERRITE_ASSIGN_OR_RETURN(auto buf, DeviceBuffer::allocate(device, bytes));
  FERRITE_RETURN_IF_ERROR(device.copy_to_device(buf.data(), table.data(), bytes));
  view->input_perm = static_cast<const int32_t*>(buf.data());
  tables->emplace(std::move(table), view->input_perm);
  store->own(std::move(buf));
  return Status::ok();
}

// Binds one materialized weight: a zero-copy view when its one slice is a
// whole tensor, else the slices' rows copied into owned memory.
Status materialize_one(const TensorLookup& ckpt, const WeightDecl& w, Device& device,
                       WeightStore* store, PermTables* tables) {
  const std::vector<WeightSlice>& alt = w.sources.at(0);
  if (alt.size() == 1) {
    const SafetensorsTensor* t = ckpt.find(alt[0].tensor);
    if (alt[0].row_begin == 0 && alt[0].rows == tensor_rows(*t) && device.host_accessible() &&
        t->data != nullptr && aligned_for(t->data, t->dtype)) {
      store->add(w.name, TensorView{const_cast<uint8_t*>(t->data), t->dtype, w.shape});
      return Status::ok();
    }
  }
  const int64_t bytes = dtype_bytes(w.dtype, w.shape.numel());
  FERRITE_ASSIGN_OR_RETURN(auto buf, DeviceBuffer::allocate(device, bytes));
  std::vector<uint8_t> host;
  uint8_t* dst = static_cast<uint8_t*>(buf.data());
  if (!device.host_accessible()) {
    host.resize(bytes);
    dst = host.data();
  }
  int64_t off = 0;
  for (const WeightSlice& s : alt) {
    const SafetensorsTensor* t = ckpt.find(s.tensor);
    const int64_t row_bytes = dtype_bytes(t->dtype, tensor_row_elems(*t));
    copy_rows(ckpt, *t, s.row_begin, s.rows, row_bytes, dst + off);
    off += s.rows * row_bytes;
  }
  FERRITE_CHECK(off == bytes) << w.name;
  if (!device.host_accessible())
    FERRITE_RETURN_IF_ERROR(device.copy_to_device(buf.data(), host.data(), bytes));
  TensorView view{buf.data(), w.dtype, w.shape};
  store->own(std::move(buf));
  if (w.perm_rows > 0)
    FERRITE_RETURN_IF_ERROR(bind_input_perm(ckpt, w, device, &view, store, tables));
  store->add(w.name, view);
  return Status::ok();
}

// Binds rank `rank`'s cut of a tensor-parallel weight (WeightDecl::shard):
// the whole weight's elements are its checkpoint pieces in order (its one
// tensor, or its materializer's slices); the rank's ranges of them
// (shard_ranges) are a zero-copy view when they are one run inside one
// piece of host-readable memory (a row cut), else copied into owned memory
// (1/W of the weight).
Status materialize_shard(const TensorLookup& ckpt, const WeightDecl& w, int rank, int world,
                         Device& device, WeightStore* store) {
  // open_source refuses these before any weight is allocated.
  FERRITE_CHECK(w.perm_rows == 0) << w.name << ": a split act-order weight";
  struct Piece {
    const SafetensorsTensor* t;
    int64_t begin, elems;  // of the tensor's elements
  };
  std::vector<Piece> pieces;
  if (w.sources.empty()) {
    const SafetensorsTensor* t = ckpt.find(w.name);
    FERRITE_CHECK(t != nullptr) << w.name;
    pieces.push_back({t, 0, t->shape.numel()});
  } else {
    for (const WeightSlice& s : w.sources.at(0)) {
      const SafetensorsTensor* t = ckpt.find(s.tensor);
      FERRITE_CHECK(t != nullptr) << s.tensor;
      const int64_t rows = s.rows < 0 ? tensor_rows(*t) - s.row_begin : s.rows;
      pieces.push_back({t, s.row_begin * tensor_row_elems(*t), rows * tensor_row_elems(*t)});
    }
  }
  const auto ranges = shard_ranges(w.shard, rank, world);
  const DType dt = w.dtype;
  // A single range inside a single piece: a view of the mapping.
  if (ranges.size() == 1 && device.host_accessible()) {
    int64_t at = 0;
    for (const Piece& p : pieces) {
      if (p.t->data && ranges[0].first >= at && ranges[0].second <= at + p.elems) {
        const uint8_t* data = p.t->data + dtype_bytes(dt, p.begin + ranges[0].first - at);
        if (aligned_for(data, dt)) {
          store->add(w.name, TensorView{const_cast<uint8_t*>(data), dt, w.shape});
          return Status::ok();
        }
      }
      at += p.elems;
    }
  }
  const int64_t bytes = dtype_bytes(dt, w.shape.numel());
  FERRITE_ASSIGN_OR_RETURN(auto buf, DeviceBuffer::allocate(device, bytes));
  std::vector<uint8_t> host;
  uint8_t* dst = static_cast<uint8_t*>(buf.data());
  if (!device.host_accessible()) {
    host.resize(bytes);
    dst = host.data();
  }
  int64_t off = 0;
  size_t pi = 0;
  int64_t piece_at = 0;  // whole-weight element where pieces[pi] starts
  for (auto [begin, end] : ranges) {
    while (begin < end) {
      while (pi < pieces.size() && begin >= piece_at + pieces[pi].elems)
        piece_at += pieces[pi++].elems;
      FERRITE_CHECK(pi < pieces.size()) << w.name << ": cut outside the weight";
      const Piece& p = pieces[pi];
      const int64_t n = std::min(end, piece_at + p.elems) - begin;
      const int64_t from = p.begin + begin - piece_at;
      FERRITE_CHECK(from % dtype_block_elems(dt) == 0 && n % dtype_block_elems(dt) == 0)
          << w.name << ": cut inside a block";
      if (p.t->data) {
        std::memcpy(dst + off, p.t->data + dtype_bytes(dt, from), dtype_bytes(dt, n));
      } else {  // a repacked quantized module: its whole rows, then the part
        const int64_t row_elems = tensor_row_elems(*p.t);
        const int64_t r0 = from / row_elems, r1 = (from + n + row_elems - 1) / row_elems;
        const int64_t row_bytes = dtype_bytes(dt, row_elems);
        std::vector<uint8_t> rows((r1 - r0) * row_bytes);
        copy_rows(ckpt, *p.t, r0, r1 - r0, row_bytes, rows.data());
        std::memcpy(dst + off, rows.data() + dtype_bytes(dt, from - r0 * row_elems),
                    dtype_bytes(dt, n));
      }
      off += dtype_bytes(dt, n);
      begin += n;
    }
  }
  FERRITE_CHECK(off == bytes) << w.name << ": the cut is " << off << " bytes, not " << bytes;
  if (!device.host_accessible())
    FERRITE_RETURN_IF_ERROR(device.copy_to_device(buf.data(), host.data(), bytes));
  store->add(w.name, TensorView{buf.data(), dt, w.shape});
  store->own(std::move(buf));
  return Status::ok();
}

// The config's sizes are each bounded (model_limits), so no declared shape
// overflows; their sum is bounded here, in checked arithmetic.
Status check_weight_total(const ModelProgram& p, const std::string& model_dir) {
  int64_t total = 0;
  for (const WeightDecl& w : p.weights) {
    const int64_t n = w.shape.numel();
    if (n % dtype_block_elems(w.dtype) != 0 ||
        __builtin_add_overflow(total, n / dtype_block_elems(w.dtype) * dtype_block_bytes(w.dtype),
                               &total) ||
        total > model_limits::kMaxWeightBytes)
      return invalid_argument(fmt::format(
          "{}/config.json: the declared weights exceed {} bytes (at '{}')", model_dir,
          model_limits::kMaxWeightBytes, w.name));
  }
  return Status::ok();
}

// Whether each checkpoint tensor the program reads may keep an input
// permutation (act-order 4-bit): every node that binds a weight reading it
// has one of `contracts` (Registry::input_permutation_contracts).
std::map<std::string, bool> permutable_tensors(const ModelProgram& program,
                                               const std::set<std::string>& contracts) {
  std::map<std::string, const WeightDecl*> decls;
  for (const WeightDecl& w : program.weights) decls[w.name] = &w;
  std::map<std::string, bool> out;
  for (const ProgramNode& node : program.nodes) {
    const bool takes = contracts.count(node.contract_id) > 0;
    for (const BindingRef& b : node.bindings) {
      if (b.source != BindingRef::Source::kWeight) continue;
      auto it = decls.find(b.name);
      if (it == decls.end()) continue;
      const WeightDecl& w = *it->second;
      auto mark = [&](const std::string& tensor) {
        auto [at, fresh] = out.emplace(tensor, takes);
        if (!fresh) at->second = at->second && takes;
      };
      if (w.sources.empty()) mark(w.name);
      for (const std::vector<WeightSlice>& alt : w.sources)
        for (const WeightSlice& s : alt) mark(s.tensor);
    }
  }
  return out;
}

}  // namespace

Result<ModelSource> open_model(const LoadOptions& options) {
  if (is_gguf_path(options.model_dir)) return open_gguf_model(options);
  ModelSource src;
  FERRITE_ASSIGN_OR_RETURN(src.config, load_model_config(options.model_dir));
  FERRITE_ASSIGN_OR_RETURN(src.family, find_family(src.config.model_type));
  // A quantization_config Ferrite does not load fails here, before anything
  // else is read (dummy weights ignore it: they are in --dummy-dtype).
  std::optional<HfQuantScheme> quant;
  if (src.config.quantization_config && !options.dummy_weights) {
    FERRITE_ASSIGN_OR_RETURN(quant, parse_hf_quant_config(*src.config.quantization_config));
  }
  ProgramOptions po = options.program;
  const bool dummy_blocks = options.dummy_weights && dtype_is_quantized(options.dummy_dtype);
  // Hugging Face formats: the unquantized weights stay bf16 (GGUF: f32).
  const bool dummy_hf = dummy_blocks && dtype_is_hf_quant(options.dummy_dtype);
  if (options.dummy_weights)
    po.weight_dtype = dummy_blocks ? (dummy_hf ? DType::kBF16 : DType::kF32) : options.dummy_dtype;
  else if (src.config.torch_dtype)
    po.weight_dtype = *src.config.torch_dtype;
  if (po.max_context > src.config.max_position_embeddings && !po.allow_long_context)
    po.max_context = src.config.max_position_embeddings;
  FERRITE_ASSIGN_OR_RETURN(src.program, src.family->build(src.config, po));
  if (dummy_hf) {
    assign_dummy_hf_quant_formats(&src.program, options.dummy_dtype);
  } else if (dummy_blocks) {
    assign_dummy_block_formats(&src.program, options.dummy_dtype, options.dummy_k_m_mix);
  }
  FERRITE_RETURN_IF_ERROR(check_weight_total(src.program, options.model_dir));
  if (options.dummy_weights) return src;

  FERRITE_ASSIGN_OR_RETURN(auto checkpoint, SafetensorsCheckpoint::open(options.model_dir));
  src.checkpoint = std::make_shared<SafetensorsCheckpoint>(std::move(checkpoint));
  if (quant) {
    const std::map<std::string, bool> permutable =
        permutable_tensors(src.program, options.act_order_contracts);
    FERRITE_ASSIGN_OR_RETURN(
        src.hf_quant,
        HfQuantWeights::open(*quant, *src.checkpoint, src.config.torch_dtype,
                             [&](const std::string& tensor) {
                               auto it = permutable.find(tensor);
                               return it != permutable.end() && it->second;
                             }));
  }
  const TensorLookup tensors{*src.checkpoint, src.hf_quant.get()};
  std::vector<std::string> problems;
  for (WeightDecl& w : src.program.weights) {
    if (!w.sources.empty()) {
      check_sources(tensors, &w, &problems);
      continue;
    }
    const SafetensorsTensor* t = tensors.find(w.name);
    if (!t) {
      problems.push_back(
          fmt::format("missing tensor '{}' (expected {})", w.name, w.shape.to_string()));
      continue;
    }
    if (t->shape != w.shape) {
      problems.push_back(fmt::format("tensor '{}' has shape {}, config.json implies {}", w.name,
                                     t->shape.to_string(), w.shape.to_string()));
      continue;
    }
    w.dtype = t->dtype;
  }
  if (src.hf_quant)
    for (WeightDecl& w : src.program.weights) w.perm_rows = act_order_perm_rows(tensors, w);
  if (!problems.empty()) {
    std::string msg =
        fmt::format("{} does not match {}/config.json ({} problem{}):", src.checkpoint->path(),
                    options.model_dir, problems.size(), problems.size() == 1 ? "" : "s");
    const size_t shown = std::min<size_t>(problems.size(), 20);
    for (size_t i = 0; i < shown; ++i) msg += "\n  - " + problems[i];
    if (shown < problems.size()) msg += fmt::format("\n  ... and {} more", problems.size() - shown);
    return invalid_argument(msg);
  }
  return src;
}

Result<std::unique_ptr<WeightStore>> materialize_weights(const ModelSource& src, Device& device,
                                                         const LoadOptions& options, int rank) {
  const int world = src.program.tensor_parallel;
  if (rank < 0 || rank >= world)
    return invalid_argument(fmt::format("rank {} of a program split {} ways", rank, world));
  if (src.gguf && !options.dummy_weights) {
    if (world > 1)
      return unsupported("tensor parallelism does not load GGUF files yet (safetensors folders "
                         "and --dummy-weights do)");
    return materialize_gguf_weights(src, device);
  }
  auto store = std::make_unique<WeightStore>();
  int64_t total_bytes = 0, done_bytes = 0;
  for (const WeightDecl& w : src.program.weights) total_bytes += dtype_bytes(w.dtype, w.shape.numel());
  auto progress = [&](const WeightDecl& w) {
    done_bytes += dtype_bytes(w.dtype, w.shape.numel());
    if (options.progress) options.progress(done_bytes, total_bytes);
  };
  if (!options.dummy_weights) {
    store->keep_alive(src.checkpoint);
    const TensorLookup tensors{*src.checkpoint, src.hf_quant.get()};
    PermTables perm_tables;
    for (const WeightDecl& w : src.program.weights) {
      if (w.shard.split()) {
        FERRITE_RETURN_IF_ERROR(materialize_shard(tensors, w, rank, world, device, store.get()));
        progress(w);
        continue;
      }
      const SafetensorsTensor* t = w.sources.empty() ? tensors.find(w.name) : nullptr;
      FERRITE_CHECK(!w.sources.empty() || t != nullptr) << w.name;
      if (!w.sources.empty() || t->data == nullptr) {  // slices, or a repacked quantized module
        WeightDecl whole = w;
        if (whole.sources.empty()) whole.sources = {{{w.name, 0, tensor_rows(*t)}}};
        FERRITE_RETURN_IF_ERROR(
            materialize_one(tensors, whole, device, store.get(), &perm_tables));
        progress(w);
        continue;
      }
      if (device.host_accessible() && aligned_for(t->data, t->dtype)) {
        // Zero-copy: the mmap is the weight memory.
        store->add(w.name, TensorView{const_cast<uint8_t*>(t->data), t->dtype, t->shape});
      } else {
        // A device copy, or an aligned host copy of a misaligned tensor (the
        // device's allocations are aligned; copy_to_device is a memcpy).
        FERRITE_ASSIGN_OR_RETURN(auto buf, DeviceBuffer::allocate(device, t->nbytes));
        FERRITE_RETURN_IF_ERROR(device.copy_to_device(buf.data(), t->data, t->nbytes));
        store->add(w.name, TensorView{buf.data(), t->dtype, t->shape});
        store->own(std::move(buf));
      }
      progress(w);
    }
    return store;
  }
  // Dummy weights: 1-D tensors (norms, biases) are ones / small; matrices are
  // uniform with the 1/sqrt(fan_in) scale of default initialisers.
  uint64_t seed = options.seed * 0x2545f4914f6cdd1dull + 1;
  for (const WeightDecl& w : src.program.weights) {
    const int64_t n = w.shape.numel();
    FERRITE_ASSIGN_OR_RETURN(auto buf, DeviceBuffer::allocate(device, dtype_bytes(w.dtype, n)));
    const bool matrix = w.shape.rank() >= 2;
    const float scale =
        matrix ? 1.0f / std::sqrt(static_cast<float>(w.shape[w.shape.rank() - 1])) : 0.0f;
    const bool is_bias = w.name.size() > 5 && w.name.compare(w.name.size() - 5, 5, ".bias") == 0;
    const float fill = is_bias ? 0.0f : 1.0f;
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    // A tensor-parallel rank's cut gets its own values (dummy weights are for
    // speed; replicated weights are the same on every rank).
    const uint64_t s = w.shard.split() ? seed ^ (0x9e3779b97f4a7c15ull * (rank + 1)) : seed;
    if (device.host_accessible()) {
      fill_dummy(buf.data(), w.dtype, n, scale, fill, s);
    } else {
      std::vector<uint8_t> host(dtype_bytes(w.dtype, n));
      fill_dummy(host.data(), w.dtype, n, scale, fill, s);
      FERRITE_RETURN_IF_ERROR(device.copy_to_device(buf.data(), host.data(), host.size()));
    }
    store->add(w.name, TensorView{buf.data(), w.dtype, w.shape});
    store->own(std::move(buf));
    progress(w);
  }
  return store;
}

}  // namespace ferrite
