"""Issue 17 diagnostic, step 2: is many-label classification slow because of the encoder or of the text<->label
matching? Trains, by steps, the fresh encoder dumped by dump.mts (same weights, same word features) either
  --head gliner : through the GLiNER2 classification head as Loom trains it (every label in the prompt, shuffled at
                  every step; classifier MLP on each [L] marker; BCE summed over the labels), or
  --head linear : a plain linear softmax over the mean-pooled text states (text alone, no prompt; not the product),
and prints the training loss and dev accuracy (all labels, sorted, as served) at --evals points.
    bench/.venv/bin/python bench/cls-head/lab.py --data /tmp/clshead --head linear --steps 300
The encoder is transformers' DebertaV2Model (what Loom's training graph is checked against); dropout off."""
import argparse, json, random, time
import torch, torch.nn as nn, torch.nn.functional as F
from safetensors.torch import load_file
from transformers import DebertaV2Config, DebertaV2Model

ap = argparse.ArgumentParser()
ap.add_argument('--data', default='/tmp/clshead'); ap.add_argument('--head', default='gliner', choices=['gliner', 'linear'])
ap.add_argument('--steps', type=int, default=300); ap.add_argument('--bs', type=int, default=8)
ap.add_argument('--lr', type=float, default=5e-3); ap.add_argument('--elr', type=float, default=1e-3)
ap.add_argument('--intents', type=int, default=0, help='a random subset of this many labels (0: all)')
ap.add_argument('--dev', type=int, default=400); ap.add_argument('--evals', type=int, default=3)
ap.add_argument('--seed', type=int, default=1); ap.add_argument('--threads', type=int, default=1)
a = ap.parse_args()
torch.set_num_threads(a.threads); torch.manual_seed(a.seed)
data = json.load(open(a.data + '/data.json'))
ecfg = json.load(open(a.data + '/base/encoder_config/config.json'))
cfg = DebertaV2Config(**{k: v for k, v in ecfg.items() if k != 'architectures'})
cfg.hidden_dropout_prob = cfg.attention_probs_dropout_prob = 0.0
enc = DebertaV2Model(cfg)
W = load_file(a.data + '/base/model.safetensors')
r = enc.load_state_dict({k[8:]: v for k, v in W.items() if k.startswith('encoder.') and 'word_feature' not in k}, strict=False)
assert not [k for k in r.missing_keys if 'position_ids' not in k], r.missing_keys
D = cfg.hidden_size
feat = nn.Parameter(W['encoder.embeddings.word_feature_embeddings.weight'].clone())
cls = nn.Sequential(nn.Linear(D, 2 * D), nn.ReLU(), nn.Linear(2 * D, 1))  # GLiNER2's classifier (create_mlp, relu)
for i in (0, 2):
    cls[i].weight.data = W[f'classifier.{i}.weight'].clone(); cls[i].bias.data = W[f'classifier.{i}.bias'].clone()
C = len(data['labels'])
keep = sorted(random.Random(5).sample(range(C), a.intents)) if a.intents else list(range(C))
remap = {c: i for i, c in enumerate(keep)}
lin = nn.Linear(D, len(keep))
train = [e for e in data['train'] if e['y'] in remap]
dev = [e for e in data['dev'] if e['y'] in remap]
random.Random(17).shuffle(dev); dev = dev[:a.dev]
lp, head, L, tail = data['label_pieces'], data['head'], data['L'], data['tail']

def build(ex, order):
    ids, mk = list(head), []
    for c in order: mk.append(len(ids)); ids += L + lp[c]
    ids += tail; n0 = len(ids)
    return ids + ex['ids'], [-1] * n0 + ex['feats'], mk, n0

assert build(data['train'][0], range(C))[0] == data['check'], "the prompt differs from Loom's formatInput"

def forward(batch, orders):
    seqs = [build(ex, o) if a.head == 'gliner' else (ex['ids'], ex['feats'], [], 0) for ex, o in zip(batch, orders)]
    B, N, M = len(seqs), max(len(s[0]) for s in seqs), max(1, max(len(s[2]) for s in seqs))
    ids = torch.zeros(B, N, dtype=torch.long); fts = torch.full((B, N), -1, dtype=torch.long)
    mask = torch.zeros(B, N, dtype=torch.long); tmask = torch.zeros(B, N)
    mk = torch.zeros(B, M, dtype=torch.long); mm = torch.zeros(B, M)
    for b, (i, f, m, n0) in enumerate(seqs):
        ids[b, :len(i)] = torch.tensor(i); fts[b, :len(f)] = torch.tensor(f); mask[b, :len(i)] = 1
        tmask[b, n0:len(i)] = 1
        if m: mk[b, :len(m)] = torch.tensor(m); mm[b, :len(m)] = 1
    x = enc.embeddings.word_embeddings(ids) + torch.where((fts >= 0).unsqueeze(-1), feat[fts.clamp(min=0)], 0.0)
    h = enc(inputs_embeds=x, attention_mask=mask).last_hidden_state
    if a.head == 'linear':
        return lin((h * tmask.unsqueeze(-1)).sum(1) / tmask.sum(1, keepdim=True)), None
    return cls(torch.gather(h, 1, mk.unsqueeze(-1).expand(-1, -1, D))).squeeze(-1), mm

enc_p, head_p = list(enc.parameters()) + [feat], list(cls.parameters()) + list(lin.parameters())
opt = torch.optim.AdamW([{'params': enc_p, 'lr': a.elr}, {'params': head_p, 'lr': a.lr}], weight_decay=0.01)

def evaluate():
    right = 0
    with torch.no_grad():
        for i in range(0, len(dev), 32):
            b = dev[i:i + 32]
            lg, mm = forward(b, [keep] * len(b))
            pred = (lg if mm is None else lg.masked_fill(mm == 0, -1e9)).argmax(-1).tolist()
            right += sum(p == remap[ex['y']] for p, ex in zip(pred, b))
    return right / len(dev)

rng = random.Random(a.seed); order = list(range(len(train))); pos = len(order)
t0, lw, ln, hist = time.time(), 0.0, 0, []
evals = {a.steps * (k + 1) // a.evals for k in range(a.evals)}
for step in range(1, a.steps + 1):
    if pos + a.bs > len(order): rng.shuffle(order); pos = 0
    batch = [train[i] for i in order[pos:pos + a.bs]]; pos += a.bs
    orders = [rng.sample(keep, len(keep)) for _ in batch]
    p = step / a.steps  # the trainer's schedule: 10% linear warm-up, linear decay to 0
    for g, lr in zip(opt.param_groups, (a.elr, a.lr)): g['lr'] = lr * (p / 0.1 if p < 0.1 else (1 - p) / 0.9)
    lg, mm = forward(batch, orders)
    if mm is None:
        loss = F.cross_entropy(lg, torch.tensor([remap[ex['y']] for ex in batch]))
    else:
        Y = torch.zeros_like(lg)
        for b, (o, ex) in enumerate(zip(orders, batch)): Y[b, o.index(ex['y'])] = 1
        loss = (F.binary_cross_entropy_with_logits(lg, Y, reduction='none') * mm).sum() / len(batch)
    opt.zero_grad(); loss.backward()
    torch.nn.utils.clip_grad_norm_(enc_p + head_p, 1.0); opt.step()
    lw += loss.item(); ln += 1
    if step in evals:
        hist.append({'step': step, 'train_loss': round(lw / ln, 3), 'dev_acc': round(evaluate(), 3),
                     's': round(time.time() - t0, 1)})
        lw, ln = 0.0, 0
print(json.dumps({'head': a.head, 'labels': len(keep), 'bs': a.bs, 'lr': a.lr, 'elr': a.elr, 'evals': hist}))
