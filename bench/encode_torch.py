"""PyTorch CPU reference for `npm run bench -- encode`: transformers' DebertaV2Model at the GLiNER2
configuration plus the span head (markerV0 span representation + label scoring), random weights.
Reads a JSON job on argv[1], prints one JSON line of timings. With "onnx_out", also exports the same
model to ONNX (inputs input_ids, attention_mask, word_pos, label_pos) for the onnxruntime column."""
import json, sys, time
import torch
from torch import nn
from transformers import DebertaV2Config, DebertaV2Model

job = json.load(open(sys.argv[1]))
torch.set_num_threads(job["threads"])
torch.manual_seed(0)
D, K = job["D"], 8
cfg = DebertaV2Config(vocab_size=job["V"], hidden_size=D, num_hidden_layers=job["L"], num_attention_heads=job["H"],
                      intermediate_size=job["F"], hidden_act="gelu", layer_norm_eps=1e-7, max_position_embeddings=512,
                      relative_attention=True, position_buckets=256, max_relative_positions=-1,
                      pos_att_type=["p2c", "c2p"], share_att_key=True, norm_rel_ebd="layer_norm",
                      position_biased_input=False, type_vocab_size=0, pad_token_id=0)


def mlp(i, h, o):
    return nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Dropout(0.0), nn.Linear(h, o))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = DebertaV2Model(cfg)
        self.project_start = mlp(D, 4 * D, D)
        self.project_end = mlp(D, 4 * D, D)
        self.out_project = mlp(2 * D, 4 * D, D)

    def forward(self, input_ids, attention_mask, word_pos, label_pos):
        h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, N, D)
        B, W = word_pos.shape
        words = torch.gather(h, 1, word_pos.unsqueeze(-1).expand(-1, -1, D))  # (B, W, D)
        labels = torch.gather(h, 1, label_pos.unsqueeze(-1).expand(-1, -1, D))  # (B, M, D)
        s = self.project_start(words)
        e = self.project_end(words)
        idx = torch.arange(W).unsqueeze(1) + torch.arange(K).unsqueeze(0)  # (W, K)
        valid = idx < W
        idx = torch.where(valid, idx, torch.zeros_like(idx))
        start = s.unsqueeze(2).expand(-1, -1, K, -1)
        end = e[:, idx.reshape(-1)].reshape(B, W, K, D)
        rep = self.out_project(torch.relu(torch.cat([start, end], -1)))  # (B, W, K, D)
        return torch.sigmoid(torch.einsum("bwkd,bmd->bmwk", rep, labels))


model = Model().eval()
out = {"torch": torch.__version__, "threads": job["threads"], "runs": []}
with torch.inference_mode():
    for r in job["runs"]:
        B, N, W, M = r["B"], r["N"], r["W"], 4
        ids = torch.randint(5, 4000, (B, N))
        mask = torch.ones(B, N, dtype=torch.long)
        wp = torch.arange(N - W, N).unsqueeze(0).expand(B, -1).contiguous()
        lp = torch.arange(1, 1 + 2 * M, 2).unsqueeze(0).expand(B, -1).contiguous()
        model(ids, mask, wp, lp)  # warm-up
        times, cpu = [], []
        t_end = time.perf_counter() + r["seconds"]
        while len(times) < r["min_reps"] or (time.perf_counter() < t_end and len(times) < r["max_reps"]):
            c0 = time.process_time()
            t0 = time.perf_counter()
            model(ids, mask, wp, lp)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)  # CPU time of the process, all threads
        times.sort()
        cpu.sort()
        out["runs"].append({**r, "median_s": times[len(times) // 2], "median_cpu_s": cpu[len(cpu) // 2], "reps": len(times)})
if job.get("onnx_out"):
    try:
        ids = torch.randint(5, 4000, (2, 40))
        args = (ids, torch.ones(2, 40, dtype=torch.long), torch.arange(20, 40).unsqueeze(0).expand(2, -1).contiguous(),
                torch.arange(1, 9, 2).unsqueeze(0).expand(2, -1).contiguous())
        torch.onnx.export(model, args, job["onnx_out"], input_names=["input_ids", "attention_mask", "word_pos", "label_pos"],
                          output_names=["scores"], opset_version=17, dynamo=False,
                          dynamic_axes={"input_ids": {0: "B", 1: "N"}, "attention_mask": {0: "B", 1: "N"},
                                        "word_pos": {0: "B", 1: "W"}, "label_pos": {0: "B"}, "scores": {0: "B", 2: "W"}})
        out["onnx"] = job["onnx_out"]
    except Exception as ex:  # the column is skipped, with the reason
        out["onnx_error"] = str(ex)[:300]
print(json.dumps(out))
