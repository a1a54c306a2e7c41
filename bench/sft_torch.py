"""PyTorch + PEFT CPU anchor for the decoder LoRA SFT row of `npm run bench -- train` (bench/train.ts passes the
shapes as one JSON argument).

Random weights of the given Llama configuration in float32, LoRA r=16 alpha 32 on q,k,v,o through peft, AdamW over
the adapter. One step = forward with labels (transformers' shifted cross-entropy, mean over the labeled tokens) +
backward + gradient clipping + AdamW, on B sequences of T random tokens. Two runs: plain fp32, and the forward and
loss under torch.autocast("cpu", dtype=torch.bfloat16) (fp32 master weights and optimizer state).
Prints one JSON line: {"fp32": {"tokens_per_s", "step_ms"}, "bf16_autocast": {...}}; each result also goes to stderr
as soon as it is measured (a step takes about a minute on a loaded 2-core machine).
"""
import json
import sys
import time

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

a = json.loads(sys.argv[1])
torch.set_num_threads(a['threads'])
torch.manual_seed(0)
cfg = {k: v for k, v in a['config'].items() if k not in ('architectures', 'torch_dtype', 'model_type')}
model = LlamaForCausalLM(LlamaConfig(**cfg)).float()
model = get_peft_model(model, LoraConfig(r=a['r'], lora_alpha=2 * a['r'], target_modules=a['targets'], lora_dropout=a.get('dropout', 0.0)))
model.train()
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
B, T, V = a['B'], a['T'], cfg['vocab_size']
ids = torch.randint(3, V, (B, T))


def step(autocast):
    with torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
        loss = model(input_ids=ids, labels=ids).loss
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


out = {}
for name, autocast in (('fp32', False), ('bf16_autocast', True)):
    for _ in range(a['warmup']):
        step(autocast)
    t0 = time.perf_counter()
    for _ in range(a['iters']):
        step(autocast)
    dt = (time.perf_counter() - t0) / a['iters']
    out[name] = {'tokens_per_s': B * T / dt, 'step_ms': dt * 1000}
    print(f'  (pytorch + peft, {name}: {B * T / dt:.0f} tokens/s, {dt:.2f} s/step)', file=sys.stderr, flush=True)
print(json.dumps(out))
