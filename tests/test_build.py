"""Building candidates on the CPUs (nvcc, no GPU): content-keyed cache, errors as data, timeouts;
and the log trimming that turns compiler and Python output into something a reader can use.

Each workspace is compiled at most once per session (module-scoped fixtures, one tmp cache).
"""

import hashlib
import importlib
import os
import shutil
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from cuda_agent.sandbox import SandboxConfig, build, confine, load_solution  # noqa: E402
build_module = importlib.import_module("cuda_agent.sandbox.build")  # the package's `build` is the function
from cuda_agent.sandbox.build import build_key, inline_env, resolve_arch  # noqa: E402
from cuda_agent.sandbox.gpu import GpuInfo, build_arch  # noqa: E402
from cuda_agent.sandbox.logs import trim_compiler_log, trim_traceback  # noqa: E402

from .conftest import EXAMPLES, SOLUTIONS, within  # noqa: E402

SWISH = EXAMPLES / "swish" / "solution"


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("build_cache")


@pytest.fixture(scope="module")
def config(build_cache):
    return SandboxConfig(cache_dir=build_cache, arch="90")


@pytest.fixture(scope="module")
def swish_build(config):
    return build(load_solution(SWISH), config)


@pytest.fixture(scope="module")
def compile_error_build(config):
    return build(load_solution(SOLUTIONS / "compile_error"), config)


# ----------------------------------------------------------------------------- nvcc builds

@pytest.mark.nvcc
def test_example_workspace_builds(swish_build, build_cache):
    assert swish_build.ok, swish_build.log
    assert not swish_build.cached and not swish_build.timeout
    assert swish_build.library and swish_build.library.endswith("cuda_ext.so")
    lib = Path(swish_build.library)
    assert lib.is_file() and lib.stat().st_size > 0
    assert build_cache in lib.parents


@pytest.mark.nvcc
def test_second_build_is_a_fast_cache_hit(swish_build, config):
    t0 = time.perf_counter()
    again = build(load_solution(SWISH), config)
    elapsed = time.perf_counter() - t0
    assert again.ok and again.cached
    assert again.library == swish_build.library
    assert elapsed < 0.3, f"cache hit took {elapsed:.3f} s"


@pytest.mark.nvcc
def test_cache_is_keyed_by_content_not_by_path(swish_build, config, tmp_path):
    shutil.copytree(SWISH, tmp_path / "swish")
    copy = build(load_solution(tmp_path / "swish"), config)
    assert copy.ok and copy.cached and copy.library == swish_build.library


@pytest.mark.nvcc
def test_editing_a_source_changes_the_key_and_rebuilds(swish_build, config, tmp_path):
    ws = tmp_path / "swish"  # a copy, so that editing it leaves the example alone
    shutil.copytree(SWISH, ws)
    solution = load_solution(ws)
    before = build_key(solution, config)
    cu = ws / "kernels" / "swish.cu"
    cu.write_text(cu.read_text() + "\n// edited: a new kernel version\n")
    after = build_key(solution, config)
    assert after != before
    rebuilt = build(solution, config)
    assert rebuilt.ok, rebuilt.log
    assert not rebuilt.cached
    assert rebuilt.library != swish_build.library and after in rebuilt.library


@pytest.mark.nvcc
def test_compile_error_is_returned_as_data_with_file_and_line(compile_error_build):
    r = compile_error_build
    assert not r.ok and not r.timeout and r.library is None
    assert "kernels/ew.cu(" in r.log
    assert "error" in r.log
    assert "/kernels/ew.cu(" not in r.log, "absolute paths should be shortened to the workspace"


@pytest.mark.nvcc
def test_compile_error_is_cached_with_its_log(compile_error_build, config):
    """A compiler verdict is deterministic for the same sources: the second build answers from the
    cache, with the same error, and no library."""
    assert not compile_error_build.ok
    again = build(load_solution(SOLUTIONS / "compile_error"), config)
    assert again.cached and not again.ok and again.library is None
    assert again.log == compile_error_build.log and "kernels/ew.cu(" in again.log
    assert again.build_s < 0.3


@pytest.mark.nvcc
def test_build_timeout_is_reported_and_not_cached(tmp_path):
    cfg = SandboxConfig(cache_dir=tmp_path, arch="90", build_timeout_s=0.01)
    t0 = time.perf_counter()
    r = build(load_solution(SWISH), cfg)
    assert not r.ok and r.timeout
    assert "timed out" in r.log
    assert time.perf_counter() - t0 < 10
    assert not list(tmp_path.glob("build/*/build.json")), "a timed-out build must not be cached"


# ----------------------------------------------------------------------------- no compiler needed

def test_workspace_without_kernels_builds_trivially(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "model_new.py").write_text("import torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n")
    r = build(load_solution(ws), SandboxConfig(cache_dir=tmp_path / "cache", arch="90"))
    assert r.ok and r.library is None and not r.timeout


ISOLATIONS = ["none", pytest.param("bwrap", marks=pytest.mark.skipif(
    confine.probe() is not None, reason="bubblewrap cannot run here"))]


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("leave, why", [
    pytest.param("os.mkfifo(os.path.join(d, 'pipe'))", "pipe: not a regular file", id="fifo"),
    pytest.param("open(os.path.join(d, 'big.bin'), 'wb').write(b'x' * 4096)",
                 "big.bin: the build directory holds more than 1024", id="oversize"),
])
def test_a_build_that_leaves_a_fifo_or_too_much_is_refused_not_hashed(tmp_path, monkeypatch, isolation, leave, why):
    monkeypatch.setattr(build_module, "MAX_ARTIFACT_BYTES", 1024)
    src = tmp_path / "model_new.py"
    src.write_text(f"import os\nd = os.environ['TORCH_EXTENSIONS_DIR']\n{leave}\n")
    cfg = SandboxConfig(cache_dir=tmp_path / "cache", arch="90", isolation=isolation)
    r = within(60, lambda: build(load_solution(src), cfg))
    assert not r.ok and not r.cached and why in r.log, r.log
    assert not list((tmp_path / "cache").glob("build/*")), "a refused build must not be cached"


def test_artifact_hashes_record_a_link_by_its_target_and_read_in_chunks(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(tmp_path / "pipe")
    (out / "to_pipe").symlink_to(tmp_path / "pipe")
    (out / "to_zero").symlink_to("/dev/zero")
    (out / "lib.so").write_bytes(b"y" * (3 << 20))
    hashes = within(30, lambda: build_module.artifact_hashes(out))
    assert hashes == {"lib.so": hashlib.sha256(b"y" * (3 << 20)).hexdigest(),
                      "to_pipe": f"symlink:{tmp_path / 'pipe'}", "to_zero": "symlink:/dev/zero"}
    monkeypatch.setattr(build_module, "MAX_ARTIFACT_BYTES", 1 << 20)
    with pytest.raises(build_module.ArtifactError, match="lib.so"):
        build_module.artifact_hashes(out)


def test_key_ignores_harness_files_but_not_model_new(tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(SWISH, ws)
    cfg = SandboxConfig(cache_dir=tmp_path / "cache", arch="90")
    solution = load_solution(ws)
    key = build_key(solution, cfg)
    (ws / "SKILL.md").write_text("notes for the agent\n")
    (ws / "model.py").write_text("# the reference, owned by the harness\n")
    assert build_key(solution, cfg) == key
    (ws / "model_new.py").write_text((ws / "model_new.py").read_text() + "\n# edited\n")
    assert build_key(solution, cfg) != key


def test_key_depends_on_the_arch(tmp_path):
    solution = load_solution(SWISH)
    k90 = build_key(solution, SandboxConfig(cache_dir=tmp_path, arch="90"))
    k80 = build_key(solution, SandboxConfig(cache_dir=tmp_path, arch="80"))
    k90a = build_key(solution, SandboxConfig(cache_dir=tmp_path, arch="90a"))
    assert len({k90, k80, k90a}) == 3  # the arch-specific target is a target of its own


# ----------------------------------------------------------------------------- arch-specific targets

@pytest.mark.parametrize("cc, target", [("9.0", "90a"), ("10.0", "100a"), ("8.0", "80"), ("8.9", "89"),
                                        ("12.0", "120"), ("7.5", "75")])
def test_hopper_and_blackwell_build_for_their_arch_specific_target(cc, target):
    assert build_arch(cc) == target
    assert GpuInfo(0, "NVIDIA X", cc, "GPU-0").arch == target


def test_a_host_without_a_gpu_builds_for_sm90a_and_a_configured_arch_is_taken_as_given(monkeypatch, tmp_path):
    monkeypatch.setattr(build_module, "gpu_info", lambda device: None)
    assert resolve_arch(SandboxConfig(cache_dir=tmp_path)) == "90a"
    assert resolve_arch(SandboxConfig(cache_dir=tmp_path, arch="90")) == "90"
    monkeypatch.setattr(build_module, "gpu_info", lambda device: GpuInfo(0, "NVIDIA B200", "10.0", "GPU-0"))
    assert resolve_arch(SandboxConfig(cache_dir=tmp_path)) == "100a"
    with pytest.raises(ValueError, match="arch must look like"):
        SandboxConfig(cache_dir=tmp_path, arch="sm_90a")


def test_workspace_nvcc_commands_carry_the_target(tmp_path):
    cmds = build_module._compile_commands(load_solution(SWISH), SandboxConfig(cache_dir=tmp_path, arch="90a"), tmp_path)
    nvcc = [cmd for cmd, src in cmds if src.suffix == ".cu"]
    assert nvcc and all("-gencode=arch=compute_90a,code=sm_90a" in cmd for cmd in nvcc)


@pytest.mark.parametrize("arch, listed, flag", [("90a", "9.0a", "-gencode=arch=compute_90a,code=sm_90a"),
                                                ("100a", "10.0a", "-gencode=arch=compute_100a,code=sm_100a"),
                                                ("80", "8.0", "-gencode=arch=compute_80,code=sm_80")])
def test_load_inline_builds_get_the_same_target_through_torch_cuda_arch_list(monkeypatch, tmp_path, arch, listed, flag):
    from torch.utils import cpp_extension

    env = inline_env(tmp_path, arch)
    assert env["TORCH_CUDA_ARCH_LIST"] == listed
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", env["TORCH_CUDA_ARCH_LIST"])
    assert cpp_extension._get_cuda_arch_flags() == [flag]  # what torch's load_inline passes to nvcc


@pytest.mark.nvcc
def test_an_sm90a_only_kernel_builds_for_sm90a_and_not_for_plain_sm90(tmp_path):
    """The honest swish with inline-PTX wgmma fence/commit/wait: the test means something only if plain
    sm_90 rejects it."""
    solution = load_solution(SOLUTIONS / "honest_swish_sm90a")
    hopper = build(solution, SandboxConfig(cache_dir=tmp_path, arch="90a"))
    assert hopper.ok, hopper.log
    plain = build(solution, SandboxConfig(cache_dir=tmp_path, arch="90"))
    assert not plain.ok and "wgmma" in plain.log and "sm_90" in plain.log, plain.log


# ----------------------------------------------------------------------------- logs

GCC_LOG = """\
In file included from kernels/helpers.cuh:3,
kernels/ew_binding.cpp:12:5: error: 'launch_ew' was not declared in this scope
   12 |     launch_ew(x, y, n);
      |     ^~~~~~~~~
kernels/ew_binding.cpp:30:9: warning: unused variable 'k' [-Wunused-variable]
compilation terminated.
"""


def test_trim_compiler_log_keeps_error_lines():
    out = trim_compiler_log(GCC_LOG)
    assert "kernels/ew_binding.cpp:12:5: error: 'launch_ew' was not declared in this scope" in out
    assert "launch_ew(x, y, n);" in out  # the source line that follows, as context


def test_trim_compiler_log_drops_include_chain_noise():
    out = trim_compiler_log(GCC_LOG)
    assert "In file included from" not in out
    assert "compilation terminated" not in out


def test_trim_compiler_log_caps_length():
    noise = "\n".join(f"kernels/k.cu({i}): error: thing {i} is wrong" for i in range(2000))
    out = trim_compiler_log(noise, limit=1000)
    assert len(out) <= 1100 and "chars trimmed" in out
    assert "kernels/k.cu(0): error" in out and "kernels/k.cu(1999): error" in out


def test_trim_compiler_log_drops_relative_include_continuation_lines():
    log = ("In file included from kernels/a.cuh:2,\n                 from kernels/ew.cu:1:\n"
           "kernels/b.cuh:7:1: error: expected ';' before '}' token\n")
    out = trim_compiler_log(log)
    assert "kernels/b.cuh:7:1: error" in out
    assert "from kernels/ew.cu:1:" not in out


TRACEBACK = """\
Traceback (most recent call last):
  File "/work/ws/model_new.py", line 14, in forward
    return cuda_ext.swish(x)
  File "{site}/torch/_ops.py", line 1243, in __call__
    return self._op(*args, **kwargs)
  File "{site}/torch/nn/modules/module.py", line 1775, in _call_impl
    return forward_call(*args, **kwargs)
RuntimeError: swish launch failed: invalid argument
"""


def test_trim_traceback_drops_torch_internal_frames():
    out = trim_traceback(TRACEBACK.format(site="/usr/lib/python3.11/site-packages"))
    assert 'model_new.py", line 14, in forward' in out and "return cuda_ext.swish(x)" in out
    assert "torch/_ops.py" not in out and "self._op(*args" not in out
    assert "module.py" not in out and "forward_call" not in out
    assert out.splitlines()[-1] == "RuntimeError: swish launch failed: invalid argument"


def test_trim_traceback_drops_torch_frames_from_dist_packages():
    out = trim_traceback(TRACEBACK.format(site="/usr/local/lib/python3.12/dist-packages"))
    assert "torch/_ops.py" not in out and "model_new.py" in out
