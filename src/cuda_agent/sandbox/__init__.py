"""The sandbox: (Task, Solution) -> Verdict, correct, honest and fast to obtain.

What it covers: building a candidate (content-hash cache, parallel nvcc/c++, timeouts);
static honesty rules (``check``); correctness on fresh inputs in a separate worker process;
timing against eager and torch.compile with cached baselines; a kernel census from the
profiler; the reward. What it does not cover: isolating the file system or the network from
candidate code (run untrusted code at scale inside a container), or multi-GPU scheduling
(the benchmark distributes tasks; the sandbox only locks the GPU it times on).

Entry points: :func:`evaluate`, :func:`check`, :func:`build`; records :class:`Verdict`,
:class:`Solution`; the reward :func:`paper_reward`.
"""

import importlib

# Light modules (no torch) whose names clash with a function they define: bound eagerly, so the
# package attribute is the function, not the submodule.
from .build import BuildResult, build
from .reward import REWARDS, paper_reward, reward

# Public names -> the submodule defining them. Imported on first use (PEP 562), so that light
# modules of this package (the CLI's argument parsers) do not pull in torch.
_EXPORTS = {
    "SandboxConfig": "config", "NoGpuError": "evaluator", "evaluate": "evaluator",
    "Solution": "solution", "SolutionError": "solution", "load_solution": "solution",
    "reference_solution": "solution", "Finding": "static", "check_solution": "static",
    "rejecting": "static", "RULES": "static", "Rule": "static", "RULE_SETS": "config", "FORMAT_VERSION": "verdict", "VERDICTS": "verdict", "Verdict": "verdict",
    "profile": "profiling", "ProfileReport": "profiling", "BaselineStore": "baselines",
}
__all__ = ["BuildResult", "build", "REWARDS", "paper_reward", "reward", *_EXPORTS, "check"]


def __getattr__(name: str):
    if name == "check":
        name = "check_solution"
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
