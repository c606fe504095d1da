"""Which part of a GPU worker's confinement keeps CUDA from starting? (cudaGetDeviceCount: error 304,
"OS call failed or operation not supported on this OS", in a confined worker on the H100.)

Each variant starts CUDA (device count, one tensor op) in a fresh process: unconfined, in the GPU
worker's jail (sandbox/confine.py's Jail(gpu=True, share_pid=True)) with nothing entered, with Landlock,
with the whole process guard, with the guard less one system call's rows (one variant per call), and in
jails less one option each (JAIL_OPTIONS). Prints one JSON line per variant; the first line is the environment.

    python3 benchmarks/probe/confined_cuda.py --out $OUT/confined_cuda.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cuda_agent.sandbox import confine

CHILD = r"""
import json, sys, os
from cuda_agent.sandbox import confine
spec = json.loads(sys.argv[1])
out = {}
if spec.get("landlock"):
    out["landlock"] = confine.enter_landlock().get("enforced")
if spec.get("guard") is not None:
    drop = set(spec["guard"])
    confine.PROCESS_GUARD = tuple(r for r in confine.PROCESS_GUARD if r[0] not in drop)
    out["guard"] = confine.enter_process_guard().get("enforced")
import torch
try:
    n = torch.cuda.device_count()
    x = torch.ones(4, device="cuda") * 2
    torch.cuda.synchronize()
    out.update(ok=True, count=n, sum=float(x.sum()))
except Exception as e:
    out.update(ok=False, error=f"{type(e).__name__}: {e}"[:300])
print("RESULT " + json.dumps(out))
"""


def strip(cmd: list[str], option: list[str]) -> list[str]:
    """``cmd`` less the first occurrence of the token run ``option`` (e.g. ["--remount-ro", "/dev"])."""
    n = len(option)
    i = next((i for i in range(len(cmd) - n + 1) if cmd[i:i + n] == option), None)
    return cmd if i is None else cmd[:i] + cmd[i + n:]


JAIL_OPTIONS = {"/dev writable": ["--remount-ro", "/dev"], "no user ns": ["--unshare-user-try"],
                "net shared": ["--unshare-net"], "cgroup ns shared": ["--unshare-cgroup-try"],
                "no new session": ["--new-session"], "uts shared": ["--unshare-uts"],
                "/proc unbound": ["--ro-bind", "/proc", "/proc"], "/dev/shm unbound": ["--bind", "/dev/shm", "/dev/shm"]}
"""Jail options each left out in a variant of its own: which one keeps CUDA from starting."""


def run(name: str, spec: dict, jail: bool, without: list[str] | None = None, trace: str | None = None) -> dict:
    argv = [sys.executable, "-c", CHILD, json.dumps(spec)]
    env = dict(os.environ, PYTHONPATH=str(Path(confine.__file__).resolve().parents[2]))
    if jail:
        cmd = confine.Jail(gpu=True, share_pid=True).command(argv, scratch=None)
        if without:
            cmd = strip(cmd, without)
        if trace and shutil.which("strace"):  # the failed system calls of the jail and everything in it
            cmd = ["strace", "-f", "-Z", "-qq", "-s", "80", "-o", trace, *cmd]
        env = confine.confined_env(env)
    else:
        cmd = argv
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    except subprocess.TimeoutExpired:
        return {"variant": name, "error": "timeout"}
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    res = json.loads(line[7:]) if line else {"ok": False, "rc": p.returncode, "stderr": p.stderr[-600:]}
    return {"variant": name, **res}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--trace", type=Path, default=None, help="strace's log of the fully confined variant")
    args = ap.parse_args()
    env = {"probe": confine.probe(), "strace": shutil.which("strace"),
           "nvidia_nodes": sorted(str(p) for p in Path("/dev").glob("nvidia*")),
           "shm": os.path.isdir("/dev/shm"), "kernel": os.uname().release}
    print(json.dumps(env), flush=True)
    names = sorted({r[0] for r in confine.PROCESS_GUARD})
    jobs = [("unconfined", {}, False), ("unconfined+guard", {"guard": []}, False),
            ("jail", {}, True), ("jail+landlock", {"landlock": True}, True),
            ("jail+guard", {"guard": []}, True), ("jail+landlock+guard", {"landlock": True, "guard": []}, True),
            *[(f"jail+guard-{n}", {"guard": [n]}, True) for n in names]]
    rows = [env]
    with ThreadPoolExecutor(8) as pool:
        futs = [pool.submit(run, *j) for j in jobs]
        futs += [pool.submit(run, f"jail, {k}", {}, True, v) for k, v in JAIL_OPTIONS.items()]
        if args.trace:
            futs.append(pool.submit(run, "strace jail+landlock+guard", {"landlock": True, "guard": []}, True,
                                    None, str(args.trace)))
        for f in futs:
            r = f.result()
            rows.append(r)
            print(json.dumps(r), flush=True)
            if args.out:
                args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
