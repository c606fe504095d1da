"""``cuda-agent check SOLUTION [--json]``: the static honesty rules alone, no GPU needed.
Prints verdict ``ok`` or ``rejected`` with reasons; exit 0 either way, 2 on bad input."""

from __future__ import annotations

import argparse
import json
import sys


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("solution", help="workspace directory or single .py file defining ModelNew")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from .. import SolutionError, check_solution, load_solution, rejecting

    try:
        solution = load_solution(args.solution)
    except SolutionError as e:
        print(f"cuda-agent check: {e}", file=sys.stderr)
        return 2
    findings = check_solution(solution)
    rejects = rejecting(findings)
    result = {"verdict": "rejected" if rejects else "ok", "reasons": [str(f) for f in rejects],
              "warnings": [str(f) for f in findings if f not in rejects],
              "findings": [f.to_dict() for f in findings], "solution": solution.to_str()}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print(f"verdict: {result['verdict']}")
        for r in result["reasons"]:
            print(f"- {r}")
        for w in result["warnings"]:
            print(f"  warning: {w}")
    return 0
