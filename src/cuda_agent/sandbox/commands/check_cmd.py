"""``cuda-agent check SOLUTION [--json] [--rules cuda-agent|kernelbench]``: the static honesty
rules alone, no GPU needed. Prints verdict ``ok`` or ``rejected`` with reasons. Exit 0 on ok,
1 on rejected, 2 on bad input. ``check --list-rules`` prints the rule table."""

from __future__ import annotations

import argparse
import json
import sys

EXIT_REJECTED = 1
EXIT_BAD_INPUT = 2


def add_rules_argument(p: argparse.ArgumentParser) -> None:
    """``--rules``, shared by every command that judges solutions (eval, check, bench, optimize, train serve)."""
    from ..config import RULE_SETS

    p.add_argument("--rules", choices=RULE_SETS, default=RULE_SETS[0],
                   help="rule set: cuda-agent (default; forward runs only your own kernels) or kernelbench "
                        "(torch ops and layers may run in forward beside your kernels; every anti-cheat rule holds)")


def add_isolation_argument(p: argparse.ArgumentParser) -> None:
    """``--unsafe-no-isolation``, shared by every command that runs candidate code (eval, bench, optimize,
    train serve): without it they refuse to run where confinement (sandbox/confine.py) cannot be set up."""
    p.add_argument("--unsafe-no-isolation", action="store_true",
                   help="run candidate code and the agent's bash unconfined, where they can rewrite the harness's "
                        "cache and baselines (every verdict then carries a warning); only for trusted code")


def isolation(args: argparse.Namespace) -> str:
    """SandboxConfig.isolation for the parsed ``--unsafe-no-isolation``."""
    return "none" if getattr(args, "unsafe_no_isolation", False) else "bwrap"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("solution", nargs="?", help="workspace directory or single .py file defining ModelNew")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_rules_argument(p)
    p.add_argument("--list-rules", action="store_true", help="print every static rule and the rule sets it is in")


def run(args: argparse.Namespace) -> int:
    from .. import SolutionError, check_solution, load_solution, rejecting
    from ..static import rules_table

    if args.list_rules:
        print(rules_table())
        return 0
    if args.solution is None:
        print("cuda-agent check: give a SOLUTION (or --list-rules)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        solution = load_solution(args.solution)
    except SolutionError as e:
        print(f"cuda-agent check: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    findings = check_solution(solution, rules=args.rules)
    rejects = rejecting(findings)
    result = {"verdict": "rejected" if rejects else "ok", "rules": args.rules, "reasons": [str(f) for f in rejects],
              "warnings": [str(f) for f in findings if f not in rejects],
              "findings": [f.to_dict() for f in findings], "solution": solution.to_str()}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"verdict: {result['verdict']}   rules: {args.rules}")
        for r in result["reasons"]:
            print(f"- {r}")
        for w in result["warnings"]:
            print(f"  warning: {w}")
    return EXIT_REJECTED if rejects else 0
