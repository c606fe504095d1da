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
import re
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
if spec.get("nodes"):  # what the jail's /dev holds, and whether each NVIDIA node opens read-write
    out["dev"] = sorted(os.listdir("/dev"))
    for n in sorted(p for p in out["dev"] if p.startswith("nvidia")):
        try:
            os.close(os.open("/dev/" + n, os.O_RDWR))
            out[n] = "opens"
        except OSError as e:
            out[n] = f"{type(e).__name__}: {e}"
import torch
print("CUDA STARTS", file=sys.stderr, flush=True)  # failed calls logged after this line are CUDA's
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


SHIM = "/probe/failed_calls.so"
"""Where the jail finds the LD_PRELOAD shim (benchmarks/probe/failed_calls.c) that logs failed calls."""


def run(name: str, spec: dict, jail: bool, without: list[str] | None = None, trace: str | None = None,
        extra: list[str] | None = None, shim: str | None = None, host_env: bool = False,
        argv_only: list[str] | None = None, writable: bool = False, own_pid: bool = False) -> dict:
    """``extra``: bwrap options added just before the command (after the jail's own); ``shim``: the built
    LD_PRELOAD shim, bound at SHIM; ``host_env``: the harness's environment as it is, not confined_env's;
    ``argv_only``: bwrap options used instead of the jail's (the namespaces alone); ``writable``: every
    read-only bind of the jail made read-write, and nothing remounted read-only."""
    argv = [sys.executable, "-c", CHILD, json.dumps(spec)]
    env = dict(os.environ, PYTHONPATH=str(Path(confine.__file__).resolve().parents[2]))
    if shim:
        env["LD_PRELOAD"] = SHIM if jail else shim
    if jail:
        cmd = confine.Jail(gpu=True, share_pid=not own_pid).command(argv, scratch=None)
        if without:
            cmd = strip(cmd, without)
        if argv_only is not None:
            cmd = [cmd[0], *argv_only, "--", *argv]
        if writable:
            cmd = strip(cmd, ["--remount-ro", "/dev"])
            cmd = ["--bind" if c == "--ro-bind" else c for c in cmd]
        i = cmd.index("--chdir") if "--chdir" in cmd else cmd.index("--")
        cmd = cmd[:i] + (extra or []) + (["--ro-bind", shim, SHIM] if shim else []) + cmd[i:]
        if trace and shutil.which("strace"):  # the failed system calls of the jail and everything in it
            cmd = ["strace", "-f", "-Z", "-qq", "-s", "80", "-o", trace, *cmd]
        if not host_env:
            env = confine.confined_env(env)  # keeps LD_PRELOAD
    else:
        cmd = argv
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    except subprocess.TimeoutExpired:
        return {"variant": name, "error": "timeout"}
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    res = json.loads(line[7:]) if line else {"ok": False, "rc": p.returncode, "stderr": p.stderr[-600:]}
    if shim:
        # after the child's mark, less Python's own module search (ENOENT of .py/.pyc/.so candidates)
        err = p.stderr.split("CUDA STARTS\n", 1)[-1]
        res["failed_calls"] = [ln for ln in err.splitlines() if ln.startswith("FAILED ") and not
                               re.search(r"__pycache__|\.(py|pyc|so)\b[^/]*, 0x[0-9a-f]+\) = No such file", ln)][-300:]
    return {"variant": name, **res}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--trace", type=Path, default=None, help="strace's log of the fully confined variant")
    ap.add_argument("--quick", action="store_true", help="instead: CUDA in both GPU jail shapes, as they are")
    ap.add_argument("--view", metavar="SHIM", default=None,
                    help="instead: which part of the jail's view CUDA misses (SHIM: failed_calls.c, built)")
    args = ap.parse_args()
    if args.view:
        return view(args)
    if args.quick:  # both GPU jail shapes as they are, with the guard and Landlock as a worker enters them
        for r in (run("GPU worker's jail + landlock + guard", {"landlock": True, "guard": []}, True),
                  run("agent bash's GPU jail", {}, True, own_pid=True)):
            print(json.dumps(r), flush=True)
        return
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


def view(args) -> None:
    """Which part of the jail's view CUDA misses. The namespaces alone over the host's root start CUDA (H100,
    2026-12-05) and the jail does not, even with the host's /dev, /run, /var and environment added: so the host's
    root less one part of the jail's view at a time, and the jail plus one at a time; each with failed calls
    logged (unconfined too, to compare)."""
    shim = str(Path(args.view).resolve())
    ns = ["--die-with-parent", "--new-session", "--unshare-user-try", "--unshare-uts", "--unshare-cgroup-try",
          "--unshare-net"]
    host = [*ns, "--dev-bind", "/", "/"]
    top = [f"/{d}" for d in sorted(os.listdir("/")) if f"/{d}" not in confine.SYSTEM
           and d not in ("tmp", "proc", "dev", "sys") and os.path.isdir(f"/{d}") and not os.path.islink(f"/{d}")]
    jail_dev = ["--dev", "/dev", *[a for n in sorted(Path("/dev").glob("nvidia*")) for a in ("--dev-bind", str(n), str(n))],
                "--bind", "/dev/shm", "/dev/shm"]
    covers = [a for t in confine.trusted_paths() for a in ("--tmpfs", t)]
    jobs = [("unconfined", {}, False, dict(shim=shim)),
            ("jail", {}, True, dict(shim=shim)),
            ("host root", {}, True, dict(shim=shim, argv_only=host)),
            ("host root, /sys read-only", {}, True, dict(shim=shim, argv_only=[*host, "--ro-bind", "/sys", "/sys"])),
            ("host root, /proc read-only", {}, True, dict(shim=shim, argv_only=[*host, "--ro-bind", "/proc", "/proc"])),
            ("host root, private /tmp", {}, True, dict(shim=shim, argv_only=[*host, "--tmpfs", "/tmp"])),
            ("host root, the jail's /dev", {}, True, dict(shim=shim, argv_only=[*host, *jail_dev])),
            ("host root, trusted paths covered", {}, True, dict(shim=shim, argv_only=[*host, *covers])),
            ("host root read-only", {}, True, dict(shim=shim, argv_only=[*ns, "--ro-bind", "/", "/", "--tmpfs", "/tmp", "--dev-bind", "/dev",
                                                                         "/dev", "--bind", "/dev/shm", "/dev/shm"])),
            ("jail, everything writable", {}, True, dict(shim=shim, writable=True)),
            ("jail, /sys and /proc writable", {}, True, dict(shim=shim, extra=["--bind", "/sys", "/sys", "--bind", "/proc",
                                                                                "/proc"])),
            ("jail + every top-level directory", {}, True,
             dict(shim=shim, extra=[a for d in top for a in ("--ro-bind", d, d)]))]
    rows = [{"uid": os.getuid(), "env": sorted(os.environ), "ld_so_conf": sorted(str(p) for p in Path("/etc").glob("ld.so.conf.d/*")),
             "mounts": Path("/proc/self/mounts").read_text()[:6000],
             "caps": [ln for ln in Path("/proc/self/status").read_text().splitlines() if ln.startswith("Cap")],
             "nodes": {str(p): oct(p.stat().st_mode) + f" uid {p.stat().st_uid} gid {p.stat().st_gid}"
                       for p in sorted(Path("/dev").glob("nvidia*"))}}]
    print(json.dumps(rows[0])[:3000], flush=True)
    with ThreadPoolExecutor(6) as pool:
        for r in pool.map(lambda j: run(j[0], j[1], j[2], **j[3]), jobs):
            rows.append(r)
            print(json.dumps({k: v for k, v in r.items() if k != "failed_calls"})[:1200], flush=True)
            if args.out:
                args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
