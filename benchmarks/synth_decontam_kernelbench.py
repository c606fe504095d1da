"""Decontamination against a real KernelBench checkout (issue 6).

    python3 benchmarks/synth_decontam_kernelbench.py --tasks OUT.parquet --kernelbench KB_ROOT

Reports how many generated tasks a KernelBench checkout would remove (same op sequence, or AST
similarity > 0.9), and feeds every KernelBench problem in as if it were generated, to show each
is caught. The checkout is not part of this repository: bring one (e.g. a clone of
ScalingIntelligence/KernelBench) and pass its path.
"""

from __future__ import annotations

import argparse
import collections
import json
import time

from cuda_agent.synth.decontam import KernelBenchIndex
from cuda_agent.tasks import iter_kernelbench
from cuda_agent.tasks.ops_dataset import iter_dataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", required=True, help="synth output (.parquet or .jsonl)")
    ap.add_argument("--kernelbench", required=True)
    ap.add_argument("--levels", default="1,2,3")
    args = ap.parse_args()
    levels = tuple(int(x) for x in args.levels.split(","))
    t0 = time.perf_counter()
    index = KernelBenchIndex(args.kernelbench, levels=levels)
    removed, why = 0, collections.Counter()
    examples = []
    n = 0
    for task in iter_dataset(args.tasks):
        n += 1
        res = index.check(task.source)
        if res != "pass":
            removed += 1
            why["same op sequence" if "op sequence" in res else "AST similarity"] += 1
            if len(examples) < 5:
                examples.append(res)
    caught = sum(index.check(t.source) != "pass" for t in iter_kernelbench(args.kernelbench, levels=levels))
    out = {"kernelbench_problems": len(index), "generated_tasks": n, "removed": removed,
           "removed_by": dict(why), "examples": examples,
           "kernelbench_fed_as_generated_caught": f"{caught}/{len(index)}",
           "seconds": round(time.perf_counter() - t0, 1)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
