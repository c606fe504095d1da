"""Building a candidate, on the CPUs, with a timeout and a content-hash cache.

* **workspace**: every ``kernels/*.cu`` goes through nvcc and every ``kernels/*.cpp`` through
  the host compiler, all at once, then one link into ``cuda_ext.so``. The build does not go
  through ``torch.utils.cpp_extension.load``: that has no content-keyed cache, and its flags
  (``-D__CUDA_NO_HALF_OPERATORS__`` ...) get in a kernel writer's way. It does use
  cpp_extension's include and library paths. Bindings written against torch's stable ABI
  (``torch/csrc/stable/*.h``, ``STABLE_TORCH_LIBRARY``) compile in about a second; ones that
  include ``torch/extension.h`` work too, at about 45 s.
* **file** (``load_inline``): the file is executed in a build subprocess, so torch's own
  ``load_inline`` compiles into a per-content ``TORCH_EXTENSIONS_DIR``; the worker that runs the
  candidate later finds the module there already built.

Both build for the GPU's target (gpu.build_arch): the arch-specific ``sm_90a`` on compute capability 9.0
and ``sm_100a`` on 10.0, so that wgmma, TMA and setmaxnreg compile; plain ``sm_XY`` elsewhere.

Artifacts are keyed by a hash of the sources, flags, target arch, torch, nvcc and Python versions.

Confinement (``SandboxConfig.isolation``, :mod:`.confine`): every compiler and the single-file build
run under bubblewrap, where they see the sources read-only and write only into a fresh directory of
their own. The trusted side then moves that directory into the cache and records a SHA-256 of every
file in ``build.json``; a cached artifact whose files no longer match is rebuilt, never loaded.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import confine
from .config import SandboxConfig
from .gpu import ARCH_SPECIFIC, gpu_info
from .logs import shorten_paths, trim_compiler_log, trim_traceback
from .solution import FILE, KERNEL_DIR, REFERENCE, WORKSPACE, Solution, SolutionError

BUILDER_VERSION = "2"
MISSING_TOOL = "nvcc not found"
LIB_NAME = "cuda_ext"
NVCC_FLAGS = ("-O3", "-std=c++17", "--expt-relaxed-constexpr", "-lineinfo", "-Xcompiler", "-fPIC")
CXX_FLAGS = ("-O2", "-std=c++17", "-fPIC", "-DUSE_CUDA", f"-DTORCH_EXTENSION_NAME={LIB_NAME}")
MAX_ARTIFACT_BYTES = 2 << 30
"""The most one build directory may hold (2 GiB). A workspace build is its object files and one library,
a load_inline build torch's ninja tree: tens of MB even with CUTLASS or cuBLAS templates. The cap is far
above any real build; it stops a build that filled its scratch (by mistake or on purpose) from being
hashed on every cache lookup, cached and loaded."""


@dataclass
class BuildResult:
    ok: bool
    build_s: float = 0.0
    cached: bool = False
    library: str | None = None
    """Path of the built shared library (workspace), or None."""
    extensions_dir: str | None = None
    """TORCH_EXTENSIONS_DIR holding load_inline builds (file solutions)."""
    python_module: bool = False
    """The library defines PYBIND11_MODULE: import it as a module (else torch.ops.load_library)."""
    timeout: bool = False
    log: str = ""


@functools.cache
def cuda_home() -> str | None:
    env = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if env and Path(env, "bin", "nvcc").exists():
        return env
    for cand in ("/usr/local/cuda",):
        if Path(cand, "bin", "nvcc").exists():
            return cand
    nvcc = shutil.which("nvcc")
    if nvcc:
        real = Path(nvcc).resolve()
        if real.parent.name == "bin" and (real.parent.parent / "include").exists():
            return str(real.parent.parent)
    return None


@functools.cache
def nvcc_path() -> str | None:
    home = cuda_home()
    return str(Path(home, "bin", "nvcc")) if home else shutil.which("nvcc")


@functools.cache
def _tool_version(tool: str) -> str:
    try:
        return subprocess.run([tool, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()[-200:]
    except (OSError, subprocess.TimeoutExpired):
        return "missing"


@functools.cache
def _torch_paths() -> tuple[list[str], list[str], bool]:
    """(include dirs, library dirs, cxx11 abi) of the installed torch, without needing CUDA_HOME."""
    import torch
    from torch.utils import cpp_extension

    includes = cpp_extension.include_paths("cpu")
    libs = cpp_extension.library_paths("cpu")
    return includes, libs, bool(torch._C._GLIBCXX_USE_CXX11_ABI)


@functools.cache
def _extra_lib_dirs() -> tuple[list[str], list[str]]:
    """Include and library dirs of pip-installed NVIDIA packages (cuDNN, cuBLAS) next to torch."""
    inc, lib = [], []
    try:
        import nvidia  # namespace package of the nvidia-* wheels
        for root in map(Path, nvidia.__path__):
            for sub in sorted(root.iterdir()):
                if (sub / "include").is_dir():
                    inc.append(str(sub / "include"))
                if (sub / "lib").is_dir():
                    lib.append(str(sub / "lib"))
    except ImportError:
        pass
    return inc, lib


DEFAULT_ARCH = ARCH_SPECIFIC["9.0"]
"""The target on a host without a GPU (the H100/H200 the project is measured on): a compile error found
there is the one the GPU host would find."""


def resolve_arch(config: SandboxConfig) -> str:
    """The build target: ``config.arch`` as given, else the GPU's (gpu.build_arch), else DEFAULT_ARCH."""
    if config.arch:
        return config.arch
    info = gpu_info(config.device)
    return info.arch if info else DEFAULT_ARCH


def torch_arch_list(arch: str) -> str:
    """TORCH_CUDA_ARCH_LIST's spelling of a target: "90a" -> "9.0a", "100a" -> "10.0a", "80" -> "8.0"."""
    m = re.fullmatch(r"(\d+)(\d)([a-z]?)", arch)
    if m is None:
        raise ValueError(f"not a CUDA arch: {arch!r} (expected e.g. '90a' or '80')")
    return f"{m[1]}.{m[2]}{m[3]}"


def build_key(solution: Solution, config: SandboxConfig) -> str:
    import torch

    h = hashlib.sha256()
    for part in (BUILDER_VERSION, solution.fingerprint(), resolve_arch(config), torch.__version__,
                 sys.version, " ".join(NVCC_FLAGS + CXX_FLAGS), _tool_version(nvcc_path() or "nvcc"),
                 _tool_version(os.environ.get("CXX", "c++")), config.isolation):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:32]


def build(solution: Solution, config: SandboxConfig) -> BuildResult:
    """Build (or fetch from the cache) a solution. Errors are returned as data, never raised."""
    t0 = time.perf_counter()
    if solution.kind == REFERENCE:
        return BuildResult(ok=True)
    key = build_key(solution, config)
    out_dir = config.cache_dir / "build" / key
    manifest = out_dir / "build.json"
    if manifest.is_file():
        saved = json.loads(manifest.read_text())
        hashes = saved.pop("sha256", None)
        if hashes is None or _artifact_hashes_or_none(out_dir) == hashes:
            result = BuildResult(**saved)
            result.cached, result.build_s = True, time.perf_counter() - t0
            return result
        shutil.rmtree(out_dir, ignore_errors=True)  # changed since it was built: never load it
    if solution.kind == WORKSPACE:
        result = _build_workspace(solution, config, out_dir)
    elif solution.kind == FILE:
        result = _build_file(solution, config, out_dir)
    else:
        raise ValueError(solution.kind)
    result.build_s = time.perf_counter() - t0
    # Compiler verdicts are deterministic for a given key, so failures are cached too; a timeout
    # or a missing tool says nothing about the sources and is not.
    if result.ok or (not result.timeout and not result.log.startswith(MISSING_TOOL)):
        out_dir.mkdir(parents=True, exist_ok=True)
        try:
            hashes = artifact_hashes(out_dir)
        except ArtifactError as e:  # never cached: nothing of this directory is loaded
            shutil.rmtree(out_dir, ignore_errors=True)
            return BuildResult(ok=False, build_s=result.build_s, log=str(e))
        # a fresh name: the build could have left a FIFO or a link at any name it can guess
        fd, tmp = tempfile.mkstemp(prefix=".build.", suffix=".tmp", dir=out_dir)
        with os.fdopen(fd, "w") as f:
            json.dump({"ok": result.ok, "library": result.library, "python_module": result.python_module,
                       "extensions_dir": result.extensions_dir, "log": result.log, "sha256": hashes}, f)
        os.replace(tmp, manifest)
    return result


def _artifact_hashes_or_none(out_dir: Path) -> dict[str, str] | None:
    try:
        return artifact_hashes(out_dir)
    except ArtifactError:
        return None


class ArtifactError(RuntimeError):
    """A build directory the trusted side refuses to hash, cache or load; the message names the file."""


def artifact_hashes(out_dir: Path) -> dict[str, str]:
    """SHA-256 of every regular file of a build directory (the manifest and temporaries aside), read in
    chunks, and the target of every symbolic link (recorded, never followed). What a confined build left
    must not block or flood the trusted side: anything else (a FIFO, a socket) or more than
    MAX_ARTIFACT_BYTES in all raises ArtifactError."""
    out, total = {}, 0
    for p in sorted(out_dir.rglob("*")):  # rglob does not descend into linked directories
        rel = str(p.relative_to(out_dir))
        if p.name == "build.json" or p.name.startswith(".build."):
            continue
        try:
            st = p.lstat()
            if stat.S_ISDIR(st.st_mode):
                continue
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "symlink:" + os.readlink(p)
                continue
            if not stat.S_ISREG(st.st_mode):
                raise ArtifactError(f"build output {rel}: not a regular file (mode {stat.filemode(st.st_mode)}); refused")
            total += st.st_size
            if total > MAX_ARTIFACT_BYTES:
                raise ArtifactError(f"build output {rel}: the build directory holds more than {MAX_ARTIFACT_BYTES} "
                                    "bytes; refused")
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise ArtifactError(f"build output {rel}: changed while it was read; refused")
                h = hashlib.sha256()
                while chunk := f.read(1 << 20):
                    h.update(chunk)
                out[rel] = h.hexdigest()
        except OSError as e:
            raise ArtifactError(f"build output {rel}: cannot read it ({e.strerror or e})") from None
    return out


def _jailed(cmd: list[str], config: SandboxConfig, ro: list[Path], rw: list[Path]) -> list[str]:
    """A build command, confined (see the module doc) unless isolation is off."""
    if config.isolation == "none":
        return cmd
    jail = confine.Jail(ro_binds={str(p): str(p) for p in ro}, binds={str(p): str(p) for p in rw},
                        hidden=[str(config.cache_dir)])
    return jail.command(cmd, scratch=None, cwd=str(ro[0]))


# ----------------------------------------------------------------------------- workspace

def _compile_commands(solution: Solution, config: SandboxConfig, obj_dir: Path) -> list[tuple[list[str], Path]]:
    includes, _, abi = _torch_paths()
    extra_inc, _ = _extra_lib_dirs()
    arch = resolve_arch(config)
    home = cuda_home()
    kdir = solution.path / KERNEL_DIR
    sys_inc = [*includes, sysconfig.get_paths()["include"], *([f"{home}/include"] if home else []), *extra_inc]
    commands = []
    for src in solution.cuda_sources():
        obj = obj_dir / (src.stem + ".cu.o")
        cmd = [nvcc_path() or "nvcc", "-c", str(src), "-o", str(obj), *NVCC_FLAGS,
               f"-gencode=arch=compute_{arch},code=sm_{arch}", f"-I{kdir}",
               f"-D_GLIBCXX_USE_CXX11_ABI={int(abi)}"]
        text = src.read_text(errors="replace")
        if "torch/" in text or "ATen/" in text or "c10/" in text:
            cmd += [f"-isystem{p}" for p in sys_inc]
        commands.append((cmd, src))
    cxx = os.environ.get("CXX", "c++")
    other_cpp = [p for p in (kdir.rglob("*.cpp") if kdir.is_dir() else [])]
    for src in sorted(other_cpp):
        obj = obj_dir / (src.stem + ".cpp.o")
        cmd = [cxx, "-c", str(src), "-o", str(obj), *CXX_FLAGS, f"-D_GLIBCXX_USE_CXX11_ABI={int(abi)}",
               f"-I{kdir}", *[f"-isystem{p}" for p in sys_inc]]
        if "torch/extension.h" in src.read_text(errors="replace"):
            cmd.append("-DTORCH_API_INCLUDE_EXTENSION_H")
        commands.append((cmd, src))
    return commands


def _link_command(solution: Solution, objs: list[Path], lib: Path) -> list[str]:
    _, libs, _ = _torch_paths()
    _, extra_lib = _extra_lib_dirs()
    home = cuda_home()
    text = "\n".join(p.read_text(errors="replace") for p in solution.source_files() if p.suffix != ".py")
    cmd = [os.environ.get("CXX", "c++"), "-shared", *map(str, objs), "-o", str(lib)]
    for d in [*libs, *([f"{home}/lib64"] if home else []), *extra_lib]:
        cmd += [f"-L{d}", f"-Wl,-rpath,{d}"]
    cmd += ["-lc10", "-ltorch", "-ltorch_cpu"]
    if any(d for d in libs if Path(d, "libtorch_cuda.so").exists()):
        cmd += ["-ltorch_cuda", "-lc10_cuda"]
    if "PYBIND11_MODULE" in text or "torch/extension.h" in text or "torch/python.h" in text:
        cmd.append("-ltorch_python")
    cmd.append("-lcudart")
    if "cublas" in text:
        cmd += ["-lcublas", "-lcublasLt"]
    if "cudnn" in text:
        cmd.append("-lcudnn")
    return cmd


def _build_env(config: SandboxConfig) -> dict[str, str] | None:
    """A confined build's environment: no secrets, and TMPDIR inside the jail (a host TMPDIR, such as a
    cluster job's, is not mounted there and nvcc would fail to write its temporaries)."""
    return None if config.isolation == "none" else confine.confined_env(dict(os.environ))


def usable_cpus() -> int:
    """The CPUs this process may run on (a bench lane has its own share of them), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _run_parallel(commands: list[tuple[list[str], Path]], deadline: float, cwd: Path,
                  wrap=lambda cmd: cmd, env: dict[str, str] | None = None) -> tuple[bool, bool, str]:
    """Run compile commands concurrently (bounded by the CPU count). Returns (ok, timed_out, log)."""
    max_jobs = usable_cpus()
    pending = list(commands)
    running: list[tuple[subprocess.Popen, Path]] = []
    logs, ok = [], True
    while pending or running:
        while pending and len(running) < max_jobs:
            cmd, src = pending.pop(0)
            running.append((subprocess.Popen(wrap(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                             text=True, start_new_session=True), src))
        proc, src = running.pop(0)
        remaining = deadline - time.monotonic()
        try:
            out, _ = proc.communicate(timeout=max(0.1, remaining))
        except subprocess.TimeoutExpired:
            for p, _ in [(proc, src), *running]:
                _kill_group(p)
            return False, True, "\n".join(logs + [f"build timed out while compiling {src.name}"])
        if proc.returncode != 0:
            ok = False
        if out.strip() and (proc.returncode != 0 or "error" in out.lower()):
            logs.append(out)
    return ok, False, "\n".join(logs)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _build_workspace(solution: Solution, config: SandboxConfig, out_dir: Path) -> BuildResult:
    if not solution.cuda_sources() and not solution.binding_sources():
        return BuildResult(ok=True)  # pure-Python model_new.py: nothing to build
    if nvcc_path() is None and solution.cuda_sources():
        return BuildResult(ok=False, log=f"{MISSING_TOOL}: set CUDA_HOME or put nvcc on PATH")
    deadline = time.monotonic() + config.build_timeout_s
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    commands = _compile_commands(solution, config, work)
    wrap = functools.partial(_jailed, config=config, ro=[solution.path], rw=[work])
    ok, timed_out, log = _run_parallel(commands, deadline, solution.path, wrap, _build_env(config))
    roots = {str(solution.path): "", str(work): ""}
    if ok:
        lib = work / f"{LIB_NAME}.so"
        objs = sorted(work.glob("*.o"))
        link = subprocess.run(wrap(_link_command(solution, objs, lib)), cwd=solution.path, env=_build_env(config),
                              capture_output=True,
                              text=True, timeout=max(1.0, deadline - time.monotonic()))
        if link.returncode != 0:
            ok, log = False, log + "\n" + link.stdout + link.stderr
    if not ok:
        shutil.rmtree(work, ignore_errors=True)
        text = shorten_paths(log, roots)
        return BuildResult(ok=False, timeout=timed_out,
                           log=trim_compiler_log(text) if not timed_out else text[-2000:])
    try:
        work.rename(out_dir)
    except OSError:  # a concurrent build of the same sources won the race
        shutil.rmtree(work, ignore_errors=True)
    pybind = any("PYBIND11_MODULE" in p.read_text(errors="replace") for p in solution.binding_sources())
    return BuildResult(ok=True, library=str(out_dir / f"{LIB_NAME}.so"), python_module=pybind,
                       log=trim_compiler_log(log) if log else "")


# ----------------------------------------------------------------------------- single file

def inline_env(extensions_dir: str | Path, arch: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TORCH_EXTENSIONS_DIR"] = str(extensions_dir)
    env["TORCH_CUDA_ARCH_LIST"] = torch_arch_list(arch)
    env["MAX_JOBS"] = str(usable_cpus())
    if cuda_home():
        env.setdefault("CUDA_HOME", cuda_home())
    return env


def _build_file(solution: Solution, config: SandboxConfig, out_dir: Path) -> BuildResult:
    """Execute the file so that its ``load_inline`` compiles. Confined, it runs on a copy of the file in
    a fresh directory that holds the extensions too; the same directory, moved into the cache by the
    trusted side, is what a worker is later given (as :data:`.confine.INSIDE`, so that the build files
    torch wrote name the same paths)."""
    if config.isolation == "none":
        ext_dir = out_dir / "torch_extensions"
        ext_dir.mkdir(parents=True, exist_ok=True)
        env = inline_env(ext_dir, resolve_arch(config))
        cmd = [sys.executable, "-m", "cuda_agent.sandbox.inline_build", str(solution.path)]
        cwd, roots = solution.path.parent, {str(solution.path.parent): "", str(ext_dir): ""}
        work = None
    else:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
        (work / "torch_extensions").mkdir()
        stage_solution(solution, work / "solution")
        env = confine.confined_env(inline_env(f"{confine.INSIDE}/torch_extensions", resolve_arch(config)))
        inside = f"{confine.INSIDE}/solution/{solution.path.name}"
        cmd = confine.Jail(hidden=[str(config.cache_dir)]).command(
            [sys.executable, "-m", "cuda_agent.sandbox.inline_build", inside],
                                     scratch=str(work), cwd=f"{confine.INSIDE}/solution")
        cwd, roots = None, {f"{confine.INSIDE}/solution": "", f"{confine.INSIDE}/torch_extensions": ""}
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=config.build_timeout_s)
        _kill_group(proc)  # whatever the file started and left behind: nothing of it runs into the timings
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        return BuildResult(ok=False, timeout=True, log=f"build timed out after {config.build_timeout_s:.0f} s")
    if proc.returncode != 0:
        if work is not None:
            shutil.rmtree(work, ignore_errors=True)
        text = shorten_paths(out, roots)
        trimmed = trim_compiler_log(text) if "error" in text.lower() and "Traceback" not in text[-3000:] \
            else trim_traceback(text)
        return BuildResult(ok=False, log=trimmed)
    if work is not None:
        shutil.rmtree(work / "solution", ignore_errors=True)  # the cache keeps the build, not the sources
        try:
            work.rename(out_dir)
        except OSError:  # a concurrent build of the same sources won the race
            shutil.rmtree(work, ignore_errors=True)
    return BuildResult(ok=True, extensions_dir=str(out_dir / "torch_extensions"))


def stage_solution(solution: Solution, dest: Path) -> Path:
    """Copy the solution's candidate code (exactly the files hashed and checked) into ``dest``: what a
    confined build or worker is given, instead of the directory the solution lives in (which may hold
    other solutions, or an agent's whole workspace)."""
    dest.mkdir(parents=True, exist_ok=True)
    for p in solution.source_files():
        if p.is_symlink() or any(q.is_symlink() for q in p.parents if solution.root in q.parents):
            raise SolutionError(f"{solution.display(p)}: a symbolic link (the solution's files must be its own)")
        rel = Path(solution.display(p))
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"{p}: outside the solution")
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, dest / rel)
    return dest
