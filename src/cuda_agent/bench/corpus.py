"""A solution corpus with expected results per rule set, run through ``bench --solutions``.

A corpus is a directory of single-file solutions (``kb_*.py``), each paired with a task in
``kb_tasks/`` and listed in ``kb_expected.json`` (``tests/solutions`` holds ours)::

    {"solutions": {"kb_relu_inline.py": {"task": "relu.py", "kind": "honest", "what": "...",
                   "cuda-agent": {"check": [], "verdict": "correct", "flag": null},
                   "kernelbench": {...}}}}

:func:`run_corpus` lays it out the way KernelBench and its generations are laid out (one level-1
problem per solution, ``level_1_problem_<P>_sample_0_kernel.py``), runs a bench per rule set
(``OUT/run_<rules>/``, with its report in ``OUT/run_<rules>/report/``) and compares each verdict
with the table: the verdict must match and the expected flag, if any, must be among its flags.
``benchmarks/rules_corpus.py`` is the command-line wrapper.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

EXPECTED_FILE = "kb_expected.json"
TASK_DIR = "kb_tasks"


@dataclass
class Staged:
    kernelbench: Path
    solutions: Path
    files: dict[str, str] = field(default_factory=dict)
    """bench task id (L1_<P>) -> corpus file name."""


@dataclass
class Mismatch:
    rules: str
    file: str
    expected: dict
    got: dict

    def __str__(self) -> str:
        return (f"[{self.rules}] {self.file}: expected {self.expected['verdict']}"
                f"{' with flag ' + self.expected['flag'] if self.expected.get('flag') else ''}, got "
                f"{self.got.get('verdict')} flags={self.got.get('flags')} reasons={(self.got.get('reasons') or [''])[:1]}")


def load_expected(corpus: Path) -> dict[str, dict]:
    return json.loads((Path(corpus) / EXPECTED_FILE).read_text())["solutions"]


def stage(corpus: Path, out: Path) -> Staged:
    """Write the corpus as a KernelBench tree (``OUT/kernelbench/level1/<P>_<name>.py``, the task)
    and KernelBench generations (``OUT/solutions/level_1_problem_<P>_sample_0_kernel.py``)."""
    corpus, out = Path(corpus), Path(out)
    expected = load_expected(corpus)
    level = out / "kernelbench" / "level1"
    sols = out / "solutions"
    for d in (level, sols):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir(parents=True)
    staged = Staged(out / "kernelbench", sols)
    for pid, name in enumerate(sorted(expected), start=1):
        stem = Path(name).stem
        shutil.copyfile(corpus / TASK_DIR / expected[name]["task"], level / f"{pid}_{stem}.py")
        shutil.copyfile(corpus / name, sols / f"level_1_problem_{pid}_sample_0_kernel.py")
        staged.files[f"L1_{pid}"] = name
    return staged


def compare(expected: dict[str, dict], staged: Staged, rules: str, verdicts: dict[str, dict]) -> list[Mismatch]:
    """Verdicts (bench task id -> Verdict JSON) against the table, under one rule set."""
    out = []
    for task_id, name in staged.files.items():
        want, got = expected[name][rules], verdicts.get(task_id, {"verdict": "missing", "flags": []})
        flag_ok = not want.get("flag") or want["flag"] in (got.get("flags") or [])
        if got.get("verdict") != want["verdict"] or not flag_ok:
            out.append(Mismatch(rules, name, want, got))
    return out


def run_corpus(corpus: Path, out: Path, rule_sets=None, gpus: str = "all", build_jobs: int | None = None,
               progress: bool = False, cache_dir: Path | None = None, per_gpu: int = 1) -> list[Mismatch]:
    """Bench the corpus once per rule set and return every verdict that differs from the table.
    Run directories are fresh each time (a resume would skip finished attempts)."""
    from ..sandbox import SandboxConfig
    from ..sandbox.config import RULE_SETS
    from .report import load, write_report
    from .runner import Bench, BenchConfig

    out = Path(out)
    expected = load_expected(corpus)
    staged = stage(corpus, out)
    mismatches: list[Mismatch] = []
    for rules in rule_sets or RULE_SETS:
        run_dir = out / f"run_{rules}"
        if run_dir.exists():
            shutil.rmtree(run_dir)
        extra = {"build_jobs": build_jobs} if build_jobs else {}
        config = BenchConfig(kernelbench=staged.kernelbench, out=run_dir, levels=(1,), solutions=staged.solutions,
                             gpus=gpus, per_gpu=per_gpu, progress=progress, sandbox=SandboxConfig(rules=rules, spare_workers=2,
                                                                   **({"cache_dir": cache_dir} if cache_dir else {})),
                             argv=["rules_corpus", "--rules", rules], **extra)
        Bench(config).run()
        data = load(run_dir, name=f"corpus-{rules}")
        write_report([data], run_dir / "report")
        mismatches += compare(expected, staged, rules, {r.task: r.verdict for r in data.results})
    (out / "mismatches.txt").write_text("".join(f"{m}\n" for m in mismatches) or "none\n")
    return mismatches
