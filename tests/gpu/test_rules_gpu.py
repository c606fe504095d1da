"""The KernelBench-style corpus evaluated on a GPU under both rule sets (issue 16).

Every file of tests/solutions/kb_*.py is evaluated against its task (tests/solutions/kb_tasks/)
under ``cuda-agent`` and ``kernelbench``; the verdict and the flag must be those of
tests/solutions/kb_expected.json. Honest files are correct under both; torch-layer epilogues are
rejected (torch_compute) by cuda-agent and correct under kernelbench; every cheat is rejected or
incorrect under both, the torch-only one by the kernel census under kernelbench (no_custom_kernel).
The last test runs the same corpus through ``bench --solutions`` (cuda_agent.bench.corpus).

The single-file solutions build through load_inline (about a minute each), so the module builds
them all first, in parallel; the verdicts then take a few seconds each.
"""

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from cuda_agent.sandbox import SandboxConfig, build, evaluate, load_solution
from cuda_agent.sandbox.config import RULE_SETS
from cuda_agent.sandbox.static import check_solution, rejecting
from cuda_agent.tasks import load_task

from ..conftest import SOLUTIONS

pytestmark = pytest.mark.gpu

EXPECTED = json.loads((SOLUTIONS / "kb_expected.json").read_text())["solutions"]
CASES = [(name, rules) for name in sorted(EXPECTED) for rules in RULE_SETS]


def config(cache_dir, rules: str) -> SandboxConfig:
    return SandboxConfig(cache_dir=cache_dir, rules=rules, rep_ms=50.0, warmup_ms=10.0, run_timeout_s=120.0)


@pytest.fixture(scope="module")
def built(cache_dir):
    """Build every file that some rule set lets past the static rules, all at once (the build cache is
    keyed by content, so each evaluation below finds its library)."""
    names = [n for n in sorted(EXPECTED) if any(not rejecting(check_solution(load_solution(SOLUTIONS / n), rules=r))
                                                for r in RULE_SETS)]
    with ThreadPoolExecutor(8) as pool:
        results = dict(zip(names, pool.map(lambda n: build(load_solution(SOLUTIONS / n), config(cache_dir, "cuda-agent")),
                                           names)))
    return results  # each test asserts its own build, so one broken file fails one test


@pytest.mark.parametrize("name,rules", CASES, ids=[f"{n[:-3]}-{r}" for n, r in CASES])
def test_corpus_verdicts_per_rule_set(built, cache_dir, name, rules):
    want = EXPECTED[name][rules]
    if name in built:
        assert built[name].ok, built[name].log[-3000:]
    task = load_task(SOLUTIONS / "kb_tasks" / EXPECTED[name]["task"])
    v = evaluate(task, load_solution(SOLUTIONS / name), config(cache_dir, rules))
    print(f"\n{name} [{rules}]: {v.verdict} flags={v.flags} ms={v.ms} eager={v.eager_ms} rel_err={v.rel_err}\n"
          f"  reasons={v.reasons[:2]}\n  log={v.log[:600]}")
    assert v.rules == rules
    assert v.verdict == want["verdict"], (v.reasons, v.log[:2000])
    if want["flag"]:
        assert want["flag"] in v.flags, (v.flags, v.reasons)
    if want["verdict"] == "correct":
        assert v.reward >= 1 and v.num_trials >= 7 and v.ms
        assert "torch_compute" not in v.flags and "no_custom_kernel" not in v.flags
    if rules == "kernelbench" and want["verdict"] == "correct":  # the census ran and saw an own kernel
        assert v.timing.get("profile"), "the kernel census must run under kernelbench"
        per_call = [k["us_per_call"] for k in v.timing["profile"]]  # the kernels taking most time first
        assert per_call == sorted(per_call, reverse=True), v.timing["profile"]
    if want["check"]:  # a static rejection: its first reason is a source line with the rule
        assert f"[{want['check'][0]}]" in v.reasons[0] or f"[{want['flag']}]" in " ".join(v.reasons), v.reasons


def test_the_corpus_through_bench_matches_the_table(built, cache_dir, tmp_path):
    """benchmarks/rules_corpus.py's path: the corpus as KernelBench generations, one bench per rule set."""
    from cuda_agent.bench.corpus import run_corpus

    mismatches = run_corpus(SOLUTIONS, tmp_path, cache_dir=cache_dir)
    assert not mismatches, "\n".join(str(m) for m in mismatches)
    for rules in RULE_SETS:
        report = (tmp_path / f"run_{rules}" / "report" / "report.md").read_text()
        assert f"rules: {rules}" in report
