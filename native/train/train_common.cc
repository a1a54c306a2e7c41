// ParamStore, TLinear and Mlp2 (see train_common.h).
#include "train_common.h"
#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace loom::train {

Param* ParamStore::add(const std::string& name, std::vector<int64_t> shape, const float* init, int group,
                       bool trainable) {
  if (by_name_.count(name)) throw std::invalid_argument("duplicate parameter " + name);
  auto p = std::make_unique<Param>();
  p->name = name;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  p->shape = std::move(shape);
  if (init) p->w.assign(init, init + n);
  else p->w.assign(size_t(n), 0.0f);
  p->g.assign(size_t(n), 0.0f);
  p->group = group;
  p->trainable = trainable;
  Param* raw = p.get();
  by_name_[name] = raw;
  list_.push_back(std::move(p));
  return raw;
}

Param* ParamStore::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Param* ParamStore::need(const std::string& name) const {
  Param* p = find(name);
  if (!p) throw std::invalid_argument("missing tensor " + name);
  return p;
}

void ParamStore::zero_grad() {
  // on the pool: one thread's memset of a GLiNER2 base model's 110 M gradients took 13 ms a step
  for (auto& p : list_) {
    float* g = p->g.data();
    parallel_for(int64_t(p->g.size()), 1 << 16, [g](int64_t i0, int64_t i1) {
      std::memset(g + i0, 0, size_t(i1 - i0) * sizeof(float));
    });
  }
}

double ParamStore::grad_norm() const {
  double s = 0.0;
  for (auto& p : list_) {
    if (!p->trainable) continue;
    double n = l2_norm(p->numel(), p->g.data());
    s += n * n;
  }
  return std::sqrt(s);
}

double ParamStore::optimizer_step(const double* lr, int n_groups, double wd, double b1, double b2, double eps,
                                  double max_norm, int64_t step) {
  double norm = grad_norm();
  // PyTorch clip_grad_norm_: coef = max_norm / (norm + 1e-6), applied when < 1.
  float coef = 1.0f;
  if (max_norm > 0 && std::isfinite(norm)) {
    double c = max_norm / (norm + 1e-6);
    if (c < 1.0) coef = float(c);
  }
  for (auto& p : list_) {
    if (!p->trainable) continue;
    if (p->m.empty()) {
      p->m.assign(p->w.size(), 0.0f);
      p->v.assign(p->w.size(), 0.0f);
    }
    double l = lr[std::min(p->group, n_groups - 1)];
    // the clipped gradient g·coef is what the step reads; g is left unscaled (a pass of its own over every
    // gradient: 1.4 % of a GLiNER2 base bf16 training step)
    adamw_step(p->numel(), p->w.data(), p->g.data(), p->m.data(), p->v.data(), l, b1, b2, eps, wd, step, coef);
  }
  return norm;
}

void ParamStore::ema_update(double decay) {
  const float d = float(decay), e = float(1.0 - decay);
  for (auto& p : list_) {
    if (!p->trainable) continue;
    if (p->ema.size() != p->w.size()) {
      p->ema = p->w;
      continue;
    }
    float* a = p->ema.data();
    const float* w = p->w.data();
    for (int64_t i = 0; i < p->numel(); i++) a[i] = d * a[i] + e * w[i];
  }
}

bool ParamStore::ema_swap() {
  bool any = false;
  for (auto& p : list_) {
    if (p->ema.size() != p->w.size()) continue;
    std::swap_ranges(p->w.begin(), p->w.end(), p->ema.begin());  // in place: pointers into w stay valid
    any = true;
  }
  return any;
}

void keep_mask(Rng& r, float p, int64_t n, uint8_t* keep) {
  const uint64_t thr = uint64_t(std::lround(double(p) * 65536.0));
  for (int64_t i = 0; i < n; i += 4) {
    const uint64_t z = r.next();
    for (int64_t k = 0; k < 4 && i + k < n; k++) keep[i + k] = ((z >> (16 * k)) & 0xFFFF) >= thr;
  }
}

void mask_scale(int64_t n, const uint8_t* keep, float s, const float* x, float* y) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * (s * float(keep[i]));
}

void TLinear::fwd(int64_t M, const float* x, float* y, LinActs* acts, Rng* rng) const {
  if (M <= 0) return;
  const float* bias = b ? b->w.data() : nullptr;
  if (wbf && bf16) linear_bf16_bf16(M, N, K, x, K, wbf, K, bias, y, N, 0.0f);
  else if (wbf) linear_bf16(M, N, K, x, K, wbf, K, bias, y, N, 0.0f);
  else linear_as(bf16, M, N, K, x, K, W->w.data(), K, bias, y, N);
  if (!has_lora()) return;
  const int64_t r = lora.r;
  const float* xin = x;
  std::vector<float> local;
  std::vector<float>* xd = acts ? &acts->xd : &local;
  if (lora.dropout > 0.0f && rng) {  // inverted dropout on the adapter's input only (PEFT)
    xd->resize(size_t(M * K));
    std::vector<uint8_t> keep_local;
    std::vector<uint8_t>& keep = acts ? acts->keep : keep_local;
    keep.resize(size_t(M * K));
    keep_mask(*rng, lora.dropout, M * K, keep.data());
    mask_scale(M * K, keep.data(), 1.0f / (1.0f - lora.dropout), x, xd->data());
    xin = xd->data();
  } else if (acts) {
    acts->xd.clear();
    acts->keep.clear();
  }
  std::vector<float> xa_local;
  std::vector<float>& xa = acts ? acts->xa : xa_local;
  xa.resize(size_t(M * r));
  sgemm(false, true, M, r, K, 1.0f, xin, K, lora.A->w.data(), K, 0.0f, xa.data(), r);          // xa = x·Aᵀ
  sgemm(false, true, M, N, r, lora.s, xa.data(), r, lora.B->w.data(), r, 1.0f, y, N);         // y += s·xa·Bᵀ
}

// dx (M, K) = dy (M, N)·W (N, K), written or accumulated; bf16 W is read in place (widened as it is packed).
static void dx_through_w(const TLinear& l, int64_t M, const float* dy, float* dx, bool acc) {
  if (l.wbf && l.bf16) {
    sgemm_bf16_bf16(M, l.K, l.N, 1.0f, dy, l.N, l.wbf, l.K, acc ? 1.0f : 0.0f, dx, l.K);
  } else if (l.wbf) {
    sgemm_bf16(M, l.K, l.N, 1.0f, dy, l.N, l.wbf, l.K, acc ? 1.0f : 0.0f, dx, l.K);
  } else {
    sgemm_as(l.bf16, false, false, M, l.K, l.N, 1.0f, dy, l.N, l.W->w.data(), l.K, acc ? 1.0f : 0.0f, dx, l.K);
  }
}

void TLinear::bwd(int64_t M, const float* x, const float* dy, float* dx, const LinActs* acts, bool accumulate_dx,
                  bool dw) const {
  if (M <= 0) return;
  if (dw) dw_add(M, x, dy);
  if (b && b->trainable) bias_bwd(M, N, dy, b->g.data());
  if (dx) dx_through_w(*this, M, dy, dx, accumulate_dx);
  if (!has_lora()) return;
  if (!acts) throw std::logic_error("TLinear::bwd: LoRA layer needs its forward activations");
  const int64_t r = lora.r;
  const bool dropped = !acts->keep.empty();
  const float* xin = dropped ? acts->xd.data() : x;
  if (lora.B->trainable) sgemm(true, false, N, r, M, lora.s, dy, N, acts->xa.data(), r, 1.0f, lora.B->g.data(), r);
  std::vector<float> dxa(size_t(M * r));
  sgemm(false, false, M, r, N, lora.s, dy, N, lora.B->w.data(), r, 0.0f, dxa.data(), r);  // dxa = s·dy·B
  if (lora.A->trainable) sgemm(true, false, r, K, M, 1.0f, dxa.data(), r, xin, K, 1.0f, lora.A->g.data(), K);
  if (!dx) return;
  if (!dropped) {
    sgemm(false, false, M, K, r, 1.0f, dxa.data(), r, lora.A->w.data(), K, 1.0f, dx, K);  // dx += dxa·A
    return;
  }
  std::vector<float> t(size_t(M * K));
  sgemm(false, false, M, K, r, 1.0f, dxa.data(), r, lora.A->w.data(), K, 0.0f, t.data(), K);
  const float inv = 1.0f / (1.0f - lora.dropout);
  const uint8_t* keep = acts->keep.data();
  for (int64_t i = 0; i < M * K; i++) dx[i] += t[size_t(i)] * (inv * float(keep[i]));  // branch-free, as mask_scale
}

void Mlp2::fwd(int64_t M, const float* x, float* y, Acts* acts, Rng* rng) const {
  std::vector<float> h_local;
  std::vector<float>& h = acts ? acts->h : h_local;
  h.resize(size_t(M * a.N));
  a.fwd(M, x, h.data(), acts ? &acts->la : nullptr, rng);
  for (auto& v : h) v = v > 0.0f ? v : 0.0f;
  b.fwd(M, h.data(), y, acts ? &acts->lb : nullptr, rng);
  if (acts) acts->x.assign(x, x + M * a.K);
}

void TLinear::dw_add(int64_t M, const float* x, const float* dy) const {
  if (M > 0 && W && W->trainable) sgemm_as(bf16, true, false, N, K, M, 1.0f, dy, N, x, K, 1.0f, W->g.data(), K);
}

void relu_bwd(int64_t n, const float* __restrict h, float* __restrict g) {
  for (int64_t i = 0; i < n; i++) {
    const float v = g[i];
    g[i] = h[i] > 0.0f ? v : 0.0f;
  }
}

void Mlp2::bwd(int64_t M, const float* dy, float* dx, Acts& acts, bool accumulate_dx, bool dw) const {
  std::vector<float>& dh = acts.dh;
  dh.resize(size_t(M * a.N));  // written in full by b.bwd
  b.bwd(M, acts.h.data(), dy, dh.data(), &acts.lb, false, dw);
  relu_bwd(int64_t(dh.size()), acts.h.data(), dh.data());
  a.bwd(M, acts.x.data(), dh.data(), dx, &acts.la, accumulate_dx, dw);
}

}  // namespace loom::train
