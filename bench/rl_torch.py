"""TRL on PyTorch CPU for `npm run bench -- rl` (bench/rl.ts passes the shapes as one JSON argument).

Random weights of the given Llama configuration in float32 (this CPU has no fast bf16 matmul path in
PyTorch), LoRA r=16 alpha 32 on q,k,v,o through peft, AdamW. DPO: trl.DPOTrainer._compute_loss (reference =
adapter disabled) + backward + step. GRPO: generation with transformers generate (do_sample,
num_return_sequences = group size, exactly N new tokens), then trl.GRPOTrainer._compute_loss (old log-probs
= current, detached; reference log-probs computed as GRPOTrainer does, adapter disabled) + backward + step.
Prints one JSON line.
"""
import json
import sys
import time
import types
from collections import defaultdict

import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM
from trl.trainer.dpo_trainer import DPOTrainer
from trl.trainer.grpo_trainer import GRPOTrainer

a = json.loads(sys.argv[1])
torch.set_num_threads(a['threads'])
torch.manual_seed(0)
cfg = {k: v for k, v in a['config'].items() if k not in ('architectures', 'torch_dtype', 'model_type')}
model = LlamaForCausalLM(LlamaConfig(**cfg)).float()
model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=['q_proj', 'k_proj', 'v_proj', 'o_proj'], lora_dropout=0.0))
model.train()
opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
V = cfg['vocab_size']


class Acc:
    device = torch.device('cpu')
    sync_gradients = True
    num_processes = 1
    is_main_process = True

    def unwrap_model(self, m):
        return m

    def gather(self, x):
        return x

    def gather_for_metrics(self, x):
        return x

    def reduce(self, x, reduction='sum'):
        return x


def metrics():
    return {'train': defaultdict(list), 'eval': defaultdict(list)}


# ---- DPO ----
B, P, C = a['B'], a['P'], a['C']
dpo_self = types.SimpleNamespace(
    model=model, accelerator=Acc(), aux_loss_enabled=False, ld_alpha=None, precompute_ref_logps=False,
    args=types.SimpleNamespace(gradient_checkpointing_kwargs=None), ref_model=None, f_divergence_type='reverse_kl',
    loss_types=['sigmoid'], loss_weights=[1.0], beta=0.1, label_smoothing=0.0, use_weighting=False,
    _metrics=metrics(), _total_train_tokens=0, _tp_size=1,
)


def dpo_step():
    prompts = torch.randint(3, V, (B, P))
    ids = torch.cat([torch.cat([prompts, torch.randint(3, V, (B, C))], 1), torch.cat([prompts, torch.randint(3, V, (B, C))], 1)])
    cm = torch.cat([torch.zeros(2 * B, P, dtype=torch.long), torch.ones(2 * B, C, dtype=torch.long)], 1)
    opt.zero_grad()
    loss = DPOTrainer._compute_loss(dpo_self, model, {'input_ids': ids, 'attention_mask': torch.ones_like(ids), 'completion_mask': cm}, False)
    loss.backward()
    opt.step()
    return ids.numel()


dpo_step()
t0 = time.perf_counter()
tokens = sum(dpo_step() for _ in range(a['iters']))
ms = (time.perf_counter() - t0) * 1000 / a['iters']
dpo = {'tokens_per_s': tokens / a['iters'] / (ms / 1000), 'step_ms': ms}

# ---- GRPO ----
G, Bp, N = a['G'], a['Bp'], a['N']
grpo_self = types.SimpleNamespace(
    model=model, accelerator=Acc(), aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
    importance_sampling_level='token', beta=0.04, loss_type='grpo', epsilon_low=0.2, epsilon_high=0.2,
    use_vllm=False, vllm_importance_sampling_correction=False, current_gradient_accumulation_steps=1,
    _entropy_bonus_enabled=False, model_kwarg_keys=set(), temperature=1.0,
    args=types.SimpleNamespace(use_bias_correction_kl=False, delta=None), _metrics=metrics(),
)
grpo_self._get_per_token_logps_and_entropies = types.MethodType(GRPOTrainer._get_per_token_logps_and_entropies, grpo_self)


def grpo_step():
    prompts = torch.randint(3, V, (Bp, P))
    tg = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), do_sample=True, temperature=1.0,
                             top_k=0, top_p=1.0, max_new_tokens=N, min_new_tokens=N, num_return_sequences=G, pad_token_id=0)
    gen_ms = (time.perf_counter() - tg) * 1000
    tt = time.perf_counter()
    prompt_ids = prompts.repeat_interleave(G, 0)
    completion_ids = out[:, P:]
    pm, cm = torch.ones_like(prompt_ids), torch.ones_like(completion_ids)
    rewards = (completion_ids[:, 0] % 3).float() / 2
    mean = rewards.view(-1, G).mean(1).repeat_interleave(G)
    std = rewards.view(-1, G).std(1).repeat_interleave(G)
    ids = torch.cat([prompt_ids, completion_ids], 1)
    att = torch.cat([pm, cm], 1)
    with torch.no_grad(), model.disable_adapter():
        ref, _, _ = grpo_self._get_per_token_logps_and_entropies(model, ids, att, N)
    opt.zero_grad()
    loss = GRPOTrainer._compute_loss(grpo_self, model, {
        'prompt_ids': prompt_ids, 'prompt_mask': pm, 'completion_ids': completion_ids, 'completion_mask': cm,
        'advantages': (rewards - mean) / (std + 1e-4), 'ref_per_token_logps': ref})
    loss.backward()
    opt.step()
    return gen_ms, (time.perf_counter() - tt) * 1000


grpo_step()
rs = [grpo_step() for _ in range(a['grpo_iters'])]
g = sum(r[0] for r in rs) / len(rs)
t = sum(r[1] for r in rs) / len(rs)
print(json.dumps({'dpo': dpo, 'grpo': {'generation_ms': g, 'training_ms': t, 'step_ms': g + t, 'new_tokens': G * Bp * N}}))
