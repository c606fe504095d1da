"""The agent loop's own overhead, and the sandbox caches seen from the agent (GPU host).

    python3 benchmarks/agent_overhead.py [--cache DIR] [--out results.json]

Replays the honest swish episode (tests/data/agent/swish_replay.json: read, profile, write kernel +
binding + model_new.py, compile, verify, submit) with one more `verify` of the unchanged sources
before `submit`, twice with one cache directory: a cold run (fresh build and baseline caches,
unless --cache points at a warm one) and a warm run.

Reported per run: wall time split into LLM time (replay: ~0), sandbox time (build, evaluate,
profile), tool time (file tools) and the rest; the loop's overhead is everything except LLM
and sandbox time, as a share of the episode's wall time (target <= 5%). Per verify: build
seconds and whether the baselines came from the cache; a repeated verify of unchanged sources
must hit both the build cache and the baseline cache.

Exit status 0 when the targets hold, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPLAY = ROOT / "tests" / "data" / "agent" / "swish_replay.json"
TASK = ROOT / "examples" / "swish" / "task.py"
OVERHEAD_TARGET = 0.05
CACHED_BUILD_S = 0.5


def episode(cache_dir: Path, run_dir: Path) -> dict:
    from cuda_agent.agent import AgentConfig, make_backend, run_episode
    from cuda_agent.agent.backends.replay import load_steps
    from cuda_agent.agent.progress import ConsoleProgress
    from cuda_agent.sandbox import SandboxConfig
    from cuda_agent.tasks import load_task

    steps = load_steps(REPLAY)
    steps.insert(len(steps) - 1, {"content": "Verify once more (unchanged sources).",
                                  "tool_calls": [{"name": "verify", "arguments": {}}]})
    config = AgentConfig(target_speedup=None, sandbox=SandboxConfig(cache_dir=cache_dir))
    return run_episode(load_task(TASK, name="swish"), make_backend("replay", steps=steps), config, run_dir=run_dir,
                       progress=ConsoleProgress(use_rich=False))


def summarize(label: str, rec: dict) -> dict:
    t = rec["timings"]
    loop = t["wall_s"] - t["llm_s"] - t["sandbox_s"]
    verifies = [{"turn": v["turn"], "verdict": v["verdict"]["verdict"], "build_s": v["verdict"]["build_s"],
                 "baseline_cached": v["verdict"]["baseline_cached"], "eval_s": v["verdict"]["eval_s"],
                 "speedup_vs_eager": v["verdict"]["speedup_vs_eager"],
                 "speedup_vs_compile": v["verdict"]["speedup_vs_compile"]} for v in rec["verdicts"]]
    return {"run": label, "turns": rec["turns"], "ended_by": rec["ended_by"], **t,
            "loop_overhead_s": round(loop, 4), "loop_overhead_share": round(loop / t["wall_s"], 4),
            "loop_overhead_ms_per_turn": round(1000 * loop / max(rec["turns"], 1), 2), "verifies": verifies}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", type=Path, default=None, help="cache dir (default: a fresh temporary one)")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    ap.add_argument("--episodes", default="cold,warm",
                    help="which episodes, in order (cold: fresh caches; its repeated verify must hit them)")
    args = ap.parse_args()
    cache = args.cache or Path(tempfile.mkdtemp(prefix="agent_overhead_cache_"))
    work = Path(tempfile.mkdtemp(prefix="agent_overhead_"))
    results, failures = [], []
    for label in args.episodes.split(","):
        r = summarize(label, episode(cache, work / label))
        results.append(r)
        print(f"\n== {r['run']}: {r['turns']} turns, {r['wall_s']:.2f} s wall = LLM {r['llm_s']:.3f} + sandbox "
              f"{r['sandbox_s']:.2f} + tools {r['tool_s']:.3f} + rest {r['overhead_s']:.3f}")
        print(f"   loop overhead (wall - LLM - sandbox): {r['loop_overhead_s']:.3f} s = "
              f"{100 * r['loop_overhead_share']:.2f}% of wall ({r['loop_overhead_ms_per_turn']:.1f} ms per turn)")
        for v in r["verifies"]:
            print(f"   verify turn {v['turn']}: {v['verdict']}, build {v['build_s']:.3f} s, baseline cached "
                  f"{v['baseline_cached']}, eval {v['eval_s']:.2f} s, {v['speedup_vs_eager']}x eager, "
                  f"{v['speedup_vs_compile']}x compile", flush=True)
        if r["loop_overhead_share"] > OVERHEAD_TARGET:
            failures.append(f"{r['run']}: loop overhead {100 * r['loop_overhead_share']:.1f}% > 5%")
        if not r["verifies"]:
            failures.append(f"{r['run']}: no verdict at all (is there a GPU?)")
        if any(v["verdict"] != "correct" for v in r["verifies"]):
            failures.append(f"{r['run']}: a verify was not correct")
        repeated = r["verifies"][1:] if r["run"] == "cold" else r["verifies"]
        for v in repeated:
            if v["build_s"] > CACHED_BUILD_S or not v["baseline_cached"]:
                failures.append(f"{r['run']}: verify at turn {v['turn']} missed a cache (build {v['build_s']} s, "
                                f"baseline cached {v['baseline_cached']})")
        if args.out:  # after every episode: a run cut short keeps what it measured
            args.out.write_text(json.dumps(results, indent=1))
    print("\n" + ("all targets hold" if not failures else "FAILED:\n  " + "\n  ".join(failures)))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
