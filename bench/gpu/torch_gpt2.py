"""The reference zerod's GPU throughput is measured against: PyTorch
training the same architecture on random tokens, bf16 autocast, fused
AdamW, optionally under torch.compile: GPT-2 (tied LM head, tanh GELU,
causal SDPA attention), or with --kv-heads a Llama (RMSNorm, rotary
positions as transformers turns them, grouped-query SDPA, SwiGLU of --ffn,
an untied head unless --tied, --vocab entries). Prints one JSON line:
tokens/s, MFU (6N + 6LCT FLOPs per token over the bf16 dense peak), peak
GPU memory.

    python3 bench/gpu/torch_gpt2.py --layers 12 --width 768 --heads 12 --batch 16 --seq 1024 [--compile]
    python3 bench/gpu/torch_gpt2.py --layers 16 --width 2048 --heads 32 --kv-heads 8 --ffn 8192 \
        --vocab 128256 --tied --batch 8 --seq 1024 --compile
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch import nn

PEAK_FLOPS = 989e12  # H100 SXM, dense bf16
VOCAB = 50257


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.fc_proj = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class LlamaBlock(nn.Module):
    def __init__(self, width, heads, kv_heads, ffn):
        super().__init__()
        self.heads, self.kv_heads, self.hd = heads, kv_heads, width // heads
        self.ln1, self.ln2 = nn.RMSNorm(width, eps=1e-5), nn.RMSNorm(width, eps=1e-5)
        self.qkv = nn.Linear(width, (heads + 2 * kv_heads) * self.hd, bias=False)
        self.proj = nn.Linear(width, width, bias=False)
        self.gate_up, self.down = nn.Linear(width, 2 * ffn, bias=False), nn.Linear(ffn, width, bias=False)

    @staticmethod
    def turn(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def forward(self, x, cos, sin):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split([c, self.kv_heads * self.hd, self.kv_heads * self.hd], dim=2)
        q = self.turn(q.view(b, t, self.heads, self.hd).transpose(1, 2), cos, sin)
        k = self.turn(k.view(b, t, self.kv_heads, self.hd).transpose(1, 2), cos, sin)
        v = v.view(b, t, self.kv_heads, self.hd).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        gate, up = self.gate_up(self.ln2(x)).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    def __init__(self, layers, width, heads, kv_heads, ffn, vocab, tied, seq, theta=500000.0):
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(LlamaBlock(width, heads, kv_heads, ffn) for _ in range(layers))
        self.norm = nn.RMSNorm(width, eps=1e-5)
        self.head = None if tied else nn.Linear(width, vocab, bias=False)
        hd = width // heads
        inv = 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd)
        angles = torch.outer(torch.arange(seq).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, idx, targets):
        x = self.embed(idx)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        h = self.norm(x)
        logits = self.head(h) if self.head is not None else h @ self.embed.weight.t()
        return F.cross_entropy(logits.float().view(-1, self.vocab), targets.view(-1))


class Gpt2(nn.Module):
    def __init__(self, layers, width, heads, seq):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, width), nn.Embedding(seq, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1))


def main():
    p = argparse.ArgumentParser()
    for name, default in (("layers", 12), ("width", 768), ("heads", 12), ("batch", 16), ("seq", 1024),
                          ("steps", 10), ("warmup", 3)):
        p.add_argument("--" + name, type=int, default=default)
    for name in ("kv_heads", "ffn", "vocab"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=0)
    p.add_argument("--tied", action="store_true")
    p.add_argument("--compile", action="store_true")
    a = p.parse_args()
    torch.manual_seed(0)
    vocab = a.vocab or VOCAB
    if a.kv_heads:
        model = Llama(a.layers, a.width, a.heads, a.kv_heads, a.ffn, vocab, a.tied, a.seq).cuda()
    else:
        model = Gpt2(a.layers, a.width, a.heads, a.seq).cuda()
    n_params = sum(t.numel() for t in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    step = torch.compile(model) if a.compile else model
    x = torch.randint(0, vocab, (a.batch, a.seq), device="cuda")
    y = torch.randint(0, vocab, (a.batch, a.seq), device="cuda")
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            torch.cuda.synchronize()
            start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    tokens_per_s = a.batch * a.seq * a.steps / (time.perf_counter() - start)
    flops_per_token = 6 * n_params + 6 * a.layers * a.width * a.seq
    print(json.dumps(dict(impl="pytorch-compile" if a.compile else "pytorch-eager", params=n_params, batch=a.batch,
                          seq=a.seq, tokens_per_s=round(tokens_per_s), mfu=round(flops_per_token * tokens_per_s / PEAK_FLOPS, 4),
                          peak_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2))), flush=True)


if __name__ == "__main__":
    main()
