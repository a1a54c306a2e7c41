// Training bindings (native/train): one async call per micro-batch, one per optimizer step.
//
//   encTrainCreate(cfg, tensors, lora|null) → handle
//       cfg: {D, L, H, F, V, positionBuckets, maxRelativePositions, maxPositionEmbeddings, eps, c2p, p2c, K, relLn,
//             counting ('count_lstm' | 'count_lstm_v2'), countHidden, countFF (v2 widths),
//             pooling ('first' | 'mean' | 'max'), featRows, featCols (word features, 0 = none)}
//       tensors: {checkpoint name → Float32Array} (a count_lstm or count_lstm_v2 GLiNER2 checkpoint)
//       lora: {r, alpha, dropout, targets: string[] (full module names), seed}
//   encTrainStep(handle, batch) → Promise<{loss, span, count, cls}>
//       batch: {B, N, ids Int32Array, mask Uint8Array, woff Int32Array (B+1), wordRows Int32Array, wordEnd? Int32Array,
//               segSample/segKind/segM/segCount Int32Array, segCountLoss Uint8Array, segRows Int32Array (Σ(1+M)),
//               pos Int32Array (5-tuples seg,t,m,i,k), clsY Float32Array, backward, dropNeg, gradScale, seed,
//               hiddenDropout, attentionDropout, feats? Int32Array (B*N*featCols, -1 = none),
//               groups? Int32Array (B*N): label-isolation groups (deberta.h group_positions),
//               bags? Int32Array (B*N*cols): label bags (word-table rows, -1 = none; ops.h bag_embedding_fwd)}
//   llamaTrainCreate(cfg, tensors, loras) → handle
//       cfg: {vocab, hidden, inter, layers, heads, kvHeads, headDim, eps, ropeTheta, rope?, qkvBias}
//       tensors: {HF name → Float32Array | Uint16Array (bf16 bits)}
//       loras: [{layer, module (0..6: q,k,v,o,gate,up,down), r, scale, dropout, A Float32Array, B Float32Array}]
//   llamaTrainStep(handle, {tokens, positions, labels, seqOff Int32Array, backward, gradScale, seed, wantLogits})
//       → Promise<{loss, counted, logits?: Float32Array (R*V)}>   (SFT: forward + cross-entropy + backward)
//   llamaTrainForward(handle, {tokens, positions, labels, seqOff Int32Array, seqParent? Int32Array (a sequence
//                              continuing a shared prompt: llama_train.h FwdIn), keep, lora, dropout, seed, wantLogits,
//                              temperature (log-probs of logits / temperature, as TRL's GRPO scores samples)})
//       → Promise<{logp: Float32Array (R), logits?}>: per-row log-probability of each label (0 where label < 0);
//       with keep the activations stay on the handle for llamaTrainBackward (replacing pending ones);
//       lora: false runs the base model alone (the reference policy)
//   llamaTrainBackward(handle, dlogp Float32Array (R)) → Promise<void>: the loss's gradient w.r.t. those
//       log-probabilities; LoRA gradients accumulate (trainZeroGrad clears them)
//   trainParams(handle) → [{name, shape, trainable, group}]
//   trainGet(handle, name, grad=false) → Float32Array (copy) ; trainSet(handle, name, Float32Array)
//   trainZeroGrad(handle)
//   trainOptimStep(handle, {lr: number[], wd, b1, b2, eps, maxGradNorm, step, emaDecay?}) → Promise<number> (pre-clip
//       grad norm); emaDecay in (0, 1) also moves the weights' moving average after the step (ParamStore::ema_update)
//   trainEmaSwap(handle) → boolean: exchanges the weights and their moving average (false: no average yet)
// Calls on one handle are serialized by a mutex, so a step and an optimizer update never overlap.
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <memory>
#include <mutex>
#include <string>
#include "../train/encoder_train.h"
#include "../train/llama_train.h"
#include "napi_util.h"

namespace loom::napi {
namespace {

using namespace loom::train;

struct TrainHandle {
  std::unique_ptr<encoder::Model> enc;
  std::unique_ptr<llama::Model> dec;
  llama::Acts dec_acts;  // the last forward that kept its activations (until its backward)
  std::mutex mu;
  ParamStore& ps() { return enc ? enc->ps : dec->ps; }
};
struct Box {
  std::shared_ptr<TrainHandle> h;
};

Napi::Value wrap(Napi::Env env, std::shared_ptr<TrainHandle> h) {
  return Napi::External<Box>::New(env, new Box{std::move(h)}, [](Napi::Env, Box* b) { delete b; });
}
std::shared_ptr<TrainHandle> unwrap(const Napi::Value& v) {
  if (!v.IsExternal()) throw_type(v.Env(), "training handle expected");
  Box* b = v.As<Napi::External<Box>>().Data();
  if (!b || !b->h) throw_type(v.Env(), "training handle is invalid");
  return b->h;
}

Napi::Object obj(const Napi::Value& v, const char* name) {
  if (!v.IsObject()) throw_type(v.Env(), std::string(name) + " must be an object");
  return v.As<Napi::Object>();
}
int64_t get_int(const Napi::Object& o, const char* k, int64_t def, bool required = false) {
  Napi::Value v = o.Get(k);
  if (v.IsUndefined() || v.IsNull()) {
    if (required) throw_type(o.Env(), std::string(k) + " is required");
    return def;
  }
  return int_arg(v, k);
}
double get_num(const Napi::Object& o, const char* k, double def) {
  Napi::Value v = o.Get(k);
  if (v.IsUndefined() || v.IsNull()) return def;
  return num_arg(v, k);
}
bool get_bool(const Napi::Object& o, const char* k, bool def) {
  Napi::Value v = o.Get(k);
  if (v.IsUndefined() || v.IsNull()) return def;
  return bool_arg(v, k);
}
template <typename T>
std::vector<T> get_vec(const Napi::Object& o, const char* k, bool optional = false) {
  ArrayArg<T> a = array_arg<T>(o.Get(k), k, optional);
  return std::vector<T>(a.data, a.data + a.length);
}

// ---- encoder ----
Napi::Value EncTrainCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object c = obj(info[0], "config");
  encoder::Config cfg;
  cfg.deb.D = get_int(c, "D", 0, true);
  cfg.deb.L = get_int(c, "L", 0, true);
  cfg.deb.H = get_int(c, "H", 0, true);
  cfg.deb.F = get_int(c, "F", 0, true);
  cfg.deb.V = get_int(c, "V", 0, true);
  cfg.deb.position_buckets = get_int(c, "positionBuckets", 256);
  cfg.deb.max_relative_positions = get_int(c, "maxRelativePositions", -1);
  cfg.deb.max_position_embeddings = get_int(c, "maxPositionEmbeddings", 512);
  cfg.deb.eps = float(get_num(c, "eps", 1e-7));
  cfg.deb.c2p = get_bool(c, "c2p", true);
  cfg.deb.p2c = get_bool(c, "p2c", true);
  cfg.K = get_int(c, "K", 8);
  cfg.rel_ln = get_bool(c, "relLn", true);
  cfg.deb.feat_rows = get_int(c, "featRows", 0);
  cfg.deb.feat_cols = get_int(c, "featCols", 0);
  {
    Napi::Value cv = c.Get("counting"), pv = c.Get("pooling");
    const std::string counting = cv.IsString() ? cv.As<Napi::String>().Utf8Value() : "count_lstm";
    const std::string pooling = pv.IsString() ? pv.As<Napi::String>().Utf8Value() : "first";
    if (counting == "count_lstm_v2") cfg.counting = encoder::Counting::LstmV2;
    else if (counting != "count_lstm") throw_range(env, "counting must be count_lstm or count_lstm_v2");
    if (pooling == "mean") cfg.pooling = encoder::Pooling::Mean;
    else if (pooling == "max") cfg.pooling = encoder::Pooling::Max;
    else if (pooling != "first") throw_range(env, "pooling must be first, mean or max");
    cfg.count_T = get_int(c, "countHidden", 128);
    cfg.count_FF = get_int(c, "countFF", 2 * cfg.count_T);
    Napi::Value prv = c.Get("precision");
    const std::string precision = prv.IsString() ? prv.As<Napi::String>().Utf8Value() : "fp32";
    if (precision != "fp32" && precision != "bf16") throw_range(env, "precision must be fp32 or bf16");
    cfg.bf16 = precision == "bf16";
  }
  Napi::Object t = obj(info[1], "tensors");
  std::vector<std::pair<std::string, const float*>> tensors;
  std::vector<ArrayArg<float>> keep;
  Napi::Array names = t.GetPropertyNames();
  for (uint32_t i = 0; i < names.Length(); i++) {
    std::string n = names.Get(i).As<Napi::String>().Utf8Value();
    keep.push_back(array_arg<float>(t.Get(n), n.c_str()));
    tensors.emplace_back(n, keep.back().data);
  }
  encoder::LoraCfg lc;
  if (info.Length() > 2 && info[2].IsObject()) {
    Napi::Object l = info[2].As<Napi::Object>();
    lc.enabled = true;
    lc.r = get_int(l, "r", 8);
    lc.alpha = float(get_num(l, "alpha", 16));
    lc.dropout = float(get_num(l, "dropout", 0));
    lc.seed = uint64_t(get_int(l, "seed", 42));
    if (lc.r <= 0) throw_range(env, "lora r must be positive");
    Napi::Value tv = l.Get("targets");
    if (!tv.IsArray()) throw_type(env, "lora.targets must be an array of module names");
    Napi::Array ta = tv.As<Napi::Array>();
    for (uint32_t i = 0; i < ta.Length(); i++) lc.targets.insert(ta.Get(i).As<Napi::String>().Utf8Value());
  }
  auto h = std::make_shared<TrainHandle>();
  try {
    h->enc = encoder::model_create(cfg, tensors, lc);
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
  return wrap(env, h);
}

Napi::Value EncTrainStep(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto h = unwrap(info[0]);
  if (!h->enc) throw_type(env, "not an encoder training handle");
  Napi::Object b = obj(info[1], "batch");
  auto in = std::make_shared<encoder::StepIn>();
  in->B = get_int(b, "B", 0, true);
  in->N = get_int(b, "N", 0, true);
  auto ids = std::make_shared<std::vector<int32_t>>(get_vec<int32_t>(b, "ids"));
  auto mask = std::make_shared<std::vector<uint8_t>>(get_vec<uint8_t>(b, "mask"));
  check_len(env, ids->size(), size_t(in->B * in->N), "ids");
  check_len(env, mask->size(), size_t(in->B * in->N), "mask");
  auto feats = std::make_shared<std::vector<int32_t>>(get_vec<int32_t>(b, "feats", true));
  const int64_t KF = h->enc->feat_emb ? h->enc->cfg.deb.feat_cols : 0;
  if (!feats->empty() && KF) check_len(env, feats->size(), size_t(in->B * in->N * KF), "feats");
  if (!feats->empty() && KF) in->feats = feats->data();
  auto groups = std::make_shared<std::vector<int32_t>>(get_vec<int32_t>(b, "groups", true));
  if (!groups->empty()) check_len(env, groups->size(), size_t(in->B * in->N), "groups");
  if (!groups->empty()) in->groups = groups->data();
  auto bags = std::make_shared<std::vector<int32_t>>(get_vec<int32_t>(b, "bags", true));
  in->bag_cols = bags->empty() ? 0 : cols_of(env, bags->size(), size_t(in->B * in->N), "bags");
  if (in->bag_cols) in->bags = bags->data();
  for (int32_t v : get_vec<int32_t>(b, "woff")) in->woff.push_back(v);
  for (int32_t v : get_vec<int32_t>(b, "wordRows")) in->word_rows.push_back(v);
  for (int32_t v : get_vec<int32_t>(b, "wordEnd", true)) in->word_end.push_back(v);
  auto ss = get_vec<int32_t>(b, "segSample"), sk = get_vec<int32_t>(b, "segKind"), sm = get_vec<int32_t>(b, "segM"),
       sc = get_vec<int32_t>(b, "segCount"), sr = get_vec<int32_t>(b, "segRows");
  auto scl = get_vec<uint8_t>(b, "segCountLoss");
  auto ssm = get_vec<uint8_t>(b, "segSoftmax", true);
  size_t nseg = ss.size(), ro = 0;
  if (sk.size() != nseg || sm.size() != nseg || sc.size() != nseg || scl.size() != nseg)
    throw_range(env, "segment arrays must have the same length");
  if (!ssm.empty() && ssm.size() != nseg) throw_range(env, "segSoftmax must have one entry per segment");
  for (size_t s = 0; s < nseg; s++) {
    encoder::Seg g;
    g.sample = ss[s];
    g.kind = sk[s];
    g.M = sm[s];
    g.count = sc[s];
    g.count_loss = scl[s] != 0;
    g.softmax = !ssm.empty() && ssm[s] != 0;
    if (g.M < 0 || ro + size_t(1 + g.M) > sr.size()) throw_range(env, "segRows too short");
    g.rows.assign(sr.begin() + long(ro), sr.begin() + long(ro + 1 + g.M));
    ro += size_t(1 + g.M);
    in->segs.push_back(std::move(g));
  }
  in->pos = get_vec<int32_t>(b, "pos", true);
  in->cls_y = get_vec<float>(b, "clsY", true);
  in->backward = get_bool(b, "backward", true);
  in->drop_neg = get_bool(b, "dropNeg", true);
  in->neg_keep = float(get_num(b, "negKeep", 0.5));
  if (!(in->neg_keep > 0 && in->neg_keep <= 1)) throw_range(env, "negKeep must be in (0, 1]");
  in->neg_hard = int(get_num(b, "negHard", 0));
  if (in->neg_hard < 0 || in->neg_hard > 2) throw_range(env, "negHard must be 0, 1 or 2");
  in->grad_scale = float(get_num(b, "gradScale", 1.0));
  in->hidden_dropout = float(get_num(b, "hiddenDropout", 0.0));
  in->attention_dropout = float(get_num(b, "attentionDropout", 0.0));
  const bool ok_h = in->hidden_dropout >= 0 && in->hidden_dropout < 1;
  const bool ok_a = in->attention_dropout >= 0 && in->attention_dropout < 1;
  if (!ok_h || !ok_a)
    throw_range(env, "hiddenDropout and attentionDropout must be in [0, 1)");
  in->seed = uint64_t(get_num(b, "seed", 0));
  in->ids = ids->data();
  in->mask = mask->data();
  auto out = std::make_shared<encoder::StepOut>();
  return run_async(
      env,
      [h, in, out, ids, mask, feats, groups, bags]() {
        std::lock_guard<std::mutex> lk(h->mu);
        encoder::step(*h->enc, *in, *out);
      },
      [out](Napi::Env e) {
        Napi::Object r = Napi::Object::New(e);
        r.Set("loss", out->loss);
        r.Set("span", out->span);
        r.Set("count", out->count);
        r.Set("cls", out->cls);
        auto lg = Napi::Float32Array::New(e, out->cls_logits.size());
        std::copy(out->cls_logits.begin(), out->cls_logits.end(), lg.Data());
        r.Set("clsLogits", lg);
        return r;
      });
}

// ---- decoder ----
Napi::Value LlamaTrainCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object c = obj(info[0], "config");
  llama::Config cfg;
  cfg.vocab = get_int(c, "vocab", 0, true);
  cfg.hidden = get_int(c, "hidden", 0, true);
  cfg.inter = get_int(c, "inter", 0, true);
  cfg.layers = get_int(c, "layers", 0, true);
  cfg.n_heads = get_int(c, "heads", 0, true);
  cfg.n_kv_heads = get_int(c, "kvHeads", cfg.n_heads);
  cfg.head_dim = get_int(c, "headDim", cfg.hidden / std::max<int64_t>(cfg.n_heads, 1));
  cfg.eps = float(get_num(c, "eps", 1e-6));
  cfg.rope_theta = float(get_num(c, "ropeTheta", 10000));
  cfg.qkv_bias = get_bool(c, "qkvBias", false);
  Napi::Value rv = c.Get("rope");
  if (rv.IsObject()) {
    Napi::Object r = rv.As<Napi::Object>();
    cfg.rope.type = int(get_int(r, "type", 0));
    cfg.rope.factor = float(get_num(r, "factor", 1));
    cfg.rope.low_freq_factor = float(get_num(r, "lowFreqFactor", 1));
    cfg.rope.high_freq_factor = float(get_num(r, "highFreqFactor", 4));
    cfg.rope.original_max_position = int(get_int(r, "originalMaxPosition", 8192));
  }
  Napi::Object t = obj(info[1], "tensors");
  std::vector<llama::TensorSrc> tensors;
  Napi::Array names = t.GetPropertyNames();
  for (uint32_t i = 0; i < names.Length(); i++) {
    std::string n = names.Get(i).As<Napi::String>().Utf8Value();
    Napi::Value v = t.Get(n);
    llama::TensorSrc s;
    s.name = n;
    if (v.IsTypedArray() && v.As<Napi::TypedArray>().TypedArrayType() == napi_uint16_array) {
      auto a = array_arg<uint16_t>(v, n.c_str());
      s.dtype = DType::BF16;
      s.data = a.data;
      s.numel = int64_t(a.length);
    } else {
      auto a = array_arg<float>(v, n.c_str());
      s.data = a.data;
      s.numel = int64_t(a.length);
    }
    tensors.push_back(s);
  }
  std::vector<llama::LoraSrc> loras;
  if (info.Length() > 2 && info[2].IsArray()) {
    Napi::Array la = info[2].As<Napi::Array>();
    for (uint32_t i = 0; i < la.Length(); i++) {
      Napi::Object l = obj(la.Get(i), "lora");
      llama::LoraSrc s;
      s.layer = get_int(l, "layer", 0, true);
      s.module = int(get_int(l, "module", 0, true));
      s.r = get_int(l, "r", 0, true);
      s.scale = float(get_num(l, "scale", 1));
      s.dropout = float(get_num(l, "dropout", 0));
      auto A = array_arg<float>(l.Get("A"), "A");
      auto B = array_arg<float>(l.Get("B"), "B");
      s.A = A.data;
      s.B = B.data;
      s.a_len = int64_t(A.length);
      s.b_len = int64_t(B.length);
      loras.push_back(s);
    }
  }
  Napi::Value prv = c.Get("precision");
  const std::string precision = prv.IsString() ? prv.As<Napi::String>().Utf8Value() : "fp32";
  if (precision != "fp32" && precision != "bf16") throw_range(env, "precision must be fp32 or bf16");
  auto h = std::make_shared<TrainHandle>();
  try {
    h->dec = llama::model_create(cfg, tensors, loras);
    if (precision == "bf16") {  // the base weights' products (layers and lm_head) in bf16 compute
      for (auto& L : h->dec->layers)
        for (TLinear& l : L.lin) l.bf16 = true;
      h->dec->lm_head.bf16 = true;
    }
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
  return wrap(env, h);
}

// A packed batch's rows as LlamaTrainStep and LlamaTrainForward take them: {tokens, positions, labels, seqOff}
// (R rows each, S+1 offsets). Fills in's row pointers (into the returned arrays, which the async work keeps
// alive) and seq_off.
struct BatchRows {
  std::vector<int32_t> tokens, positions, labels;
};
template <typename In>
std::shared_ptr<BatchRows> batch_rows(Napi::Env env, Napi::Object b, In& in) {
  auto r = std::make_shared<BatchRows>();
  r->tokens = get_vec<int32_t>(b, "tokens");
  r->positions = get_vec<int32_t>(b, "positions");
  r->labels = get_vec<int32_t>(b, "labels");
  if (r->positions.size() != r->tokens.size() || r->labels.size() != r->tokens.size())
    throw_range(env, "tokens, positions and labels must have the same length");
  in.R = int64_t(r->tokens.size());
  in.tokens = r->tokens.data();
  in.positions = r->positions.data();
  in.labels = r->labels.data();
  for (int32_t v : get_vec<int32_t>(b, "seqOff")) in.seq_off.push_back(v);
  return r;
}

Napi::Value LlamaTrainStep(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto h = unwrap(info[0]);
  if (!h->dec) throw_type(env, "not a decoder training handle");
  Napi::Object b = obj(info[1], "batch");
  auto in = std::make_shared<llama::StepIn>();
  auto rows = batch_rows(env, b, *in);
  in->backward = get_bool(b, "backward", true);
  in->grad_scale = float(get_num(b, "gradScale", 1));
  in->seed = uint64_t(get_num(b, "seed", 0));
  bool want = get_bool(b, "wantLogits", false);
  auto out = std::make_shared<llama::StepOut>();
  return run_async(
      env,
      [h, in, out, rows, want]() {
        std::lock_guard<std::mutex> lk(h->mu);
        llama::step(*h->dec, *in, *out, want);
      },
      [out, want](Napi::Env e) {
        Napi::Object r = Napi::Object::New(e);
        r.Set("loss", out->loss);
        r.Set("counted", double(out->counted));
        if (want) {
          auto a = Napi::Float32Array::New(e, out->logits.size());
          std::memcpy(a.Data(), out->logits.data(), out->logits.size() * 4);
          r.Set("logits", a);
        }
        return r;
      });
}

// ---- shared ----
Napi::Value TrainParams(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto h = unwrap(info[0]);
  std::lock_guard<std::mutex> lk(h->mu);
  const auto& list = h->ps().list();
  Napi::Array out = Napi::Array::New(env, list.size());
  for (size_t i = 0; i < list.size(); i++) {
    const Param& p = *list[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", p.name);
    Napi::Array sh = Napi::Array::New(env, p.shape.size());
    for (size_t j = 0; j < p.shape.size(); j++) sh.Set(uint32_t(j), double(p.shape[j]));
    o.Set("shape", sh);
    o.Set("trainable", p.trainable);
    o.Set("group", p.group);
    out.Set(uint32_t(i), o);
  }
  return out;
}

Napi::Value TrainGet(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto h = unwrap(info[0]);
  std::string name = info[1].As<Napi::String>().Utf8Value();
  bool grad = info.Length() > 2 && info[2].IsBoolean() && info[2].As<Napi::Boolean>().Value();
  std::lock_guard<std::mutex> lk(h->mu);
  Param* p = h->ps().find(name);
  if (!p) throw_range(env, "no parameter " + name);
  const auto& v = grad ? p->g : p->w;
  auto a = Napi::Float32Array::New(env, v.size());
  std::memcpy(a.Data(), v.data(), v.size() * 4);
  return a;
}

Napi::Value TrainSet(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto h = unwrap(info[0]);
  std::string name = info[1].As<Napi::String>().Utf8Value();
  auto a = array_arg<float>(info[2], "value");
  std::lock_guard<std::mutex> lk(h->mu);
  Param* p = h->ps().find(name);
  if (!p) throw_range(env, "no parameter " + name);
  if (a.length != p->w.size()) throw_range(env, "value for " + name + " has the wrong size");
  std::memcpy(p->w.data(), a.data, a.length * 4);
  return env.Undefined();
}

Napi::Value TrainZeroGrad(const Napi::CallbackInfo& info) {
  auto h = unwrap(info[0]);
  std::lock_guard<std::mutex> lk(h->mu);
  h->ps().zero_grad();
  return info.Env().Undefined();
}

Napi::Value TrainOptimStep(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto h = unwrap(info[0]);
  Napi::Object o = obj(info[1], "options");
  auto lr = std::make_shared<std::vector<double>>();
  Napi::Value lv = o.Get("lr");
  if (lv.IsNumber()) lr->push_back(lv.As<Napi::Number>().DoubleValue());
  else if (lv.IsArray()) {
    Napi::Array la = lv.As<Napi::Array>();
    for (uint32_t i = 0; i < la.Length(); i++) lr->push_back(num_arg(la.Get(i), "lr"));
  }
  if (lr->empty()) throw_type(env, "options.lr must be a number or an array of numbers");
  double wd = get_num(o, "wd", 0.01), b1 = get_num(o, "b1", 0.9), b2 = get_num(o, "b2", 0.999),
         eps = get_num(o, "eps", 1e-8), mx = get_num(o, "maxGradNorm", 1.0);
  int64_t stepn = get_int(o, "step", 0, true);
  if (stepn < 1) throw_range(env, "step must be >= 1");
  double ema = get_num(o, "emaDecay", 0);
  if (!(ema >= 0 && ema < 1)) throw_range(env, "emaDecay must be in [0, 1)");
  auto norm = std::make_shared<double>(0);
  return run_async(
      env,
      [h, lr, wd, b1, b2, eps, mx, stepn, ema, norm]() {
        std::lock_guard<std::mutex> lk(h->mu);
        *norm = h->ps().optimizer_step(lr->data(), int(lr->size()), wd, b1, b2, eps, mx, stepn);
        if (ema > 0) h->ps().ema_update(ema);
      },
      [norm](Napi::Env e) { return Napi::Number::New(e, *norm); });
}

Napi::Value TrainEmaSwap(const Napi::CallbackInfo& info) {
  auto h = unwrap(info[0]);
  std::lock_guard<std::mutex> lk(h->mu);
  return Napi::Boolean::New(info.Env(), h->ps().ema_swap());
}

Napi::Value LlamaTrainForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto h = unwrap(info[0]);
  if (!h->dec) throw_type(env, "not a decoder training handle");
  Napi::Object b = obj(info[1], "batch");
  auto in = std::make_shared<llama::FwdIn>();
  auto rows = batch_rows(env, b, *in);
  if (b.Has("seqParent") && !b.Get("seqParent").IsUndefined())
    for (int32_t v : get_vec<int32_t>(b, "seqParent")) in->seq_parent.push_back(v);
  in->keep = get_bool(b, "keep", true);
  in->lora = get_bool(b, "lora", true);
  in->dropout = get_bool(b, "dropout", in->keep);
  in->seed = uint64_t(get_num(b, "seed", 0));
  bool want = get_bool(b, "wantLogits", false);
  in->all_logits = want;
  const float scale = float(1.0 / get_num(b, "temperature", 1.0));
  if (!(scale > 0.0f) || !std::isfinite(scale)) throw_range(env, "temperature must be a positive number");
  auto logp = std::make_shared<std::vector<float>>();
  auto logits = std::make_shared<std::vector<float>>();
  return run_async(
      env,
      [h, in, rows, want, logp, logits, scale]() {
        std::lock_guard<std::mutex> lk(h->mu);
        llama::Acts& a = in->keep ? h->dec_acts : llama::spare_acts(*h->dec);
        llama::forward(*h->dec, *in, a);
        if (scale != 1.0f) scale_fwd(int64_t(a.logits.size()), a.logits.data(), scale, a.logits.data());
        a.logit_scale = scale;
        logp->resize(size_t(in->R));
        llama::head_logprob_fwd(a, h->dec->cfg.vocab, logp->data());
        if (want) *logits = a.logits;
      },
      [logp, logits, want](Napi::Env e) {
        Napi::Object r = Napi::Object::New(e);
        auto a = Napi::Float32Array::New(e, logp->size());
        std::memcpy(a.Data(), logp->data(), logp->size() * 4);
        r.Set("logp", a);
        if (want) {
          auto l = Napi::Float32Array::New(e, logits->size());
          std::memcpy(l.Data(), logits->data(), logits->size() * 4);
          r.Set("logits", l);
        }
        return r;
      });
}

Napi::Value LlamaTrainBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto h = unwrap(info[0]);
  if (!h->dec) throw_type(env, "not a decoder training handle");
  auto dlogp = std::make_shared<std::vector<float>>();
  {
    auto a = array_arg<float>(info[1], "dlogp");
    dlogp->assign(a.data, a.data + a.length);
  }
  return run_async(
      env,
      [h, dlogp]() {
        std::lock_guard<std::mutex> lk(h->mu);
        llama::Acts& a = h->dec_acts;
        if (!a.kept) throw std::logic_error("llama train: backward without a forward that kept its activations");
        if (int64_t(dlogp->size()) != a.R) throw std::invalid_argument("llama train: dlogp must have one value per row");
        const int64_t V = h->dec->cfg.vocab;
        std::vector<float>& dlogits = h->dec->work.dlogits;  // reused between steps
        dlogits.resize(a.logits.size());
        llama::head_logprob_bwd(a, V, dlogp->data(), dlogits.data());
        if (a.logit_scale != 1.0f)  // d/d(raw logits)
          scale_fwd(int64_t(dlogits.size()), dlogits.data(), a.logit_scale, dlogits.data());
        llama::backward(*h->dec, a, dlogits.data());
      },
      [](Napi::Env e) { return e.Undefined(); });
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("llamaTrainForward", Napi::Function::New(env, LlamaTrainForward));
  exports.Set("llamaTrainBackward", Napi::Function::New(env, LlamaTrainBackward));
  exports.Set("encTrainCreate", Napi::Function::New(env, EncTrainCreate));
  exports.Set("encTrainStep", Napi::Function::New(env, EncTrainStep));
  exports.Set("llamaTrainCreate", Napi::Function::New(env, LlamaTrainCreate));
  exports.Set("llamaTrainStep", Napi::Function::New(env, LlamaTrainStep));
  exports.Set("trainParams", Napi::Function::New(env, TrainParams));
  exports.Set("trainGet", Napi::Function::New(env, TrainGet));
  exports.Set("trainSet", Napi::Function::New(env, TrainSet));
  exports.Set("trainZeroGrad", Napi::Function::New(env, TrainZeroGrad));
  exports.Set("trainOptimStep", Napi::Function::New(env, TrainOptimStep));
  exports.Set("trainEmaSwap", Napi::Function::New(env, TrainEmaSwap));
}

}  // namespace
LOOM_NAPI_REGISTER(train, Init);
}  // namespace loom::napi
