"""The reference for zerod's attention alone (bench/attention_throughput.cc):
PyTorch's scaled_dot_product_attention, causal, bf16, forward and backward,
on q, k and v laid out as the model's attention has them ([B, T, C + 2 KV hs]
viewed as [B, NH, T, hs] and [B, KV, T, hs], grouped-query where KV < NH),
timed by CUDA events: the best of ten after a warm-up. Prints the same table
as attention_throughput.

    python3 bench/gpu/torch_sdpa.py [B T C NH KV ...]   (default: the same shapes)
"""
import sys

import torch
import torch.nn.functional as F


def best_ms(f):
    f()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(10):
        start.record()
        f()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def main(args):
    if args and len(args) % 5:
        sys.exit("usage: torch_sdpa.py [B T C NH KV ...]")
    shapes = [tuple(int(a) for a in args[i:i + 5]) for i in range(0, len(args), 5)] or [
        (16, 1024, 768, 12, 12), (8, 1024, 1600, 25, 25), (4, 4096, 768, 12, 12),
        (8, 2048, 2048, 32, 8), (4, 4096, 2048, 32, 8), (1, 8192, 2048, 32, 8)]
    print(f"{torch.cuda.get_device_name()}: PyTorch {torch.__version__} scaled_dot_product_attention, causal, bf16, "
          "best of 10")
    print(f"{'B':>4} {'T':>6} {'C':>6} {'NH':>4} {'KV':>4} {'hs':>4} {'forward ms':>12} {'TFLOP/s':>12} "
          f"{'backward ms':>12} {'TFLOP/s':>12}")
    for b, t, c, nh, kv in shapes:
        hs = c // nh
        qkv = torch.full((b, t, c + 2 * kv * hs), 0.0115, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        zq, zk, zv = qkv.split([c, kv * hs, kv * hs], dim=2)
        q = zq.view(b, t, nh, hs).transpose(1, 2)
        k, v = (z.view(b, t, kv, hs).transpose(1, 2) for z in (zk, zv))
        dout = torch.full((b, nh, t, hs), 0.0115, device="cuda", dtype=torch.bfloat16)

        def attend():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv < nh)

        out = attend()
        fwd = best_ms(attend)
        bwd = best_ms(lambda: torch.autograd.grad(out, qkv, dout, retain_graph=True))
        flops = 2.0 * b * nh * t * t * hs
        print(f"{b:>4} {t:>6} {c:>6} {nh:>4} {kv:>4} {hs:>4} {fwd:>12.3f} {flops / fwd / 1e9:>12.1f} {bwd:>12.3f} "
              f"{2.5 * flops / bwd / 1e9:>12.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
