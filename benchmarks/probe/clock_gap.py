"""Probe (GPU): which honest calls does the host clock see more of than the CUDA events, and does a gap curve of
spin kernels or of copies predict it?

    python3 benchmarks/probe/clock_gap.py [--processes 6] [--out $OUT/clock_gap.json]

Why: clock 1 (sandbox/evaluator.py) flags a call whose wall time (device-wide sync) exceeds its events by more than
the harness gap read off ``timing.gap_curve`` (spin kernels) plus max(0.03 ms, 10%). On an H100 the same 128 MiB
swish kernel ran either at ~0.12 ms with 0.023-0.026 ms of wall over the events, or at ~0.15-0.16 ms with
0.042-0.061 ms, depending on the process, and its slow mode put an honest kernel over the allowance; the spin
kernels in the same process did not show the extra (RESULTS.md, Sandbox, 2026-12-07 (5)).

Each process (a fresh one per ``--processes``, as each evaluation's worker is) times, with the sandbox's own
``timing.time_once`` and L2 flusher, the median over ``--calls`` of gpu ms and wall - gpu ms for: the trivial add;
spin kernels of 0.1, 0.3 and 1 ms; k back-to-back copies of 64 MiB (about the same lengths); one elementwise kernel
over 128 MiB (``torch.mul(x, x, out=y)``); and the swish of the task (``x * torch.sigmoid(x)``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys


def child(calls: int) -> dict:
    import torch

    from cuda_agent.sandbox.timing import L2Flusher, spin_cycles_per_ms, time_once

    dev = torch.device("cuda")
    flush = L2Flusher(dev)
    x = torch.rand(32 << 20, device=dev)  # 128 MiB of fp32
    y = torch.empty_like(x)
    a, b = torch.rand(16 << 20, device=dev), torch.empty(16 << 20, device=dev)  # 64 MiB copies

    def measure(fn) -> list[float]:
        for _ in range(5):
            time_once(fn, [], flush)
        s = [time_once(fn, [], flush) for _ in range(calls)]
        return [round(statistics.median(g for g, _ in s), 5), round(statistics.median(w - g for g, w in s), 5)]

    out = {"add": measure(lambda: x[:1024].add_(1.0))}
    per_ms = spin_cycles_per_ms(flush)
    one_copy = measure(lambda: b.copy_(a))[0]
    for ms in (0.1, 0.3, 1.0):
        out[f"spin {ms}"] = measure(lambda c=int(ms * per_ms): torch.cuda._sleep(c))
        k = max(1, round(ms / one_copy))
        out[f"copy {ms}"] = measure(lambda k=k: [b.copy_(a) for _ in range(k)])
    out["mul 128MiB"] = measure(lambda: torch.mul(x, x, out=y))
    out["swish 128MiB"] = measure(lambda: x * torch.sigmoid(x))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=6)
    ap.add_argument("--calls", type=int, default=100)
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.calls)))
        return
    rows = []
    for i in range(args.processes):
        r = subprocess.run([sys.executable, __file__, "--child", "--calls", str(args.calls)], capture_output=True,
                           text=True, timeout=300)
        if r.returncode != 0:
            print(f"process {i}: exit {r.returncode}: {r.stderr[-500:]}", flush=True)
            continue
        row = json.loads(r.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(f"process {i}: " + "  ".join(f"{k} {g:.3f}/{d:.3f}" for k, (g, d) in row.items()), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"columns": "name: [gpu median ms, wall - gpu median ms]", "processes": rows}, f, indent=1)


if __name__ == "__main__":
    main()
