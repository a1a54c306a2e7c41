# PyTorch CPU anchor for `npm run bench -- train`: the same GLiNER2 span model configuration
# (DeBERTa-v2 encoder from transformers + markerV0 span head + count_pred, entity BCE summed as in
# the spec) on the same synthetic batch shapes; one training step = forward + backward + AdamW.
# a["modes"]: "fp32" and/or "bf16_autocast" (forward and loss under torch.autocast("cpu", dtype=torch.bfloat16),
# fp32 master weights and optimizer state, as bench/sft_torch.py). Prints one JSON line:
# {"fp32": {"tokens_per_s", "step_ms"}, "bf16_autocast": {...}}; each result also goes to stderr as it is measured.
import json, sys, time
import torch, torch.nn as nn
from transformers import DebertaV2Config, DebertaV2Model

a = json.loads(sys.argv[1])
torch.manual_seed(0)
torch.set_num_threads(a["threads"])
D, K, B, N, W, M = a["D"], 8, a["B"], a["N"], a["W"], a["M"]
cfg = DebertaV2Config(vocab_size=a["V"], hidden_size=D, num_hidden_layers=a["L"], num_attention_heads=a["H"], intermediate_size=a["F"],
                      relative_attention=True, position_buckets=256, max_relative_positions=-1, pos_att_type=["p2c", "c2p"],
                      norm_rel_ebd="layer_norm", share_att_key=True, position_biased_input=False, type_vocab_size=0,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
enc = DebertaV2Model(cfg)
mlp = lambda i, h, o: nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))
ps, pe, out, cp = mlp(D, 4 * D, D), mlp(D, 4 * D, D), mlp(2 * D, 4 * D, D), mlp(D, 2 * D, 20)
params = list(enc.parameters()) + [p for m in (ps, pe, out, cp) for p in m.parameters()]
opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)
ids = torch.randint(5, a["V"], (B, N))
mask = torch.ones(B, N, dtype=torch.long)
y = (torch.rand(B, M, W, K) < 0.01).float()
idx_i = torch.arange(W)[:, None].expand(W, K)
idx_j = (idx_i + torch.arange(K)[None, :]).clamp(max=W - 1)

def step(autocast):
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        h = enc(input_ids=ids, attention_mask=mask).last_hidden_state       # (B, N, D)
        words = h[:, N - W:, :]
        labels = h[:, 1:1 + M, :]
        S, E = ps(words), pe(words)
        rep = out(torch.relu(torch.cat([S[:, idx_i], E[:, idx_j]], dim=-1)))  # (B, W, K, D)
        logits = torch.einsum("bwkd,bmd->bmwk", rep, labels).float()
        loss = nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="sum")
        loss = loss + nn.functional.cross_entropy(cp(h[:, 0, :]).float(), torch.ones(B, dtype=torch.long), reduction="sum")
    opt.zero_grad(); loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0); opt.step()

res = {}
for name in a.get("modes", ["fp32"]):
    autocast = name == "bf16_autocast"
    for _ in range(a["warmup"]): step(autocast)
    t0 = time.perf_counter()
    for _ in range(a["iters"]): step(autocast)
    dt = (time.perf_counter() - t0) / a["iters"]
    res[name] = {"tokens_per_s": B * N / dt, "step_ms": dt * 1000}
    print(f"  (pytorch, {name}: {B * N / dt:.0f} tokens/s, {dt * 1000:.1f} ms/step)", file=sys.stderr, flush=True)
print(json.dumps(res))
