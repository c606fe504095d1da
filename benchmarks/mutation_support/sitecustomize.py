"""Loaded by every Python process of a mutation run (benchmarks/mutation.py puts this folder on PYTHONPATH).

mutmut learns which tests reach which function by recording trampoline hits in the test process, and picks
the active mutant from ``MUTANT_UNDER_TEST``. The sandbox's workers are separate processes started as
``python -m cuda_agent.sandbox.worker``, which raises two problems this hook solves:

* their hits would be lost, and every function that runs only in a worker would count as "no tests": during
  mutmut's stats run every process (the test process too: mutmut 3.8's own recorder lost its hits here)
  appends its hits to a file instead, and ``mutation_hits`` (a pytest plugin) credits them to the test that
  is ending;
* run with ``-m``, the worker module is ``__main__``, so a mutant named ``cuda_agent.sandbox.worker.x_...``
  would never switch on there: the worker's copy of the variable is renamed to match.
"""
import os
import sys

_WORKER = "cuda_agent.sandbox.worker"
_argv = list(getattr(sys, "orig_argv", []))
_is_worker = "-m" in _argv and _argv[_argv.index("-m") + 1:_argv.index("-m") + 2] == [_WORKER]
_mutant = os.environ.get("MUTANT_UNDER_TEST", "")
if _is_worker and _mutant.startswith(_WORKER + "."):
    os.environ["MUTANT_UNDER_TEST"] = "__main__." + _mutant[len(_WORKER) + 1:]

_HITS = os.environ.get("CUDA_AGENT_MUTATION_HITS")
if _HITS:  # every process: mutmut's own recorder loses hits in this setup; the file does not
    try:
        import mutmut.mutation.trampoline as _trampoline
    except ImportError:  # not a mutation run after all
        pass
    else:
        def _record(name, caller=None):
            if name.startswith("__main__."):
                name = _WORKER + name[len("__main__"):]
            with open(_HITS, "a") as f:
                f.write(name + "\n")

        _trampoline.record_trampoline_hit = _record
