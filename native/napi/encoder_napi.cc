// Encoder bindings: DeBERTa-v2/v3 forward and the GLiNER2 span heads.
//
//   debertaCreate(cfg, tensors) → Promise<handle>
//       cfg: {D, L, H, F, V, positionBuckets, maxRelativePositions, maxPositionEmbeddings, eps, c2p, p2c, bf16,
//             featRows, featCols (word features: embeddings.word_feature_embeddings.weight (featRows, D) fp32)}
//       tensors: {name → Float32Array (fp32) | Uint16Array (bf16 bits: linear weights and word embeddings
//                 when cfg.bf16)}, names as in a bare DebertaV2Model (embeddings.*, encoder.*)
//   debertaForward(handle, ids Int32Array (B*N), mask Uint8Array (B*N), B, N, hiddenStates?,
//                  feats? Int32Array (B*N*featCols): word-feature rows, -1 = none,
//                  groups? Int32Array (B*N): label-isolation groups, deberta.h group_positions,
//                  bags? Int32Array (B*N*cols): label bags, word-table rows, -1 = none, ops.h bag_embedding_fwd)
//       → Promise<Float32Array (B*N*D)>  | with hiddenStates: Promise<Float32Array ((L+1)*B*N*D)>
//   debertaRelIndex(cfg, rel) → number (rel-embedding row used for relative position rel = i − j)
//   gliner2HeadsCreate(D, K, counting ('count_lstm' | 'count_lstm_v2' | 'count_lstm_moe'), tensors,
//                      [experts, inner] (moe only)) → Promise<handle>
//   gliner2HeadsRun(handle, words Float32Array (ΣW*D), woff Int32Array (B+1), segSample, segKind, segM
//       (Int32Array, one per segment), segEmbs Float32Array (Σ(1+M)*D), spanRep?)
//       → Promise<{counts Int32Array, countLogits Float32Array (S*20), scores Float32Array[],
//                  countEmbed Float32Array[], cls Float32Array[], spanRep?: Float32Array[]}>
// Handles own shared_ptrs, so a model stays alive while async work uses it.
#include <map>
#include <memory>
#include <string>
#include "../models/deberta.h"
#include "../models/gliner2.h"
#include "napi_util.h"

namespace loom::napi {
namespace {

using deberta::Model;
using gliner2::Heads;

template <typename T>
struct Handle {
  std::shared_ptr<T> p;
};

template <typename T>
Napi::Value wrap(Napi::Env env, std::shared_ptr<T> p) {
  return Napi::External<Handle<T>>::New(env, new Handle<T>{std::move(p)}, [](Napi::Env, Handle<T>* h) { delete h; });
}

template <typename T>
std::shared_ptr<T> unwrap(const Napi::Value& v, const char* what) {
  if (!v.IsExternal()) throw_type(v.Env(), std::string(what) + " handle expected");
  auto* h = v.As<Napi::External<Handle<T>>>().Data();
  if (!h || !h->p) throw_type(v.Env(), std::string(what) + " handle is invalid");
  return h->p;
}

// debertaFree(h) / gliner2HeadsFree(h): the model's memory released now, not at garbage collection (a call in
// flight holds its own shared pointer and finishes); the handle is invalid after
template <typename T>
Napi::Value free_handle(const Napi::CallbackInfo& info, const char* what) {
  if (!info[0].IsExternal()) throw_type(info.Env(), std::string(what) + " handle expected");
  auto* h = info[0].As<Napi::External<Handle<T>>>().Data();
  if (h) h->p.reset();
  return info.Env().Undefined();
}
Napi::Value DebertaFree(const Napi::CallbackInfo& info) { return free_handle<Model>(info, "deberta"); }
Napi::Value HeadsFree(const Napi::CallbackInfo& info) { return free_handle<Heads>(info, "gliner2 heads"); }

int64_t obj_int(const Napi::Object& o, const char* k, int64_t def, bool required = false) {
  Napi::Value v = o.Get(k);
  if (v.IsUndefined() || v.IsNull()) {
    if (required) throw_type(o.Env(), std::string("config.") + k + " is required");
    return def;
  }
  return int_arg(v, k);
}

deberta::Config parse_cfg(const Napi::Value& v) {
  if (!v.IsObject()) throw_type(v.Env(), "config must be an object");
  Napi::Object o = v.As<Napi::Object>();
  deberta::Config c;
  c.D = obj_int(o, "D", 0, true);
  c.L = obj_int(o, "L", 0, true);
  c.H = obj_int(o, "H", 0, true);
  c.F = obj_int(o, "F", 0, true);
  c.V = obj_int(o, "V", 0, true);
  c.position_buckets = obj_int(o, "positionBuckets", 256);
  c.max_relative_positions = obj_int(o, "maxRelativePositions", -1);
  c.max_position_embeddings = obj_int(o, "maxPositionEmbeddings", 512);
  Napi::Value eps = o.Get("eps");
  if (eps.IsNumber()) c.eps = float(eps.As<Napi::Number>().DoubleValue());
  Napi::Value c2p = o.Get("c2p"), p2c = o.Get("p2c");
  if (c2p.IsBoolean()) c.c2p = c2p.As<Napi::Boolean>().Value();
  if (p2c.IsBoolean()) c.p2c = p2c.As<Napi::Boolean>().Value();
  c.feat_rows = obj_int(o, "featRows", 0);
  c.feat_cols = obj_int(o, "featCols", 0);
  return c;
}

// Tensor lookup over a {name: TypedArray} object; keeps references alive for async work.
struct TensorBag {
  Napi::Object obj;
  std::vector<Napi::ObjectReference> keep;
  const void* get(const std::string& name, size_t elems, bool bf16_ok, bool* is_bf16 = nullptr) {
    Napi::Value v = obj.Get(name);
    if (!v.IsTypedArray()) throw_type(obj.Env(), "tensor " + name + " missing (or not a typed array)");
    Napi::TypedArray ta = v.As<Napi::TypedArray>();
    bool bf = ta.TypedArrayType() == napi_uint16_array;
    if (!(ta.TypedArrayType() == napi_float32_array || (bf16_ok && bf)))
      throw_type(obj.Env(), "tensor " + name + " must be a Float32Array" + (bf16_ok ? " or Uint16Array (bf16)" : ""));
    if (ta.ElementLength() != elems)
      throw_range(obj.Env(), "tensor " + name + " has " + std::to_string(ta.ElementLength()) + " elements, expected " +
                                 std::to_string(elems));
    if (is_bf16) *is_bf16 = bf;
    keep.push_back(Napi::Persistent(ta.As<Napi::Object>()));
    return static_cast<uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
  }
  const float* f32(const std::string& name, size_t elems) { return static_cast<const float*>(get(name, elems, false)); }
};

Napi::Value DebertaCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  deberta::Config c = parse_cfg(info[0]);
  if (!info[1].IsObject()) throw_type(env, "tensors must be an object");
  bool bf16 = info[0].As<Napi::Object>().Get("bf16").ToBoolean().Value();
  auto bag = std::make_shared<TensorBag>();
  bag->obj = info[1].As<Napi::Object>();
  auto src = std::make_shared<deberta::ModelSrc>();
  src->cfg = c;
  src->wtype = bf16 ? DType::BF16 : DType::F32;
  const size_t D = size_t(c.D), F = size_t(c.F);
  auto W = [&](const std::string& n, size_t elems) {
    bool isbf = false;
    const void* p = bag->get(n, elems, true, &isbf);
    if (isbf != bf16) throw_type(env, "tensor " + n + (bf16 ? " must be bf16 (Uint16Array)" : " must be Float32Array"));
    return p;
  };
  src->word_emb = W("embeddings.word_embeddings.weight", size_t(c.V) * D);
  if (c.feat_rows > 0) src->feat_emb = bag->f32("embeddings.word_feature_embeddings.weight", size_t(c.feat_rows) * D);
  src->emb_ln_w = bag->f32("embeddings.LayerNorm.weight", D);
  src->emb_ln_b = bag->f32("embeddings.LayerNorm.bias", D);
  Napi::Value rel = bag->obj.Get("encoder.rel_embeddings.weight");
  if (!rel.IsTypedArray()) throw_type(env, "tensor encoder.rel_embeddings.weight missing");
  size_t rel_elems = rel.As<Napi::TypedArray>().ElementLength();
  src->rel_rows = int64_t(rel_elems / D);
  src->rel_emb = bag->f32("encoder.rel_embeddings.weight", size_t(src->rel_rows) * D);
  if (bag->obj.Has("encoder.LayerNorm.weight")) {
    src->rel_ln_w = bag->f32("encoder.LayerNorm.weight", D);
    src->rel_ln_b = bag->f32("encoder.LayerNorm.bias", D);
  }
  for (int64_t l = 0; l < c.L; l++) {
    std::string p = "encoder.layer." + std::to_string(l) + ".";
    deberta::LayerSrc s;
    s.wq = W(p + "attention.self.query_proj.weight", D * D);
    s.wk = W(p + "attention.self.key_proj.weight", D * D);
    s.wv = W(p + "attention.self.value_proj.weight", D * D);
    s.wo = W(p + "attention.output.dense.weight", D * D);
    s.wi = W(p + "intermediate.dense.weight", F * D);
    s.wout = W(p + "output.dense.weight", D * F);
    s.bq = bag->f32(p + "attention.self.query_proj.bias", D);
    s.bk = bag->f32(p + "attention.self.key_proj.bias", D);
    s.bv = bag->f32(p + "attention.self.value_proj.bias", D);
    s.bo = bag->f32(p + "attention.output.dense.bias", D);
    s.bi = bag->f32(p + "intermediate.dense.bias", F);
    s.bout = bag->f32(p + "output.dense.bias", D);
    s.ln1_w = bag->f32(p + "attention.output.LayerNorm.weight", D);
    s.ln1_b = bag->f32(p + "attention.output.LayerNorm.bias", D);
    s.ln2_w = bag->f32(p + "output.LayerNorm.weight", D);
    s.ln2_b = bag->f32(p + "output.LayerNorm.bias", D);
    src->layers.push_back(s);
  }
  auto result = std::make_shared<std::shared_ptr<Model>>();
  std::vector<Napi::ObjectReference> keep = std::move(bag->keep);
  return run_async(
      env, [src, result]() { *result = std::shared_ptr<Model>(deberta::model_create(*src).release()); },
      [result](Napi::Env env) { return wrap<Model>(env, *result); }, std::move(keep));
}

Napi::Value DebertaForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto m = unwrap<Model>(info[0], "deberta");
  auto ids = array_arg<int32_t>(info[1], "ids", false, true);
  auto mask = array_arg<uint8_t>(info[2], "mask", false, true);
  int64_t B = int_arg(info[3], "B"), N = int_arg(info[4], "N");
  bool hs = info.Length() > 5 && info[5].ToBoolean().Value();
  auto feats = array_arg<int32_t>(info.Length() > 6 ? info[6] : env.Undefined(), "feats", true, true);
  auto groups = array_arg<int32_t>(info.Length() > 7 ? info[7] : env.Undefined(), "groups", true, true);
  auto bags = array_arg<int32_t>(info.Length() > 8 ? info[8] : env.Undefined(), "bags", true, true);
  if (B < 0 || N < 0) throw_range(env, "B and N must be >= 0");
  if (groups.data) check_len(env, groups.length, size_t(B * N), "groups");
  const int64_t KB = bags.data ? cols_of(env, bags.length, size_t(B * N), "bags") : 0;
  check_len(env, ids.length, size_t(B * N), "ids");
  check_len(env, mask.length, size_t(B * N), "mask");
  const int64_t KF = m->cfg.feat_rows > 0 ? m->cfg.feat_cols : 0;
  if (feats.data && KF) check_len(env, feats.length, size_t(B * N * KF), "feats");
  const int32_t* fp = feats.data && KF ? feats.data : nullptr;
  const int64_t D = m->cfg.D, L = m->cfg.L;
  size_t n_out = size_t(B * N * D) * (hs ? size_t(L + 1) : 1);
  auto out = std::make_shared<std::vector<float>>();  // sized on the worker: a failed allocation rejects
  std::vector<Napi::ObjectReference> keep;
  keep.push_back(std::move(ids.ref));
  keep.push_back(std::move(mask.ref));
  if (feats.data) keep.push_back(std::move(feats.ref));
  const int32_t* gp = groups.data;
  if (groups.data) keep.push_back(std::move(groups.ref));
  const int32_t* bp = KB ? bags.data : nullptr;
  if (bags.data) keep.push_back(std::move(bags.ref));
  const int32_t* idp = ids.data;
  const uint8_t* mp = mask.data;
  return run_async(
      env,
      [m, out, idp, mp, fp, gp, bp, KB, B, N, hs, D, L, n_out]() {
        out->resize(n_out);
        if (hs) {
          std::vector<float> last(size_t(B * N * D));
          deberta::forward(*m, B, N, idp, mp, last.data(), out->data(), nullptr, fp, gp, bp, KB);
        } else {
          deberta::forward(*m, B, N, idp, mp, out->data(), nullptr, nullptr, fp, gp, bp, KB);
        }
        (void)L;
      },
      [out](Napi::Env env) {
        auto arr = Napi::Float32Array::New(env, out->size());
        std::memcpy(arr.Data(), out->data(), out->size() * 4);
        return Napi::Value(arr);
      },
      std::move(keep));
}

Napi::Value DebertaRelIndex(const Napi::CallbackInfo& info) {
  deberta::Config c;
  if (info[0].IsObject()) {
    Napi::Object o = info[0].As<Napi::Object>();
    c.position_buckets = obj_int(o, "positionBuckets", 256);
    c.max_relative_positions = obj_int(o, "maxRelativePositions", -1);
    c.max_position_embeddings = obj_int(o, "maxPositionEmbeddings", 512);
  }
  int64_t rel = int_arg(info[1], "rel");
  return Napi::Number::New(info.Env(), double(deberta::rel_index(c, rel)));
}

Napi::Value HeadsCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t D = int_arg(info[0], "D"), K = int_arg(info[1], "K");
  if (!info[2].IsString()) throw_type(env, "counting must be a string");
  std::string counting = info[2].As<Napi::String>();
  gliner2::Counting ct;
  if (counting == "count_lstm") ct = gliner2::Counting::Lstm;
  else if (counting == "count_lstm_v2") ct = gliner2::Counting::LstmV2;
  else if (counting == "count_lstm_moe") ct = gliner2::Counting::Moe;
  else throw_type(env, "unsupported counting layer " + counting);
  int64_t experts = 0, inner = 0;
  if (ct == gliner2::Counting::Moe) {
    experts = int_arg(info[4], "experts");
    inner = int_arg(info[5], "inner");
    if (experts <= 0 || inner <= 0) throw_range(env, "count_lstm_moe: experts and inner must be positive");
  }
  if (!info[3].IsObject()) throw_type(env, "tensors must be an object");
  Napi::Object o = info[3].As<Napi::Object>();
  auto tensors = std::make_shared<std::map<std::string, const float*>>();
  std::vector<Napi::ObjectReference> keep;
  Napi::Array names = o.GetPropertyNames();
  for (uint32_t i = 0; i < names.Length(); i++) {
    std::string n = names.Get(i).As<Napi::String>();
    auto a = array_arg<float>(o.Get(n), n.c_str(), false, true);
    (*tensors)[n] = a.data;
    keep.push_back(std::move(a.ref));
  }
  auto result = std::make_shared<std::shared_ptr<Heads>>();
  return run_async(
      env, [=]() { *result = std::shared_ptr<Heads>(gliner2::heads_create(D, K, ct, *tensors, experts, inner).release()); },
      [result](Napi::Env env) { return wrap<Heads>(env, *result); }, std::move(keep));
}

Napi::Float32Array to_f32(Napi::Env env, const std::vector<float>& v) {
  auto a = Napi::Float32Array::New(env, v.size());
  if (!v.empty()) std::memcpy(a.Data(), v.data(), v.size() * 4);
  return a;
}

Napi::Value HeadsRun(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto h = unwrap<Heads>(info[0], "gliner2 heads");
  auto words = array_arg<float>(info[1], "words", false, true);
  auto woff = array_arg<int32_t>(info[2], "woff", false, true);
  auto sSample = array_arg<int32_t>(info[3], "segSample", false, true);
  auto sKind = array_arg<int32_t>(info[4], "segKind", false, true);
  auto sM = array_arg<int32_t>(info[5], "segM", false, true);
  auto sEmbs = array_arg<float>(info[6], "segEmbs", false, true);
  bool want_rep = info.Length() > 7 && info[7].ToBoolean().Value();
  const int64_t D = h->D;
  if (woff.length < 1) throw_range(env, "woff must have B+1 entries");
  const int64_t B = int64_t(woff.length) - 1;
  std::vector<int64_t> wo(woff.length);
  for (size_t i = 0; i < woff.length; i++) {
    wo[i] = woff.data[i];
    if (i > 0 && wo[i] < wo[i - 1]) throw_range(env, "woff must be non-decreasing");
  }
  check_len(env, words.length, size_t(wo[size_t(B)] * D), "words");
  const size_t S = sSample.length;
  if (sKind.length != S || sM.length != S) throw_range(env, "segment arrays must have the same length");
  auto segs = std::make_shared<std::vector<gliner2::Segment>>(S);
  size_t row = 0;
  for (size_t s = 0; s < S; s++) {
    auto& g = (*segs)[s];
    g.sample = sSample.data[s];
    g.kind = sKind.data[s];
    g.M = sM.data[s];
    if (g.sample < 0 || g.sample >= B || g.M < 0 || (g.kind != 0 && g.kind != 1)) throw_range(env, "bad segment");
    g.embs = sEmbs.data + row * size_t(D);
    row += size_t(1 + g.M);
  }
  check_len(env, sEmbs.length, row * size_t(D), "segEmbs");
  auto outs = std::make_shared<std::vector<gliner2::SegOut>>();
  auto reps = std::make_shared<std::vector<std::vector<float>>>();
  std::vector<Napi::ObjectReference> keep;
  for (auto* r : {&words.ref, &woff.ref, &sSample.ref, &sKind.ref, &sM.ref, &sEmbs.ref}) keep.push_back(std::move(*r));
  const float* wp = words.data;
  return run_async(
      env,
      [h, wp, wo, segs, outs, reps, B, want_rep]() {
        gliner2::heads_run(*h, B, wp, wo.data(), *segs, *outs, want_rep ? reps.get() : nullptr);
      },
      [outs, reps, want_rep](Napi::Env env) {
        Napi::Object r = Napi::Object::New(env);
        size_t S = outs->size();
        auto counts = Napi::Int32Array::New(env, S);
        auto cl = Napi::Float32Array::New(env, S * 20);
        Napi::Array scores = Napi::Array::New(env, S), ce = Napi::Array::New(env, S), cls = Napi::Array::New(env, S);
        for (size_t s = 0; s < S; s++) {
          const auto& o = (*outs)[s];
          counts[s] = int32_t(o.count);
          for (size_t i = 0; i < o.count_logits.size(); i++) cl[s * 20 + i] = o.count_logits[i];
          scores.Set(uint32_t(s), to_f32(env, o.scores));
          ce.Set(uint32_t(s), to_f32(env, o.count_embed));
          cls.Set(uint32_t(s), to_f32(env, o.cls_logits));
        }
        r.Set("counts", counts);
        r.Set("countLogits", cl);
        r.Set("scores", scores);
        r.Set("countEmbed", ce);
        r.Set("cls", cls);
        if (want_rep) {
          Napi::Array sr = Napi::Array::New(env, reps->size());
          for (size_t b = 0; b < reps->size(); b++) sr.Set(uint32_t(b), to_f32(env, (*reps)[b]));
          r.Set("spanRep", sr);
        }
        return Napi::Value(r);
      },
      std::move(keep));
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("debertaCreate", Napi::Function::New(env, DebertaCreate));
  exports.Set("debertaForward", Napi::Function::New(env, DebertaForward));
  exports.Set("debertaRelIndex", Napi::Function::New(env, DebertaRelIndex));
  exports.Set("gliner2HeadsCreate", Napi::Function::New(env, HeadsCreate));
  exports.Set("gliner2HeadsRun", Napi::Function::New(env, HeadsRun));
  exports.Set("debertaFree", Napi::Function::New(env, DebertaFree));
  exports.Set("gliner2HeadsFree", Napi::Function::New(env, HeadsFree));
}

}  // namespace
LOOM_NAPI_REGISTER(encoder, Init);
}  // namespace loom::napi
