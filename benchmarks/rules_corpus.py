"""Run the KernelBench-style corpus through ``bench --solutions`` under both rule sets (issue 16).

    python benchmarks/rules_corpus.py [--corpus tests/solutions] [--out /tmp/rules_corpus]
        [--rules cuda-agent,kernelbench] [--gpus all] [--per-gpu 1]

Writes OUT/run_<rules>/ (a bench run directory, its report in report/) per rule set and
OUT/mismatches.txt; prints every verdict that differs from tests/solutions/kb_expected.json and
exits 1 if there is one. The logic is cuda_agent.bench.corpus.run_corpus.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    from cuda_agent.bench.corpus import run_corpus

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", type=Path, default=ROOT / "tests" / "solutions")
    p.add_argument("--out", type=Path, default=Path("/tmp/rules_corpus"))
    p.add_argument("--rules", default="cuda-agent,kernelbench", help="rule sets, comma-separated")
    p.add_argument("--gpus", default="all")
    p.add_argument("--per-gpu", type=int, default=1, help="evaluations at once per GPU, as bench --per-gpu")
    args = p.parse_args()
    mismatches = run_corpus(args.corpus, args.out, [r for r in args.rules.split(",") if r], gpus=args.gpus,
                            per_gpu=args.per_gpu, progress=True)
    for m in mismatches:
        print(m)
    print(f"{len(mismatches)} mismatch(es); runs and reports in {args.out}/run_*/")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
