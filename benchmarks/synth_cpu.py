"""CPU throughput of `cuda-agent synth` (issue 6): tasks passing every CPU filter.

    python benchmarks/synth_cpu.py --count 6000 --out /tmp/synth6k.parquet \
        --kernelbench tests/data/kernelbench_mini

Prints the count, wall time, peak RSS (this process and its worker processes, via
resource.getrusage), op-count mix, distinct ops, most and least frequent ops, why
attempts were rejected and how many tasks decontamination removed. Starts from an
empty parts directory unless --resume.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:
    import cuda_agent  # noqa: F401
except ImportError:  # run from a checkout without `pip install -e .`
    sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=6000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("/tmp/synth_cpu_bench.parquet"))
    ap.add_argument("--kernelbench", type=Path, default=ROOT / "tests" / "data" / "kernelbench_mini")
    ap.add_argument("--resume", action="store_true", help="keep an existing parts directory")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()

    from cuda_agent.synth import SynthConfig, synthesize

    cfg = SynthConfig(count=args.count, seed=args.seed, out=args.out, workers=args.workers,
                      kernelbench=args.kernelbench, progress=sys.stderr.isatty())
    if not args.resume:
        shutil.rmtree(cfg.parts_dir, ignore_errors=True)
    t0 = time.perf_counter()
    s = synthesize(cfg)
    wall = time.perf_counter() - t0
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    total = max(1, sum(s.op_mix.values()))
    figures = {
        "tasks": s.accepted,
        "attempts": s.attempts,
        "wall_s": round(wall, 1),
        "tasks_per_s": round(s.accepted / wall, 2),
        "peak_rss_main_mb": round(self_kb / 1024),
        "peak_rss_largest_worker_mb": round(child_kb / 1024),
        "peak_rss_bound_mb": round((self_kb + args.workers * child_kb) / 1024),
        "op_mix_pct": {k: round(100 * v / total, 1) for k, v in sorted(s.op_mix.items())},
        "distinct_ops_used": s.distinct_ops,
        "catalog_ops": s.catalog_ops,
        "catalog_distinct": s.catalog_distinct,
        "most_frequent": s.op_counts.most_common(5),
        "least_frequent": sorted(s.op_counts.items(), key=lambda kv: (kv[1], kv[0]))[:5],
        "rejected": dict(s.rejected.most_common()),
        "decontam_removed": s.decontam_removed,
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores, Python "
                   f"{platform.python_version()}, torch {__import__('torch').__version__}",
    }
    print(s.report())
    print(json.dumps(figures, indent=1))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
    return 0 if s.accepted >= args.count else 1


if __name__ == "__main__":
    sys.exit(main())
