"""Mutation testing of the sandbox's defenses (issue 21): what share of small deliberate bugs in the modules
that decide verdicts does the CPU suite catch?

    python benchmarks/mutation.py --work /var/tmp/mutation --children 16 --out mutation.json [--modules compare,reward]

It copies the working tree (tracked and untracked-not-ignored files) to ``--work`` and runs mutmut there over
``sandbox/{compare,reward,inputs,timing,static,reach,guards,worker}.py`` with the CPU suite (``tests/`` less the GPU
tests). Every mutant is run against the tests that reach the mutated function, including tests that reach it
only inside a sandbox worker process: ``mutation_support/`` credits those to their test (see its
sitecustomize.py). GPUs are hidden (``CUDA_VISIBLE_DEVICES=``), so a GPU host runs the suite as the CPU
machine does, only with more cores. Too slow for CI: about 45 min on 2 cores for compare and reward alone.

Statuses: a mutant is *caught* when a selected test failed, timed out or crashed; *survived* when every
selected test passed; *no tests* when no test reaches its function. Mutants listed in
``mutation_equivalent.txt`` (name, then why it cannot change behaviour) are left out of the score, which is
caught / (all checked - equivalent) per module. The timing-sensitive tests in DESELECT are left out of the
run: under parallel load they can fail on an unmutated tree, and such a failure would count as a catch.
``--work`` must lie outside /tmp: the tests that start a confined process (bubblewrap) see a private, empty /tmp,
so a mutated package there cannot be imported inside the jail and mutmut's first test run fails.

``--tier`` (repeatable) runs the mutants without mutmut's scheduler, by the mechanism mutmut itself uses
(``MUTANT_UNDER_TEST=<name> python -m pytest -x`` in mutmut's ``mutants/`` tree): each mutant meets the first
tier's tests, and one that survives them meets the next. mutmut only makes the mutants. Use it where every test
starts worker processes (``worker``: minutes a mutant on 2 cores) with ``--sample N``, a seeded random subset
whose score is reported with its 95% interval, and where mutmut's own clean-test run fails in the tree. Each
tier first runs unmutated, ``--children`` at once as the mutants will; if that fails, nothing is scored (a
failure would count as a catch). A mutant's run that outlasts ``--mutant-timeout`` (at least 3x the slowest
unmutated tier) is killed with every process it started. Results go to ``--work``/direct.jsonl as they come,
with the tests that failed, under a first line of the settings they depend on; ``--resume`` with the same
arguments goes on where a run stopped, and ``--resume --report-only`` reports a run so far::

    python benchmarks/mutation.py --work /var/tmp/mut_w --modules worker --sample 120 --children 2 \
        --tier "tests/test_rehearsal.py -k 'not sigkilled'" --tier "tests/test_harness_error.py" --out w.json
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUPPORT = Path(__file__).resolve().parent / "mutation_support"
EQUIVALENT = Path(__file__).resolve().parent / "mutation_equivalent.txt"
MODULES = ["compare", "reward", "inputs", "timing", "static", "reach", "guards", "worker"]
DESELECT = [
    "test_evaluator_clock_remeasures_the_harness_cost_before_distrusting_the_worker",  # host-load timing
    "test_a_bench_sigkilled_mid_evaluation_leaves_no_worker_and_resumes_exactly",  # sleeps, then SIGKILL
    "test_claim_makes_a_second_process_wait_until_released",  # inter-process timing
]
LOAD_SENSITIVE = [
    # direct mode: a test that failed under two-at-once load on mutants of code the CPU suite cannot reach
    # (worker.py's _warm_cuda 15 and _main 21, GPU-only), passed alone, and failed again on one of them in a
    # later rerun under load. Left in the tiers (a run's settings name its tiers); --confirm checks the
    # catches these alone made again without them
    "test_a_candidate_slowed_once_by_the_host_is_timed_again_and_both_attempts_outputs_are_checked",
]
MUTMUT = [sys.executable, "-c", "import sys; sys.argv[0] = 'mutmut'; from mutmut.__main__ import cli; cli()"]
CAUGHT = {"killed", "timeout", "segfault", "suspicious"}


def copy_tree(dest: Path) -> None:
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                            text=True)
    if listed.returncode == 0:
        files = listed.stdout.splitlines()
    else:  # a copy of the tree without its .git (e.g. on the GPU host): the folders the tests read
        files = [str(p.relative_to(ROOT)) for d in ("src", "tests", "examples", "configs", "benchmarks", "docs")
                 for p in (ROOT / d).rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        files += ["pyproject.toml", "README.md"]
    if dest.exists():
        shutil.rmtree(dest)
    for rel in files:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def refresh_tree(dest: Path) -> None:
    """A resumed run reads src/ and tests/ as they are now: the mutants left (and any named by --rerun) meet the
    tests written since the run started, and mutmut mutates again the functions that changed (it keeps the
    results of the others). mutmut runs the tests from its own copy, dest/mutants/tests."""
    for name in ("src", "tests"):
        for copy in (dest / name, *([dest / "mutants" / name] if name == "tests" else [])):
            if copy.exists():
                shutil.rmtree(copy)
            shutil.copytree(ROOT / name, copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))


def configure(dest: Path, modules: list[str], tests: list[str], deselect: list[str]) -> None:
    selection = ", ".join(f'"{t}"' for t in tests)
    only = ", ".join(f'"src/cuda_agent/sandbox/{m}.py"' for m in modules)
    deselect = " and ".join(f"not {t}" for t in deselect)
    with open(dest / "pyproject.toml", "a") as f:
        f.write(f"""
[tool.mutmut]
source_paths = ["src"]
also_copy = ["examples", "configs", "benchmarks", "docs", "README.md"]
only_mutate = [{only}]
pytest_add_cli_args_test_selection = [{selection}, "--ignore=tests/gpu"]
pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "mutation_hits", "-m", "not gpu", "-k", "{deselect}"]
process_isolation = "forkserver"
""")


def load_equivalent() -> dict[str, str]:
    out = {}
    if EQUIVALENT.exists():
        for line in EQUIVALENT.read_text().splitlines():
            if line.strip() and not line.startswith("#"):
                name, _, why = line.strip().partition(" ")
                out[name] = why.strip()
    return out


def results(work: Path, env: dict) -> dict[str, str]:
    out = subprocess.run([*MUTMUT, "results", "--all", "true"], cwd=work, env=env, capture_output=True, text=True)
    status = {}
    for line in out.stdout.splitlines():
        name, sep, st = line.strip().rpartition(": ")
        if sep and name.startswith("cuda_agent."):
            status[name] = st
    return status


def summarize(status: dict[str, str], equivalent: dict[str, str]) -> dict:
    per = {}
    for name, st in status.items():
        module = name.split(".")[2]
        c = per.setdefault(module, Counter())
        c["equivalent" if name in equivalent else st] += 1
    table = {}
    for module, c in sorted(per.items()):
        caught = sum(c[s] for s in CAUGHT)
        checked = sum(v for s, v in c.items() if s not in ("not checked", "equivalent"))
        table[module] = {"mutants": sum(c.values()), "caught": caught, "survived": c["survived"],
                         "no_tests": c["no tests"], "not_checked": c["not checked"], "equivalent": c["equivalent"],
                         "score": round(caught / checked, 4) if checked else None}
    return table


def show_diffs(work: Path, env: dict, names: list[str], dest: Path) -> None:
    """Every survivor's diff in one file (one mutmut process, not one per mutant)."""
    code = ("import sys\nfrom mutmut.__main__ import find_mutant, get_diff_for_mutant\n"
            "for name in sys.stdin.read().split():\n"
            "    try:\n"
            "        print(get_diff_for_mutant(name, path=find_mutant(name).path))\n"
            "    except Exception as e:\n"
            "        print(f'# {name}: {e!r}')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, input="\n".join(names),
                         capture_output=True, text=True)
    dest.write_text(out.stdout + out.stderr[-2000:])


GENERATE = ("import os\nfrom mutmut.__main__ import (copy_also_copy_files, copy_src_dir, create_mutants, "
            "set_mutant_under_test, setup_source_paths)\nos.makedirs('mutants', exist_ok=True)\n"
            "set_mutant_under_test('mutant_generation')\ncopy_src_dir()\ncopy_also_copy_files()\n"
            "setup_source_paths()\ncreate_mutants({children})\n")
"""mutmut 3.8's generation phase alone (the first step of ``mutmut run``), for the direct mode."""


def generate(work: Path, env: dict, children: int) -> None:
    out = subprocess.run([sys.executable, "-c", GENERATE.format(children=children)], cwd=work, env=env,
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"mutmut could not make the mutants in {work}:\n{out.stderr[-3000:]}")
    if not (work / "mutants" / "tests").exists():
        shutil.copytree(work / "tests", work / "mutants" / "tests")


def tier_args(tier: str, deselect: list[str]) -> list[str]:
    """One tier's pytest arguments, with the run's deselection joined to the tier's own ``-k``."""
    args = shlex.split(tier)
    odd = [a for a in args if a.startswith(("-k=", "--keyword", "-m", "--markexpr")) or
           (a.startswith("-k") and a != "-k")]
    if odd or args.count("-k") > 1:
        raise SystemExit(f"tier {tier!r}: give one filter as a separate '-k EXPR' (and no -m: the run keeps "
                         f"'-m \"not gpu\"'); not {odd or ['-k', '-k']}")
    keep = " and ".join(f"not {t}" for t in deselect)
    if "-k" in args:
        i = args.index("-k")
        args[i + 1] = f"({args[i + 1]}) and {keep}" if keep else args[i + 1]
    elif keep:
        args += ["-k", keep]
    return args


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% interval of a share k/n measured on a random sample (Wilson's score interval)."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    mid = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (round(max(0.0, mid - half), 4), round(min(1.0, mid + half), 4))


def direct_settings(work: Path, modules: list[str], tiers: list[list[str]]) -> dict:
    """What a direct run's results depend on: its tiers (deselection included) and the source of each module
    under mutation (a resumed run whose source changed would reuse names that now stand for other mutants).
    The timeout is kept per result: a resumed run with a longer one runs the timed-out mutants again."""
    src = work / "src" / "cuda_agent" / "sandbox"
    return {"tiers": tiers,
            "sources": {m: hashlib.sha256((src / f"{m}.py").read_bytes()).hexdigest()[:16] for m in modules}}


def load_direct(work: Path, settings: dict | None = None) -> dict[str, dict]:
    """The direct mode's results so far (``--work``/direct.jsonl, whose first line holds the settings they
    were made with): name -> {tier, rc, timeout, s, failed}. Results made with other settings are refused."""
    done: dict[str, dict] = {}
    log = work / "direct.jsonl"
    if not log.exists():
        return done
    lines = log.read_text().splitlines()
    head = json.loads(lines[0]).get("settings") if lines else None
    if settings is not None and head != settings:
        raise SystemExit(f"{log} holds results made with other settings (tiers or the mutated source):\n"
                         f"  there: {head}\n  now:   {settings}\nstart a new --work, or run with the same arguments")
    for line in lines[1:]:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a line cut off when the last run was killed
            continue
        done[row["name"]] = row
    return done


def run_pytest(work: Path, env: dict, name: str, args: list[str], timeout: float) -> dict:
    """One pytest run in mutmut's tree with mutant ``name`` switched on: {rc, timeout, s, failed}. Its process
    group (sandbox workers, jails) is killed at the timeout, so that nothing it started loads the host for the
    mutants after it."""
    t0 = time.time()
    with tempfile.TemporaryFile("w+") as out:
        p = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-x", "-rf", "-p", "no:cacheprovider",
                              "-m", "not gpu", *args], cwd=work / "mutants", env=dict(env, MUTANT_UNDER_TEST=name),
                             stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        timed_out = False
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        out.seek(0)
        failed = [ln.split(" ", 1)[1][:200] for ln in out.read().splitlines()
                  if ln.startswith(("FAILED ", "ERROR "))][:3]
    return {"rc": p.returncode, "timeout": timed_out, "s": round(time.time() - t0, 1), "failed": failed}


def run_direct(work: Path, env: dict, names: list[str], tiers: list[list[str]], children: int,
               timeout: float, settings: dict, deadline: float = math.inf) -> dict[str, dict]:
    """Each mutant through the tiers until one catches it; returns name -> {tier, rc, timeout, s, failed}.
    Resumable. No mutant starts after ``deadline`` (time.time()); those checked by then are a random subset,
    names being in random order."""
    log = work / "direct.jsonl"
    done = {n: r for n, r in load_direct(work, settings).items()
            if not (r.get("timeout") and r.get("limit", 0) < timeout)}  # timed out under a shorter limit: again
    if not log.exists():
        log.write_text(json.dumps({"settings": settings}) + "\n")
    lock = threading.Lock()

    def pytest(name: str, args: list[str]) -> dict:
        return run_pytest(work, env, name, args, timeout)

    module = names[0].rsplit(".", 1)[0].split(".x")[0] if names else "cuda_agent.sandbox"
    slowest = 0.0
    for i, args in enumerate(tiers):
        key = f"unmutated tier {i + 1}"  # kept in direct.jsonl: a resumed run does not pay for the check again
        runs = done.get(key, {}).get("runs")
        if not (runs and len(runs) >= children and all(r["rc"] == 0 for r in runs)):
            # unmutated (a name that switches no function on), `children` at once as the mutants will run
            with ThreadPoolExecutor(max_workers=children) as pool:
                runs = list(pool.map(pytest, [f"{module}.x_no_such_function__mutmut_0"] * children,
                                     [args] * children))
            if all(r["rc"] == 0 for r in runs):
                with open(log, "a") as f:
                    f.write(json.dumps({"name": key, "runs": runs}) + "\n")
        slowest = max([slowest] + [r["s"] for r in runs])
        print(f"tier {i + 1} unmutated ({len(runs)} at once): exits {[r['rc'] for r in runs]} in "
              f"{[r['s'] for r in runs]} s", flush=True)
        bad = [r for r in runs if r["rc"] != 0]
        if bad:
            raise SystemExit(f"tier {i + 1} fails without a mutant (exit {bad[0]['rc']}, {bad[0]['failed']}); "
                             f"fix it before scoring: {shlex.join(args)}")
    if timeout < 3 * slowest:
        raise SystemExit(f"--mutant-timeout {timeout:.0f} s is under 3x the slowest unmutated tier ({slowest:.0f} s):"
                         " a slowed run would count as a catch")
    forced = pytest("fail", tiers[0])  # mutmut's own check: the trampolines are reached and a failure shows
    if forced["rc"] == 0:
        raise SystemExit("MUTANT_UNDER_TEST=fail passed tier 1: the mutated package is not the one the tests import")

    def one(name: str) -> None:
        if time.time() > deadline:
            return
        row = {"name": name, "tier": None, "rc": 0, "timeout": False, "limit": timeout, "s": 0.0, "failed": []}
        for i, args in enumerate(tiers):
            r = pytest(name, args)
            row["s"] = round(row["s"] + r["s"], 1)
            if r["rc"] != 0:
                row.update(tier=i + 1, rc=r["rc"], timeout=r["timeout"], failed=r["failed"])
                break
        with lock:
            done[name] = row
            with open(log, "a") as f:
                f.write(json.dumps(row) + "\n")
            outcome = f"caught in tier {row['tier']}" if row["tier"] else "survived"
            print(f"{len(done):5d} {name} {outcome} "
                  f"({row['s']:.0f} s) {row['failed'][:1]}", flush=True)

    todo = [n for n in names if n not in done]
    with ThreadPoolExecutor(max_workers=children) as pool:
        list(pool.map(one, todo))
    return {n: done[n] for n in names if n in done}


def confirm_direct(work: Path, env: dict, settings: dict, tiers: list[str], deselect: list[str],
                   timeout: float) -> None:
    """Each catch whose failing tests are all LOAD_SENSITIVE is checked again, one mutant at a time, through
    every tier with those tests left out: a catch only they made was the load's (their failures come and go
    under load whatever the mutant), and is recorded again as the other tests judge it (``false_catch``)."""
    log = work / "direct.jsonl"
    runs = [tier_args(t, deselect + LOAD_SENSITIVE) for t in tiers]
    for name, row in load_direct(work, settings).items():
        failed = row.get("failed") or []
        if not row.get("tier") or row.get("confirmed") is not None or not failed or \
                not all(any(t in f for t in LOAD_SENSITIVE) for f in failed):
            continue
        new = dict(row, tier=None, rc=0, confirmed=False, failed=[])
        for i, args in enumerate(runs):
            r = run_pytest(work, env, name, args, timeout)  # a timeout is a catch, as in the run itself
            new["s"] = round(new["s"] + r["s"], 1)
            if r["rc"] != 0 or r["timeout"]:
                new.update(tier=i + 1, rc=r["rc"], confirmed=True, timeout=r["timeout"], failed=r["failed"])
                break
        if not new["confirmed"]:
            new["false_catch"] = f"only {failed[0][:120]} failed, a LOAD_SENSITIVE test"
        with open(log, "a") as f:
            f.write(json.dumps(new) + "\n")
        print(f"confirm {name}: " + (f"caught in tier {new['tier']}" if new["confirmed"] else "a false catch"),
              flush=True)


def direct(args, work: Path, env: dict, modules: list[str], deselect: list[str]) -> int:
    env = {k: v for k, v in env.items() if k != "CUDA_AGENT_MUTATION_HITS"}  # no test-to-function stats here
    t0 = time.time()
    if not args.report_only:
        generate(work, env, args.children)
    status = results(work, env)
    names = sorted(n for n in status if n.split(".")[2] in modules and re.search(args.only or "", n))
    if not names:
        print(f"no mutants of {modules} in {work}", file=sys.stderr)
        return 1
    picked = random.Random(args.seed).sample(names, min(args.sample, len(names))) if args.sample else list(names)
    print(f"{len(picked)} of {len(names)} mutants, {len(args.tier)} tiers, {args.children} at a time", flush=True)
    random.Random(args.seed).shuffle(picked)  # the order checked: a run cut short has checked a random subset
    tiers = [tier_args(t, deselect) for t in args.tier]
    settings = direct_settings(work, modules, tiers)
    if args.confirm:
        confirm_direct(work, env, settings, args.tier, deselect, args.mutant_timeout)
    if args.report_only:
        # what a run (perhaps still going, or killed) has checked so far: the longest finished stretch of its
        # order, since the mutants still in flight lean towards survivors (they run every tier)
        done, rows = load_direct(work, settings), {}
        for n in picked:
            if n not in done:
                break
            rows[n] = done[n]
    else:
        rows = run_direct(work, env, picked, tiers, args.children, args.mutant_timeout, settings,
                          t0 + args.time_limit if args.time_limit else math.inf)
    equivalent = load_equivalent()
    table = {}
    for module in modules:
        mine = {n: r for n, r in rows.items() if n.split(".")[2] == module}
        total = sum(1 for n in names if n.split(".")[2] == module)
        scored = {n: r for n, r in mine.items() if n not in equivalent}
        caught = sum(1 for r in scored.values() if r["tier"])
        table[module] = {"mutants": total, "checked": len(mine),
                         "caught": caught, "survived": len(scored) - caught, "equivalent": len(mine) - len(scored),
                         "timeouts": sum(1 for r in scored.values() if r.get("timeout")),
                         # caught by an exit other than failed tests (1) or the timeout: pytest's own errors,
                         # a signal; each row's "failed" names what failed
                         "other_exits": sum(1 for r in scored.values()
                                            if r["tier"] and r["rc"] != 1 and not r.get("timeout")),
                         "score": round(caught / len(scored), 4) if scored else None,
                         "interval_95": wilson(caught, len(scored)) if len(mine) < total else None,  # a sample
                         "caught_per_tier": dict(Counter(r["tier"] for r in scored.values() if r["tier"]))}
    survivors = sorted(n for n, r in rows.items() if not r["tier"] and n not in equivalent)
    report = {"modules": table, "wall_s": round(time.time() - t0, 1), "children": args.children,
              "sample": args.sample, "seed": args.seed, "tiers": args.tier, "deselected": deselect,
              "survivors": survivors, "mutants": rows}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    if args.diffs:
        show_diffs(work, env, survivors, args.diffs)
    for m, r in table.items():
        print(f"{m}: {r['caught']} caught of {r['caught'] + r['survived']} checked ({r['equivalent']} equivalent, "
              f"{r['mutants']} mutants), score {r['score']}" + (f", 95% interval {r['interval_95']}"
                                                                 if r["interval_95"] else ""))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/var/tmp/cuda_agent_mutation"), help="outside /tmp")
    ap.add_argument("--children", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--modules", default=",".join(MODULES))
    ap.add_argument("--tests", default="tests", help="space-separated pytest paths (default: the CPU suite)")
    ap.add_argument("--deselect", default="", help="comma-separated test names also left out of this run, e.g. "
                    "the rehearsal tests that start workers when the modules under test are the static rules")
    ap.add_argument("--time-limit", type=float, default=None, help="stop mutmut after this many seconds "
                    "(direct mode: no mutant starts after it; the report covers those checked)")
    ap.add_argument("--out", type=Path, default=None, help="JSON: per-module table and every survivor")
    ap.add_argument("--diffs", type=Path, default=None, help="text: the diff of every survivor")
    ap.add_argument("--resume", action="store_true", help="keep --work as it is and go on where mutmut stopped; "
                    "src/ and tests/ are copied again, so tests written since are used (mutmut collects stats for new tests)")
    ap.add_argument("--only", default=None, help="direct mode: only the mutants whose name matches this regular "
                    "expression, e.g. 'gap_' for the functions of one change (the score is of those)")
    ap.add_argument("--rerun", type=Path, default=None, help="with --resume: check again only the mutants named in "
                    "this file (one a line, e.g. the survivors before new tests were written)")
    ap.add_argument("--tier", action="append", default=[], help="direct mode (see above): pytest arguments of one "
                    "tier, e.g. \"tests/test_rehearsal.py -k 'not slow'\"; repeat for later tiers")
    ap.add_argument("--sample", type=int, default=0, help="direct mode: a random subset of this many mutants")
    ap.add_argument("--seed", type=int, default=21, help="direct mode: the sample's seed")
    ap.add_argument("--mutant-timeout", type=float, default=600, help="direct mode: seconds for one tier of one "
                    "mutant (a timeout counts as caught: keep it well above the unmutated tier's time under load)")
    ap.add_argument("--confirm", action="store_true", help="direct mode, with --resume: first check again each "
                    "catch made only by LOAD_SENSITIVE tests, through every tier without them (see there)")
    ap.add_argument("--report-only", action="store_true", help="direct mode, with --resume and the run's own "
                    "arguments: report what that run has checked so far, running no mutant (but --confirm's)")
    args = ap.parse_args(argv)
    modules = args.modules.split(",")
    deselect = DESELECT + [t for t in args.deselect.split(",") if t]
    work = args.work.resolve()
    if work == Path("/tmp") or Path("/tmp") in work.parents:
        ap.error("--work must lie outside /tmp (confined test processes get an empty /tmp of their own)")
    if args.only and not args.tier:
        ap.error("--only selects mutants in direct mode only: give --tier too")
    if args.report_only and not (args.resume and args.tier and (work / "mutants").exists()):
        ap.error("--report-only needs --resume, --tier and a --work that holds a run")
    if args.tier and not args.resume and (work / "direct.jsonl").exists():
        ap.error(f"{work} holds a direct run's results: --resume to go on with it, or another --work")
    if not (args.resume and (work / "mutants").exists()):
        copy_tree(work)
        configure(work, modules, args.tests.split(), deselect)
    elif not args.report_only:
        refresh_tree(work)
    path = [str(work / "mutants" / "src"), str(SUPPORT), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path),
               CUDA_AGENT_MUTATION_HITS=str(work / "worker_hits.txt"), CUDA_VISIBLE_DEVICES="",
               PYTHONDONTWRITEBYTECODE="1")
    env.pop("CUDA_AGENT_REHEARSAL", None)
    # exists before mutmut starts: a PYTHONPATH folder missing at interpreter start is cached as absent, and
    # the tests in mutmut's own process would import the unmutated package instead
    (work / "mutants" / "src").mkdir(parents=True, exist_ok=True)
    if args.tier:
        return direct(args, work, env, modules, deselect)
    t0 = time.time()
    names = args.rerun.read_text().split() if args.rerun else []
    proc = subprocess.Popen([*MUTMUT, "run", "--max-children", str(args.children), *names], cwd=work, env=env,
                            stdout=open(work / "mutmut_run.log", "w"), stderr=subprocess.STDOUT)
    try:
        proc.wait(timeout=args.time_limit)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    wall = time.time() - t0
    status = results(work, env)
    equivalent = load_equivalent()
    table = summarize(status, equivalent)
    survivors = sorted(n for n, s in status.items() if s in ("survived", "no tests") and n not in equivalent)
    report = {"modules": table, "wall_s": round(wall, 1), "children": args.children, "mutmut_exit": proc.returncode,
              "survivors": survivors, "deselected": deselect}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    if args.diffs:
        show_diffs(work, env, survivors, args.diffs)
    print(f"{'module':10s} {'mutants':>8s} {'caught':>7s} {'survived':>9s} {'no tests':>9s} {'unchecked':>10s} "
          f"{'equiv':>6s} {'score':>7s}")
    for m, r in table.items():
        print(f"{m:10s} {r['mutants']:8d} {r['caught']:7d} {r['survived']:9d} {r['no_tests']:9d} "
              f"{r['not_checked']:10d} {r['equivalent']:6d} {r['score'] if r['score'] is not None else '-':>7}")
    print(f"wall {wall:.0f} s with {args.children} children; {len(survivors)} survivors"
          + (f" (listed in {args.out})" if args.out else ""))
    if not status:
        print(open(work / "mutmut_run.log").read()[-3000:], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
