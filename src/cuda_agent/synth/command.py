"""``cuda-agent synth``: generate training tasks; ``synth filter``: the GPU pass.

    cuda-agent synth --count 6000 --seed 0 --out tasks.parquet [--kernelbench DIR]
    cuda-agent synth filter --in tasks.parquet --out tasks_gpu.parquet --device cuda
    cuda-agent synth catalog            # list the operators that survived the probe

Heavy imports (torch) happen inside :func:`run` only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", nargs="?", default="generate", choices=("generate", "filter", "catalog"),
                        help="generate tasks (default), filter: run the deferred GPU checks on "
                             "--in, catalog: list the operator catalog")
    parser.add_argument("--count", type=int, default=100, help="tasks to write (default 100)")
    parser.add_argument("--seed", type=int, default=0, help="base seed (default 0)")
    parser.add_argument("--out", type=Path, help="output file, .parquet or .jsonl")
    parser.add_argument("--in", dest="inp", type=Path, help="filter: input file (.parquet/.jsonl)")
    parser.add_argument("--mix", default=None,
                        help="op-count mix N:WEIGHT,... (default the paper's "
                             "1:3.4,2:83.8,3:7.6,4:2.8,5:1.2)")
    parser.add_argument("--kernelbench", type=Path, default=None,
                        help="KernelBench checkout to decontaminate against")
    parser.add_argument("--levels", default="1,2,3", help="KernelBench levels (default 1,2,3)")
    parser.add_argument("--similarity", type=float, default=0.9,
                        help="AST similarity above which a task is contaminated (default 0.9)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu: CPU checks, runtime pending; cuda: also the GPU checks")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--ops", default="", help="comma-separated op names to restrict to")
    parser.add_argument("--exclude-ops", default="", help="comma-separated op names to leave out")
    parser.add_argument("--max-attempts", type=int, default=None,
                        help="stop after this many attempts (default 20 x count + 100)")
    parser.add_argument("--window-ms", default="1,100", help="GPU eager-runtime window LO,HI in ms")
    parser.add_argument("--limit", type=int, default=None, help="filter: only the first N rows")
    parser.add_argument("--keep-failed", action="store_true",
                        help="filter: also write rows that failed a check (with their outcomes)")
    parser.add_argument("--llm-url", default=None,
                        help="OpenAI-compatible endpoint (.../v1) for the optional LLM composer")
    parser.add_argument("--llm-model", default="default", help="model name for --llm-url")
    parser.add_argument("--llm-share", type=float, default=0.0,
                        help="share of attempts composed by the LLM (default 0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _window(text: str) -> tuple[float, float]:
    from .config import ConfigError

    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise ConfigError(f"--window-ms {text!r}: expected LO,HI in milliseconds") from None
    if not 0 < lo < hi:
        raise ConfigError(f"--window-ms {text!r}: need 0 < LO < HI")
    return lo, hi


def run(args: argparse.Namespace) -> int:
    from .config import DEFAULT_OP_MIX, ConfigError, SynthConfig, parse_mix

    try:
        if args.action == "catalog":
            return _catalog(args)
        if args.action == "filter":
            return _filter(args)
        if args.out is None:
            raise ConfigError("--out is required (a .parquet or .jsonl path)")
        try:
            levels = tuple(int(v) for v in args.levels.split(",") if v.strip())
        except ValueError:
            raise ConfigError(f"--levels {args.levels!r}: expected e.g. 1,2,3") from None
        cfg = SynthConfig(
            count=args.count, seed=args.seed, out=args.out,
            op_mix=parse_mix(args.mix) if args.mix else dict(DEFAULT_OP_MIX),
            kernelbench=args.kernelbench, levels=levels, similarity=args.similarity,
            device=args.device, workers=args.workers, ops=_names(args.ops),
            exclude_ops=_names(args.exclude_ops), max_attempts=args.max_attempts,
            runtime_window_ms=_window(args.window_ms), llm_url=args.llm_url,
            llm_model=args.llm_model, llm_share=args.llm_share, progress=not args.no_progress)
        from . import synthesize

        summary = synthesize(cfg)
        print(summary.report())
        if summary.accepted < cfg.count:
            print(f"synth: only {summary.accepted} of {cfg.count} tasks after "
                  f"{cfg.attempt_limit} attempts (raise --max-attempts)", file=sys.stderr)
            return 1
        return 0
    except ConfigError as e:
        print(f"cuda-agent synth: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("cuda-agent synth: interrupted; rerun the same command to resume", file=sys.stderr)
        return EXIT_INTERRUPTED


def _catalog(args) -> int:
    from .config import SynthConfig
    from .pipeline import load_catalog

    cfg = SynthConfig(ops=_names(args.ops), exclude_ops=_names(args.exclude_ops))
    catalog = load_catalog(cfg)
    for fam, ops in sorted(catalog.families.items()):
        print(f"{fam} ({len({o.name for o in ops})}): " + ", ".join(sorted({o.name for o in ops})))
    print(f"{len(catalog.names())} names, {catalog.distinct()} distinct operators, "
          f"{len(catalog.rejected)} candidates dropped")
    return 0


def _filter(args) -> int:
    from .config import ConfigError

    if args.inp is None or args.out is None:
        raise ConfigError("synth filter needs --in PATH and --out PATH")
    if args.device != "cuda":
        raise ConfigError("synth filter runs the GPU checks: use --device cuda")
    if args.out.suffix not in (".parquet", ".jsonl"):
        raise ConfigError(f"--out {args.out}: must end in .parquet or .jsonl")
    from .gpu import filter_file

    summary = filter_file(args.inp, args.out, device=args.device, window_ms=_window(args.window_ms),
                          limit=args.limit, keep_failed=args.keep_failed,
                          kernelbench=args.kernelbench, progress=not args.no_progress)
    print(summary)
    return 0
