// Bindings for the Llama-family decoder (native/models/llama.h): model creation and weight
// loading, the paged KV cache, LoRA adapters, and llamaStep (one async call per scheduler step).
//
//   llamaCreate(cfg) -> handle
//   llamaLoadWeights(handle, [{name, dtype:'F32'|'F16'|'BF16', data:Uint8Array | Uint8Array[] (row blocks, joined
//                    in the worker), rows, cols}], finalize) -> Promise<{weightBytes}>
//   llamaAdapterLoad(handle, id, [{layer, module, r, scale, A:Float32Array, B:Float32Array}], dtype?: 'f32'|'bf16')
//   llamaAdapterUnload(handle, id) -> boolean
//   llamaFree(handle), kvFree(kv): release the model (weights, adapters) or the cache now, not at garbage collection;
//     a step or load in flight keeps what it uses until it ends; the handle then fails as invalid
//   kvCreate({layers, blocks, blockSize, kvHeads, headDim, dtype?: 'F32'|'BF16'}) -> kv handle ; kvBytes(kv)
//   kvReadBlock(kv, layer, block) -> {k, v}: Float32Array (blockSize, kvHeads·headDim) each, widened from bf16
//   llamaStep(handle, kv, {tokens, positions, seqLens, tables, tableOffsets, adapters, outRows, hidden, copies,
//             argmax?: Int32Array (outRows.length, filled with each logits row's argmax)}, out) -> Promise
#include <algorithm>
#include <climits>
#include <cstring>
#include <map>
#include <memory>
#include "../models/llama.h"
#include "loom/quant.h"
#include "napi_util.h"

namespace loom::napi {
namespace {

using llama::Adapter;
using llama::KvCache;
using llama::Model;

struct ModelHandle {
  std::shared_ptr<Model> model;
  std::map<int64_t, std::shared_ptr<Adapter>> adapters;
};
struct KvHandle {
  std::shared_ptr<KvCache> kv;
};

ModelHandle* model_arg(const Napi::Value& v) {
  if (!v.IsExternal()) throw_type(v.Env(), "model handle expected");
  auto* h = v.As<Napi::External<ModelHandle>>().Data();
  if (!h || !h->model) throw_type(v.Env(), "model handle is invalid");
  return h;
}
KvHandle* kv_arg(const Napi::Value& v) {
  if (!v.IsExternal()) throw_type(v.Env(), "kv cache handle expected");
  auto* h = v.As<Napi::External<KvHandle>>().Data();
  if (!h || !h->kv) throw_type(v.Env(), "kv cache handle is invalid");
  return h;
}

int64_t obj_int(const Napi::Object& o, const char* key) { return int_arg(o.Get(key), key); }
double obj_num(const Napi::Object& o, const char* key, double def) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined() || v.IsNull()) return def;
  return num_arg(v, key);
}

DType dtype_arg(const Napi::Value& v, const char* name) {
  if (!v.IsString()) throw_type(v.Env(), std::string(name) + " must be a dtype string");
  std::string s = v.As<Napi::String>();
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  DType q;
  if (quant_type_parse(s, &q)) return q;
  throw_type(v.Env(), std::string(name) + ": unsupported dtype " + s + " (F32, F16, BF16, " + quant_type_names() + ")");
}

Napi::Value LlamaCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) throw_type(env, "config object expected");
  Napi::Object o = info[0].As<Napi::Object>();
  llama::Config c;
  c.vocab = obj_int(o, "vocab");
  c.hidden = obj_int(o, "hidden");
  c.inter = obj_int(o, "inter");
  c.layers = obj_int(o, "layers");
  c.n_heads = obj_int(o, "heads");
  c.n_kv_heads = obj_int(o, "kvHeads");
  c.head_dim = obj_int(o, "headDim");
  c.eps = float(obj_num(o, "eps", 1e-6));
  c.rope_theta = float(obj_num(o, "ropeTheta", 10000.0));
  c.qkv_bias = o.Get("qkvBias").ToBoolean();
  c.sliding_window = int64_t(obj_num(o, "slidingWindow", 0));
  if (c.sliding_window < 0) throw_range(env, "slidingWindow must be >= 0");
  Napi::Value rs = o.Get("ropeScaling");
  if (rs.IsObject()) {
    Napi::Object r = rs.As<Napi::Object>();
    c.rope.type = int(obj_num(r, "type", 0));
    c.rope.factor = float(obj_num(r, "factor", 1.0));
    c.rope.low_freq_factor = float(obj_num(r, "lowFreqFactor", 1.0));
    c.rope.high_freq_factor = float(obj_num(r, "highFreqFactor", 4.0));
    c.rope.original_max_position = int(obj_num(r, "originalMaxPosition", 8192));
  }
  Napi::Value wd = o.Get("weightDtype");
  c.weight_dtype = wd.IsUndefined() ? DType::F32 : dtype_arg(wd, "weightDtype");
  ModelHandle* h = new ModelHandle();
  try {
    h->model = std::make_shared<Model>(c);
  } catch (const std::exception& e) {
    delete h;
    throw Napi::Error::New(env, e.what());
  }
  return Napi::External<ModelHandle>::New(env, h, [](Napi::Env, ModelHandle* p) { delete p; });
}

Napi::Value LlamaLoadWeights(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ModelHandle* h = model_arg(info[0]);
  if (!info[1].IsArray()) throw_type(env, "weights must be an array");
  Napi::Array arr = info[1].As<Napi::Array>();
  bool finalize = info[2].ToBoolean();
  struct Item {
    std::string name;
    DType dtype;
    std::vector<std::pair<const uint8_t*, size_t>> parts;  // one, or row blocks to join
    std::vector<DType> part_dtypes;  // when the row blocks have different types (kept apart, stacked)
    std::vector<int64_t> part_rows;
    int64_t rows, cols;
  };
  auto items = std::make_shared<std::vector<Item>>();
  std::vector<Napi::ObjectReference> keep;
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Value ev = arr.Get(i);
    if (!ev.IsObject()) throw_type(env, "weight entry must be an object");
    Napi::Object e = ev.As<Napi::Object>();
    Item it;
    Napi::Value nv = e.Get("name");
    if (!nv.IsString()) throw_type(env, "weight name must be a string");
    it.name = nv.As<Napi::String>();
    it.dtype = dtype_arg(e.Get("dtype"), "dtype");
    it.rows = obj_int(e, "rows");
    it.cols = obj_int(e, "cols");
    Napi::Value dv = e.Get("data");
    size_t have = 0;
    const uint32_t np = dv.IsArray() ? dv.As<Napi::Array>().Length() : 1;
    for (uint32_t k = 0; k < np; k++) {
      auto d = array_arg<uint8_t>(dv.IsArray() ? dv.As<Napi::Array>().Get(k) : dv, "data", false, true);
      it.parts.emplace_back(d.data, d.length);
      have += d.length;
      keep.push_back(std::move(d.ref));
    }
    Napi::Value tv = e.Get("dtypes");  // optional: one dtype per part, when they differ
    if (tv.IsArray() && dv.IsArray()) {
      Napi::Array ta = tv.As<Napi::Array>();
      if (ta.Length() != np) throw_range(env, "weight " + it.name + ": dtypes and data differ in length");
      for (uint32_t k = 0; k < np; k++) {
        const DType t = dtype_arg(ta.Get(k), "dtypes");
        const bool q = quant_supported(t);
        if (q && (it.cols <= 0 || it.cols % quant_block_values(t) != 0))
          throw_range(env, "weight " + it.name + ": " + std::to_string(it.cols) + " columns is not a multiple of the " +
                               dtype_name(t) + " block");
        const size_t row = q ? quant_row_bytes(t, it.cols) : size_t(it.cols) * dtype_size(t);
        if (it.cols <= 0 || row == 0 || it.parts[k].second % row != 0)
          throw_range(env, "weight " + it.name + ": part " + std::to_string(k) + " is not whole rows of " + dtype_name(t));
        it.part_dtypes.push_back(t);
        it.part_rows.push_back(int64_t(it.parts[k].second / row));
      }
      int64_t rows = 0;
      for (int64_t r : it.part_rows) rows += r;
      if (rows != it.rows) throw_range(env, "weight " + it.name + ": parts hold " + std::to_string(rows) + " rows");
      items->push_back(std::move(it));
      continue;
    }
    const bool quant = quant_supported(it.dtype);
    if (quant && (it.cols <= 0 || it.cols % quant_block_values(it.dtype) != 0))
      throw_range(env, "weight " + it.name + ": " + std::to_string(it.cols) + " columns is not a multiple of the " +
                           dtype_name(it.dtype) + " block");
    size_t need = quant ? size_t(it.rows) * quant_row_bytes(it.dtype, it.cols)
                        : size_t(it.rows * it.cols) * dtype_size(it.dtype);
    if (it.rows <= 0 || it.cols <= 0 || have != need)
      throw_range(env, "weight " + it.name + ": " + std::to_string(have) + " bytes for (" +
                           std::to_string(it.rows) + ", " + std::to_string(it.cols) + ") " + dtype_name(it.dtype));
    items->push_back(std::move(it));
  }
  auto model = h->model;
  return run_async(
      env,
      [model, items, finalize]() {
        for (const Item& it : *items) {
          if (!it.part_dtypes.empty()) {
            std::vector<llama::Model::Part> parts;
            for (size_t k = 0; k < it.parts.size(); k++)
              parts.push_back({it.part_dtypes[k], it.parts[k].first, it.part_rows[k]});
            model->set_weight_parts(it.name, parts, it.cols);
            continue;
          }
          if (it.parts.size() == 1) {
            model->set_weight(it.name, it.dtype, it.parts[0].first, it.rows, it.cols);
            continue;
          }
          std::vector<uint8_t> joined;  // row blocks (q;k;v, gate;up) joined here, not on the event loop
          size_t total = 0;
          for (const auto& p : it.parts) total += p.second;
          joined.resize(total);
          size_t off = 0;
          for (const auto& p : it.parts) {
            if (p.second) std::memcpy(joined.data() + off, p.first, p.second);
            off += p.second;
          }
          model->set_weight(it.name, it.dtype, joined.data(), it.rows, it.cols);
        }
        if (finalize) model->finalize();
      },
      [model](Napi::Env env) {
        Napi::Object r = Napi::Object::New(env);
        r.Set("weightBytes", double(model->weight_bytes()));
        return r;
      },
      std::move(keep));
}

Napi::Value LlamaAdapterLoad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ModelHandle* h = model_arg(info[0]);
  int64_t id = int_arg(info[1], "id");
  if (!info[2].IsArray()) throw_type(env, "adapter modules must be an array");
  // storage: 'f32' (default) or 'bf16'
  bool bf16 = false;
  if (info.Length() > 3 && !info[3].IsUndefined()) {
    if (!info[3].IsString()) throw_type(env, "adapter dtype must be 'f32' or 'bf16'");
    const std::string d = info[3].As<Napi::String>().Utf8Value();
    if (d != "f32" && d != "bf16") throw_type(env, "adapter dtype must be 'f32' or 'bf16', got '" + d + "'");
    bf16 = d == "bf16";
  }
  const llama::Config& c = h->model->config();
  const int64_t D = c.hidden, F = c.inter, Nq = c.n_heads * c.head_dim, Nkv = c.n_kv_heads * c.head_dim;
  auto ad = std::make_shared<Adapter>();
  ad->mods.resize(size_t(c.layers * llama::kNumModules));
  Napi::Array arr = info[2].As<Napi::Array>();
  for (uint32_t i = 0; i < arr.Length(); i++) {
    Napi::Object e = arr.Get(i).As<Napi::Object>();
    int64_t layer = obj_int(e, "layer"), module = obj_int(e, "module"), r = obj_int(e, "r");
    double scale = obj_num(e, "scale", 1.0);
    if (layer < 0 || layer >= c.layers) throw_range(env, "adapter layer out of range");
    if (module < 0 || module >= llama::kNumModules) throw_range(env, "adapter module out of range");
    if (r <= 0) throw_range(env, "adapter rank must be positive");
    int64_t in = 0, out = 0;
    switch (module) {
      case llama::kQ: in = D, out = Nq; break;
      case llama::kK: in = D, out = Nkv; break;
      case llama::kV: in = D, out = Nkv; break;
      case llama::kO: in = Nq, out = D; break;
      case llama::kGate: in = D, out = F; break;
      case llama::kUp: in = D, out = F; break;
      case llama::kDown: in = F, out = D; break;
    }
    auto A = array_arg<float>(e.Get("A"), "A");
    auto B = array_arg<float>(e.Get("B"), "B");
    if (int64_t(A.length) != r * in || int64_t(B.length) != out * r)
      throw_range(env, "adapter layer " + std::to_string(layer) + " module " + std::to_string(module) +
                           ": A must be (" + std::to_string(r) + ", " + std::to_string(in) + ") and B (" +
                           std::to_string(out) + ", " + std::to_string(r) + ")");
    llama::LoraPair& p = ad->mods[size_t(layer * llama::kNumModules + module)];
    p.r = r;
    p.in = in;
    p.out = out;
    p.scale = float(scale);
    std::vector<float> bt(B.length);  // (out, r) -> (r, out)
    for (int64_t n = 0; n < out; n++)
      for (int64_t k = 0; k < r; k++) bt[size_t(k * out + n)] = B.data[n * r + k];
    if (bf16) {
      p.A16.resize(A.length);
      convert_f32_to_bf16(int64_t(A.length), A.data, p.A16.data());
      p.Bt16.resize(bt.size());
      convert_f32_to_bf16(int64_t(bt.size()), bt.data(), p.Bt16.data());
    } else {
      p.A.assign(A.data, A.data + A.length);
      p.Bt = std::move(bt);
    }
    ad->max_r = std::max(ad->max_r, r);
  }
  h->adapters[id] = ad;
  return env.Undefined();
}

Napi::Value LlamaAdapterUnload(const Napi::CallbackInfo& info) {
  ModelHandle* h = model_arg(info[0]);
  int64_t id = int_arg(info[1], "id");
  return Napi::Boolean::New(info.Env(), h->adapters.erase(id) > 0);
}

Napi::Value KvCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) throw_type(env, "kv config object expected");
  Napi::Object o = info[0].As<Napi::Object>();
  Napi::Value dv = o.Get("dtype");
  const DType dtype = dv.IsUndefined() ? DType::F32 : dtype_arg(dv, "kv cache dtype");
  if (dtype != DType::F32 && dtype != DType::BF16) throw_type(env, "kv cache dtype must be F32 or BF16");
  auto* h = new KvHandle();
  try {
    h->kv = std::make_shared<KvCache>(obj_int(o, "layers"), obj_int(o, "blocks"), obj_int(o, "blockSize"),
                                      obj_int(o, "kvHeads"), obj_int(o, "headDim"), dtype);
  } catch (const std::bad_alloc&) {
    delete h;
    throw Napi::Error::New(env, "kv cache: out of memory");
  } catch (const std::exception& e) {
    delete h;
    throw Napi::Error::New(env, e.what());
  }
  Napi::External<KvHandle> ext = Napi::External<KvHandle>::New(env, h, [](Napi::Env, KvHandle* p) { delete p; });
  return ext;
}

Napi::Value LlamaFree(const Napi::CallbackInfo& info) {
  if (!info[0].IsExternal()) throw_type(info.Env(), "model handle expected");
  auto* h = info[0].As<Napi::External<ModelHandle>>().Data();
  if (h) {
    h->adapters.clear();
    h->model.reset();
  }
  return info.Env().Undefined();
}

Napi::Value KvFree(const Napi::CallbackInfo& info) {
  if (!info[0].IsExternal()) throw_type(info.Env(), "kv cache handle expected");
  auto* h = info[0].As<Napi::External<KvHandle>>().Data();
  if (h) h->kv.reset();
  return info.Env().Undefined();
}

Napi::Value KvBytes(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), double(kv_arg(info[0])->kv->bytes()));
}

// kvReadBlock(kv, layer, block) -> {k, v}: the stored contents of one block of one layer as f32
// (bf16 caches widened exactly), for tests and debugging. Synchronous: one block is small. Not
// ordered with a llamaStep in flight on the same cache: call it between steps.
Napi::Value KvReadBlock(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const KvCache& kv = *kv_arg(info[0])->kv;
  const int64_t layer = int_arg(info[1], "layer"), block = int_arg(info[2], "block");
  if (layer < 0 || layer >= kv.layers) throw_range(env, "layer out of range");
  if (block < 0 || block >= kv.n_blocks) throw_range(env, "block id out of range");
  const int64_t n = kv.block_size * kv.slot_elems();  // (block_size, Hkv·Dh)
  Napi::Float32Array k = Napi::Float32Array::New(env, size_t(n));
  Napi::Float32Array v = Napi::Float32Array::New(env, size_t(n));
  if (kv.dtype == DType::BF16) {
    convert_bf16_to_f32(n, kv.k_at<uint16_t>(layer, block, 0), k.Data());
    convert_bf16_to_f32(n, kv.v_at<uint16_t>(layer, block, 0), v.Data());
  } else {
    std::memcpy(k.Data(), kv.k_at<float>(layer, block, 0), size_t(n) * sizeof(float));
    std::memcpy(v.Data(), kv.v_at<float>(layer, block, 0), size_t(n) * sizeof(float));
  }
  Napi::Object r = Napi::Object::New(env);
  r.Set("k", k);
  r.Set("v", v);
  return r;
}

// llamaStep(model, kv, batch, out) -> Promise<void>
Napi::Value LlamaStep(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ModelHandle* h = model_arg(info[0]);
  KvHandle* kh = kv_arg(info[1]);
  if (!info[2].IsObject()) throw_type(env, "batch object expected");
  Napi::Object o = info[2].As<Napi::Object>();
  const llama::Config& c = h->model->config();
  KvCache& kv = *kh->kv;

  std::vector<Napi::ObjectReference> keep;
  auto tokens = array_arg<int32_t>(o.Get("tokens"), "tokens", false, true);
  auto positions = array_arg<int32_t>(o.Get("positions"), "positions", false, true);
  auto seq_lens = array_arg<int32_t>(o.Get("seqLens"), "seqLens");
  auto tables = array_arg<int32_t>(o.Get("tables"), "tables", false, true);
  auto offs = array_arg<int32_t>(o.Get("tableOffsets"), "tableOffsets");
  auto adapters = array_arg<int32_t>(o.Get("adapters"), "adapters", true);
  auto out_rows = array_arg<int32_t>(o.Get("outRows"), "outRows", false, true);
  auto copies = array_arg<int32_t>(o.Get("copies"), "copies", true);
  auto best = array_arg<int32_t>(o.Get("argmax"), "argmax", true, true);
  bool hidden = o.Get("hidden").ToBoolean();
  auto out = array_arg<float>(info[3], "out", false, true);

  const int64_t T = int64_t(tokens.length), S = int64_t(seq_lens.length);
  if (int64_t(positions.length) != T) throw_range(env, "positions must have one entry per token");
  if (int64_t(offs.length) != S + 1) throw_range(env, "tableOffsets must have seqLens.length + 1 entries");
  if (adapters.data && int64_t(adapters.length) != S) throw_range(env, "adapters must have one entry per sequence");
  if (copies.length % 3 != 0) throw_range(env, "copies must be [src, dst, nSlots] triples");
  for (int64_t t = 0; t < T; t++) {
    if (tokens.data[t] < 0 || tokens.data[t] >= c.vocab)
      throw_range(env, "token id " + std::to_string(tokens.data[t]) + " out of range [0, " + std::to_string(c.vocab) + ")");
    if (positions.data[t] < 0) throw_range(env, "positions must be >= 0");
  }
  for (size_t i = 0; i < tables.length; i++)
    if (tables.data[i] < -1 || tables.data[i] >= kv.n_blocks) throw_range(env, "block id out of range");
  for (size_t i = 0; i < copies.length; i += 3)
    if (copies.data[i] < 0 || copies.data[i] >= kv.n_blocks || copies.data[i + 1] < 0 || copies.data[i + 1] >= kv.n_blocks)
      throw_range(env, "copy block id out of range");

  auto batch = std::make_shared<llama::Batch>();
  batch->T = T;
  batch->tokens = tokens.data;
  batch->positions = positions.data;
  batch->hidden = hidden;
  std::vector<std::shared_ptr<Adapter>> held;
  int64_t row = 0;
  for (int64_t s = 0; s < S; s++) {
    llama::SeqSpec sp;
    sp.first_row = row;
    sp.n_tokens = seq_lens.data[s];
    if (sp.n_tokens <= 0) throw_range(env, "every sequence must contribute at least one token");
    int64_t o0 = offs.data[s], o1 = offs.data[s + 1];
    if (o0 < 0 || o1 < o0 || o1 > int64_t(tables.length)) throw_range(env, "tableOffsets out of range");
    sp.block_table = tables.data + o0;
    sp.n_table = o1 - o0;
    if (row + sp.n_tokens > T) throw_range(env, "seqLens add up to more than tokens.length");
    int64_t min_pos = INT64_MAX;
    for (int64_t i = 0; i < sp.n_tokens; i++) {
      if (positions.data[row + i] / kv.block_size >= sp.n_table)
        throw_range(env, "sequence " + std::to_string(s) + ": position " + std::to_string(positions.data[row + i]) +
                             " is beyond its block table");
      min_pos = std::min<int64_t>(min_pos, positions.data[row + i]);
    }
    // -1 marks a block released because it is out of every later query's sliding window; only
    // blocks wholly before the window of this step's first query may be -1
    const int64_t first_needed =
        c.sliding_window > 0 ? std::max<int64_t>(0, min_pos - c.sliding_window + 1) / kv.block_size : 0;
    for (int64_t i = first_needed; i < sp.n_table; i++)
      if (sp.block_table[i] < 0)
        throw_range(env, "sequence " + std::to_string(s) + ": block table entry " + std::to_string(i) +
                             " is -1 but inside the attention window");
    if (adapters.data && adapters.data[s] >= 0) {
      auto it = h->adapters.find(adapters.data[s]);
      if (it == h->adapters.end()) throw_range(env, "adapter " + std::to_string(adapters.data[s]) + " is not loaded");
      sp.adapter = it->second.get();
      held.push_back(it->second);
    }
    row += sp.n_tokens;
    batch->seqs.push_back(sp);
  }
  if (row != T) throw_range(env, "seqLens must add up to tokens.length");
  batch->build_row_map();
  batch->out_rows = out_rows.data;
  batch->n_out = int64_t(out_rows.length);
  if (batch->n_out > T) throw_range(env, "more output rows than tokens");
  for (int64_t r = 0; r < batch->n_out; r++)
    if (out_rows.data[r] < 0 || out_rows.data[r] >= T) throw_range(env, "outRows entry out of range");
  const int64_t width = hidden ? c.hidden : c.vocab;
  check_len(env, out.length, size_t(batch->n_out * width), "out");
  if (best.data) {
    if (hidden) throw_range(env, "argmax is of logits: not with hidden");
    check_len(env, best.length, size_t(batch->n_out), "argmax");
    batch->argmax = best.data;
    keep.push_back(std::move(best.ref));
  }
  std::vector<int32_t> copy_list(copies.data, copies.data + copies.length);

  keep.push_back(std::move(tokens.ref));
  keep.push_back(std::move(positions.ref));
  keep.push_back(std::move(tables.ref));
  keep.push_back(std::move(out_rows.ref));
  keep.push_back(std::move(out.ref));
  auto model = h->model;
  auto kvp = kh->kv;
  float* outp = out.data;
  return run_async(
      env,
      [model, kvp, batch, held, copy_list, outp]() {
        for (size_t i = 0; i < copy_list.size(); i += 3) kvp->copy_block(copy_list[i], copy_list[i + 1], copy_list[i + 2]);
        model->step(*kvp, *batch, outp);
      },
      nullptr, std::move(keep));
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("llamaCreate", Napi::Function::New(env, LlamaCreate));
  exports.Set("llamaLoadWeights", Napi::Function::New(env, LlamaLoadWeights));
  exports.Set("llamaAdapterLoad", Napi::Function::New(env, LlamaAdapterLoad));
  exports.Set("llamaAdapterUnload", Napi::Function::New(env, LlamaAdapterUnload));
  exports.Set("kvCreate", Napi::Function::New(env, KvCreate));
  exports.Set("kvBytes", Napi::Function::New(env, KvBytes));
  exports.Set("llamaFree", Napi::Function::New(env, LlamaFree));
  exports.Set("kvFree", Napi::Function::New(env, KvFree));
  exports.Set("kvReadBlock", Napi::Function::New(env, KvReadBlock));
  exports.Set("llamaStep", Napi::Function::New(env, LlamaStep));
}

}  // namespace
LOOM_NAPI_REGISTER(llama, Init);
}  // namespace loom::napi
