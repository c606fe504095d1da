"""Probe (H200): does the fp32 GEMM's flushed time depend on where its operands land in memory?

    python3 benchmarks/probe/placement.py [--placements 10] [--out $OUT/placement.json]

Why: the sandbox's repeatability figure misses on tests/tasks/linear_relu.py (5 processes: 1.04-1.06
max/min) while one process is stable to 0.1% and the same cuBLAS kernel runs in every process
(RESULTS.md, Sandbox, 2026-12-02 (C)). If placement is the cause, then within ONE process, operands re-allocated at
other addresses (a spacer of random size before them, the allocator's cache emptied) should spread
as much as separate processes do, and the time with a warm L2 should not.

For each placement: x (2048x4096), W (4096x4096), b; y = relu(x @ W^T + b) timed three ways, each the
median of 50 calls with CUDA events:
  * flush_write: L2 flushed by writing 2x L2 of zeros before each call (what the sandbox and
    triton.testing.do_bench do: the L2 is then full of dirty lines);
  * flush_read: L2 flushed by reading 2x L2 (clean lines);
  * warm: no flush.
Prints max/min over placements for each way; run it in 2-3 processes to compare with within-process.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics

import torch
import torch.nn.functional as F


def median_ms(fn, before, n: int = 50) -> float:
    times = []
    for _ in range(n):
        before()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e))
    return statistics.median(times)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--placements", type=int, default=10)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    rng = random.Random(args.seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    flush_buf = torch.empty(2 * l2 // 4, dtype=torch.int32, device="cuda")
    sink = torch.empty((), dtype=torch.int64, device="cuda")

    def flush_write():
        flush_buf.zero_()

    def flush_read():
        torch.sum(flush_buf, out=sink)

    rows = []
    for i in range(args.placements):
        spacer = torch.empty(rng.randrange(0, 2048) << 20, dtype=torch.uint8, device="cuda")
        x = torch.randn(2048, 4096, device="cuda")
        w = torch.randn(4096, 4096, device="cuda")
        b = torch.randn(4096, device="cuda")

        def fn():
            torch.relu(F.linear(x, w, b))

        for _ in range(30):  # warm-up (clocks, cuBLAS)
            fn()
        row = {"placement": i, "x_ptr_mb": x.data_ptr() >> 20, "w_ptr_mb": w.data_ptr() >> 20,
               "flush_write": median_ms(fn, flush_write), "flush_read": median_ms(fn, flush_read),
               "warm": median_ms(fn, lambda: None)}
        rows.append(row)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
        del x, w, b, spacer
        torch.cuda.empty_cache()
    summary = {k: round(max(r[k] for r in rows) / min(r[k] for r in rows), 4)
               for k in ("flush_write", "flush_read", "warm")}
    print("max/min over placements:", json.dumps(summary))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "max_over_min": summary}, f, indent=1)


if __name__ == "__main__":
    main()
