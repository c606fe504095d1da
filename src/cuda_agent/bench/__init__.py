"""bench: run a policy, or evaluate existing solutions, over KernelBench; report the paper's Table 1.

    cuda-agent bench --kernelbench KB --levels 1,2,3 --solutions GEN_DIR --out RUN_DIR
    cuda-agent bench --kernelbench KB --levels 1 --agent --out RUN_DIR -- <agent/LLM options>
    cuda-agent report RUN_DIR [--compare RUN_DIR2 ...]

Parts: :mod:`.sources` (tasks and the solution layouts), :mod:`.runner` (the resumable pipeline),
:mod:`.lanes` (evaluation processes, Ray), :mod:`.store` (the run directory and its SQLite
database: the layout is documented there), :mod:`.metrics` (every number, with its definition),
:mod:`.report` (markdown, HTML, plots), :mod:`.policy` (the solver interface an agent provides).
See docs/bench.md. Nothing heavy is imported here: the CLI imports this package to build its parser.
"""
