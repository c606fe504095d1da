"""The ``cuda-agent`` command. Thin on purpose: it parses and hands over.

Each subcommand lives beside the part it drives, in a module that defines
``add_arguments(parser)`` and ``run(args) -> int``. Adding a command is one
entry in :data:`COMMANDS`; the modules are imported only when their command runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "eval": ("cuda_agent.sandbox.commands.eval_cmd", "evaluate a solution against a task: correctness, honesty, speed"),
    "check": ("cuda_agent.sandbox.commands.check_cmd", "run the static honesty rules on a solution (no GPU needed)"),
    "optimize": ("cuda_agent.agent.command", "run the agent on a task file or your own nn.Module: kernels faster than torch.compile"),
    "synth": ("cuda_agent.synth.command", "synthesize KernelBench-format training tasks; `synth filter` runs the GPU checks"),
    "train": ("cuda_agent.train.command", "train: single-turn RL, RFT, value pretraining, agentic RL; eval service; verl"),
    "bench": ("cuda_agent.bench.command", "run a policy or evaluate existing solutions over KernelBench (resumable)"),
    "report": ("cuda_agent.bench.report_command", "Table 1, HTML report and per-task table of bench runs"),
}

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    from cuda_agent import __version__

    parser = argparse.ArgumentParser(prog="cuda-agent", description="Write, judge and train CUDA kernels 'faster than torch.compile'.")
    parser.add_argument("--version", action="version", version=f"cuda-agent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        # Arguments are declared by the command's module, imported lazily here.
        importlib.import_module(module).add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    return int(importlib.import_module(args._module).run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
