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

from .build import BuildResult, build
from .config import SandboxConfig
from .evaluate import NoGpuError, evaluate
from .reward import REWARDS, paper_reward, reward
from .solution import Solution, SolutionError, load_solution, reference_solution
from .static import Finding, check_solution, rejecting
from .verdict import FORMAT_VERSION, VERDICTS, Verdict

check = check_solution

__all__ = ["BuildResult", "build", "SandboxConfig", "NoGpuError", "evaluate", "REWARDS", "paper_reward",
           "reward", "Solution", "SolutionError", "load_solution", "reference_solution", "Finding",
           "check", "check_solution", "rejecting", "FORMAT_VERSION", "VERDICTS", "Verdict"]
