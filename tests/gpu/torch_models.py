"""Real PyTorch training for the priority check: ResNet-50 (torchvision) or a GPT-2-small-shaped
decoder (12 layers, d_model 768, 12 heads, 512 tokens; built from torch.nn, so no extra package),
on random data, for --seconds. --host-ms adds host time per step before the step (a data loader
that cannot keep up: the job's duty cycle drops below 100%). Prints one JSON line: model, steps,
seconds, steps_per_s. Exit 77 without torch/CUDA (or torchvision for resnet50)."""
import argparse
import json
import sys
import time

try:
    import torch
except ImportError:
    sys.exit(77)
if not torch.cuda.is_available():
    sys.exit(77)

ap = argparse.ArgumentParser()
ap.add_argument("--model", choices=["resnet50", "gpt2"], required=True)
ap.add_argument("--seconds", type=float, default=30)
ap.add_argument("--batch", type=int, default=0, help="default: 64 images (resnet50), 8 sequences (gpt2)")
ap.add_argument("--host-ms", type=float, default=0, help="host time per step, ms (a slow data loader)")
ap.add_argument("--json", default="")
a = ap.parse_args()

torch.manual_seed(0)
dev = "cuda"
if a.model == "resnet50":
    try:
        import torchvision
    except ImportError:
        sys.exit(77)
    model = torchvision.models.resnet50().to(dev).to(memory_format=torch.channels_last)
    b = a.batch or 64
    x = torch.randn(b, 3, 224, 224, device=dev).to(memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (b,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()
    def step():
        return loss_fn(model(x), y)
else:
    b = a.batch or 8
    vocab, seq, d = 50257, 512, 768
    layer = torch.nn.TransformerEncoderLayer(d, 12, 4 * d, dropout=0.1, activation="gelu", batch_first=True, norm_first=True)
    class GPT(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = torch.nn.Embedding(vocab, d)
            self.pos = torch.nn.Embedding(seq, d)
            self.blocks = torch.nn.TransformerEncoder(layer, 12)
            self.norm = torch.nn.LayerNorm(d)
            self.mask = torch.nn.Transformer.generate_square_subsequent_mask(seq)
        def forward(self, t):
            h = self.tok(t) + self.pos(torch.arange(seq, device=t.device))
            h = self.blocks(h, mask=self.mask.to(t.device), is_causal=True)
            return self.norm(h) @ self.tok.weight.T
    model = GPT().to(dev)
    x = torch.randint(0, vocab, (b, seq), device=dev)
    def step():
        logits = model(x)
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, vocab), x[:, 1:].reshape(-1))
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
scaler_ctx = torch.autocast("cuda", dtype=torch.bfloat16)
for _ in range(3):  # warm-up (cuDNN autotune, allocator)
    with scaler_ctx:
        loss = step()
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
torch.cuda.synchronize()
steps, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < a.seconds:
    if a.host_ms:
        time.sleep(a.host_ms / 1000)
    with scaler_ctx:
        loss = step()
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    loss.item()  # reads the loss: one synchronization per step, as training loops that log do
    steps += 1
dt = time.perf_counter() - t0
out = {"model": a.model, "steps": steps, "seconds": dt, "steps_per_s": steps / dt, "host_ms": a.host_ms}
print(json.dumps(out))
if a.json:
    with open(a.json, "w") as f:
        json.dump(out, f)
