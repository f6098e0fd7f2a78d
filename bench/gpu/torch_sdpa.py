"""The reference for zerod's attention alone (bench/attention_throughput.cc):
PyTorch's scaled_dot_product_attention, causal, bf16, forward and backward,
on q, k and v laid out as a GPT's attention has them ([B, T, 3C] viewed as
[B, NH, T, hs]), timed by CUDA events: the best of ten after a warm-up.
Prints the same table as attention_throughput.

    python3 bench/gpu/torch_sdpa.py [B T C NH ...]   (default: the same shapes)
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
    if args and len(args) % 4:
        sys.exit("usage: torch_sdpa.py [B T C NH ...]")
    shapes = [tuple(int(a) for a in args[i:i + 4]) for i in range(0, len(args), 4)] or [
        (16, 1024, 768, 12), (8, 1024, 1600, 25), (4, 4096, 768, 12),
        (4, 4096, 2048, 32), (1, 8192, 2048, 32)]
    print(f"{torch.cuda.get_device_name()}: PyTorch {torch.__version__} scaled_dot_product_attention, causal, bf16, "
          "best of 10")
    print(f"{'B':>4} {'T':>6} {'C':>6} {'NH':>4} {'hs':>4} {'forward ms':>12} {'TFLOP/s':>12} {'backward ms':>12} "
          f"{'TFLOP/s':>12}")
    for b, t, c, nh in shapes:
        hs = c // nh
        qkv = torch.full((b, t, 3 * c), 0.0115, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        q, k, v = (z.view(b, t, nh, hs).transpose(1, 2) for z in qkv.split(c, dim=2))
        dout = torch.full((b, nh, t, hs), 0.0115, device="cuda", dtype=torch.bfloat16)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        fwd = best_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
        bwd = best_ms(lambda: torch.autograd.grad(out, qkv, dout, retain_graph=True))
        flops = 2.0 * b * nh * t * t * hs
        print(f"{b:>4} {t:>6} {c:>6} {nh:>4} {hs:>4} {fwd:>12.3f} {flops / fwd / 1e9:>12.1f} {bwd:>12.3f} "
              f"{2.5 * flops / bwd / 1e9:>12.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
