"""The workspace and the tools, run for real on a temporary workspace (no LLM involved)."""

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cuda_agent
from cuda_agent.agent import Environment
from cuda_agent.agent.templating import TemplateError, render, render_text
from cuda_agent.agent.tools import validate_args
from cuda_agent.agent.workspace import starter_model_new

from .agent_support import THREAD_MODEL_NEW, config, tiny_task
from .conftest import wait_until_locked, within


@pytest.fixture
def env(tmp_path):
    return Environment(tiny_task(tmp_path), tmp_path / "run", config(tmp_path))


def test_workspace_layout(env):
    root = env.workspace.root
    assert {p.name for p in root.iterdir()} == {"SKILL.md", "model.py", "model_new.py", "kernels"}
    assert (root / "model.py").read_text() == env.task.source
    assert stat.S_IMODE((root / "model.py").stat().st_mode) == 0o444  # read-only (root could still write it)
    skill = (root / "SKILL.md").read_text()
    for must in ("STABLE_TORCH_LIBRARY", "import cuda_ext", "prepare", "cuBLAS", "cuDNN", "fallback", "1.05"):
        assert must in skill, must
    starter = (root / "model_new.py").read_text()
    assert "class ModelNew(nn.Module)" in starter and "NotImplementedError" in starter
    compile(starter, "model_new.py", "exec")


@pytest.mark.parametrize("path", ["../x.txt", "kernels/../../x.txt", "/etc/passwd", "/tmp", ""])
def test_path_escapes_are_rejected(env, path):
    for tool, args in (("read_file", {"path": path}), ("write_file", {"path": path, "content": "x"}),
                       ("edit_file", {"path": path, "old_string": "a", "new_string": "b"}),
                       ("grep", {"pattern": "x", "path": path})):
        if tool == "grep" and not path:
            continue  # grep's path is optional: empty means the whole workspace
        r = env.execute(tool, args)
        assert not r.ok, (tool, path, r.output)
    assert not (env.workspace.root.parent / "x.txt").exists()


def test_symlink_escape_is_rejected(env, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (env.workspace.root / "link.txt").symlink_to(outside)
    r = env.execute("read_file", {"path": "link.txt"})
    assert not r.ok and "outside the workspace" in r.output
    assert not env.execute("glob", {"pattern": "../*"}).ok


def test_absolute_path_inside_is_fine(env):
    r = env.execute("read_file", {"path": str(env.workspace.root / "model.py")})
    assert r.ok and "class Model" in r.output


def test_read_only_files_cannot_be_written_by_tools(env):
    for name in ("model.py", "SKILL.md"):
        r = env.execute("write_file", {"path": name, "content": "x"})
        assert not r.ok and "read-only" in r.output
        r = env.execute("edit_file", {"path": name, "old_string": "import", "new_string": "x"})
        assert not r.ok and "read-only" in r.output


def test_tampered_model_py_is_restored_before_verify(env):
    ws = env.workspace.root
    env.execute("bash", {"command": "chmod u+w model.py && echo 'Model = None' > model.py && rm SKILL.md"})
    assert (ws / "model.py").read_text().strip() == "Model = None"
    env.execute("write_file", {"path": "model_new.py", "content": THREAD_MODEL_NEW})
    r = env.execute("verify", {})  # rejected by the static rules: no GPU or build needed
    assert "model.py had been changed" in r.output and "SKILL.md had been changed" in r.output
    assert (ws / "model.py").read_text() == env.task.source
    assert "STABLE_TORCH_LIBRARY" in (ws / "SKILL.md").read_text()
    assert r.verdict["verdict"] == "rejected" and "threads" in r.verdict["flags"]


def test_edit_file_needs_a_unique_match(env):
    env.execute("write_file", {"path": "kernels/a.cu", "content": "int a = 1;\nint b = 1;\n"})
    r = env.execute("edit_file", {"path": "kernels/a.cu", "old_string": "= 1;", "new_string": "= 2;"})
    assert not r.ok and "occurs 2 times" in r.output
    r = env.execute("edit_file", {"path": "kernels/a.cu", "old_string": "int a = 1;", "new_string": "int a = 2;"})
    assert r.ok
    r = env.execute("edit_file", {"path": "kernels/a.cu", "old_string": "int c", "new_string": "x"})
    assert not r.ok and "not found" in r.output
    r = env.execute("edit_file", {"path": "kernels/a.cu", "old_string": "int  b =  1;", "new_string": "x"})
    assert not r.ok and "whitespace" in r.output
    r = env.execute("edit_file", {"path": "kernels/a.cu", "old_string": "int", "new_string": "long", "replace_all": True})
    assert r.ok and (env.workspace.root / "kernels/a.cu").read_text() == "long a = 2;\nlong b = 1;\n"


def test_oversized_write_is_refused(env):
    big = "x" * (env.config.limits.max_write_bytes + 1)
    r = env.execute("write_file", {"path": "kernels/big.cu", "content": big})
    assert not r.ok and "limit" in r.output and not (env.workspace.root / "kernels/big.cu").exists()


def test_read_file_pages_and_numbers_lines(env):
    env.execute("write_file", {"path": "notes.txt", "content": "\n".join(f"line {i}" for i in range(1, 1001))})
    r = env.execute("read_file", {"path": "notes.txt", "offset": 10, "limit": 3})
    assert r.output.splitlines()[:3] == ["10\tline 10", "11\tline 11", "12\tline 12"]
    assert "[lines 10-12 of 1000]" in r.output
    assert not env.execute("read_file", {"path": "nothere.txt"}).ok


def test_glob_and_grep(env):
    env.execute("write_file", {"path": "kernels/a.cu", "content": "__global__ void k1() {}\n"})
    env.execute("write_file", {"path": "kernels/b_binding.cpp", "content": "// binding\n"})
    assert "kernels/a.cu" in env.execute("glob", {"pattern": "**/*.cu"}).output
    r = env.execute("grep", {"pattern": r"__global__\s+void", "glob": "*.cu"})
    assert r.output.strip() == "kernels/a.cu:1: __global__ void k1() {}"
    assert not env.execute("grep", {"pattern": "("}).ok


_STATE_KEY_CHILD = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # a read of /dev/zero fails fast, not the machine
from cuda_agent.agent.workspace import Workspace
ws = Workspace(Path(sys.argv[1]), {})
print(ws.state_key())
"""


def test_state_key_never_opens_a_fifo_or_follows_a_symlink(env):
    """What `bash` can leave in the workspace (a FIFO, links to /dev/zero and to the FIFO) must not hang
    the harness or make it read without end when it fingerprints the workspace for loop detection. Run
    in a child with a deadline and a memory cap, so that a regression fails instead of hanging."""
    root = env.workspace.root
    os.mkfifo(root / "pipe")
    (root / "zero").symlink_to("/dev/zero")
    (root / "kernels" / "p.cu").symlink_to(root / "pipe")
    src = str(Path(cuda_agent.__file__).resolve().parents[1])
    r = subprocess.run([sys.executable, "-c", _STATE_KEY_CHILD, str(root)], capture_output=True, text=True,
                       timeout=30, env={**os.environ, "PYTHONPATH": src})
    assert r.returncode == 0, r.stderr[-2000:]
    key = env.workspace.state_key()
    assert r.stdout.strip() == key
    (root / "zero").unlink()
    (root / "zero").symlink_to("/dev/null")  # a link is recorded by its target
    assert env.workspace.state_key() != key
    (root / "notes.txt").write_text("a")
    key = env.workspace.state_key()
    (root / "notes.txt").write_text("a")  # the same text again: no change
    assert env.workspace.state_key() == key
    (root / "notes.txt").write_text("b")
    assert env.workspace.state_key() != key
    # the other readers of the workspace skip them too
    assert within(30, env.workspace.solution_files).keys() == {"model_new.py"}
    for tool, args in (("read_file", {"path": "pipe"}), ("grep", {"pattern": "x", "path": "pipe"}),
                       ("read_file", {"path": "zero"}), ("edit_file", {"path": "pipe", "old_string": "a",
                                                                        "new_string": "b"}),
                       ("grep", {"pattern": "x"}), ("glob", {})):
        r = within(30, lambda: env.execute(tool, args))
        assert not r.ok or tool in ("grep", "glob"), (tool, r.output)


def test_bash_runs_in_the_workspace_with_a_scrubbed_env(env, monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:1")
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    (env.workspace.root / "mine.txt").write_text("x")
    r = env.execute("bash", {"command": "pwd; echo HOME=$HOME; ls; env"})
    assert r.ok and "[exit code 0]" in r.output
    # confined: the workspace is at /workspace, and the harness's own path of it is never said
    assert r.output.splitlines()[0] == "/workspace" and "HOME=/workspace" in r.output and "mine.txt" in r.output
    for secret in ("HTTPS_PROXY", "hf_secret", "sk-secret", str(env.workspace.root)):
        assert secret not in r.output
    r = env.execute("bash", {"command": "exit 3"})
    assert not r.ok and "[exit code 3]" in r.output


def test_bash_timeout_kills_the_process_group(env):
    t0 = time.perf_counter()
    r = env.execute("bash", {"command": "sleep 30 & sleep 30", "timeout": 1})
    assert time.perf_counter() - t0 < 10
    assert not r.ok and "timeout" in r.output


def test_no_baseline_is_timed_while_a_bash_command_runs(env):
    """A command may run kernels on any GPU it sees: it holds every GPU's candidate-code lock, so an evaluation
    that would time a baseline (cached for every later evaluation of its task) waits for it (GpuLock.quiet)."""
    import threading

    from cuda_agent.sandbox.gpu import GpuLock

    cache, got = env.config.sandbox.cache_dir, []
    GpuLock(cache, 0).candidate_code().release()  # the lock files an evaluation on this GPU would have made

    done = threading.Event()

    def timer():
        lock = GpuLock(cache, 0)
        wait_until_locked(lock.code, stop=done)  # until the command holds it (or has ended)
        with lock.quiet():
            got.append(time.time())

    t = threading.Thread(target=timer)
    t.start()
    r = env.execute("bash", {"command": "sleep 1.5; date +%s.%N"})
    done.set()
    t.join(60)
    assert r.ok and got, r.output
    assert got[0] >= float(r.output.split()[0]) - 0.05, (got, r.output)


@pytest.mark.parametrize("isolation", ["confined", "none"])
def test_what_a_bash_command_leaves_running_ends_with_it(env, isolation):
    """A job left running by a command (detached from its output) could run kernels after the command's hold on
    the GPUs ended (GpuLock.candidate_code): it is killed, and gone, before the command's result comes back (a
    killed process's queued kernels end with the process, not with the signal). Confined, the job is in the jail's
    own session (bwrap's --new-session), not in the group of the bwrap process the tool started. Here the job
    holds 1 GiB, so that its exit takes a moment."""
    if isolation == "none":
        env.config.sandbox.isolation = "none"
    marker = f"ca_job{os.getpid() % 100000}"
    job = (f"python3 -c \"open('/proc/self/comm', 'w').write('{marker}'); x = bytearray(1 << 30); "
           "import time; time.sleep(60)\"")
    r = env.execute("bash", {"command": f"({job}) >/dev/null 2>&1 & sleep 2; echo started"})
    left = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open(f"/proc/{pid}/comm").read().strip() == marker:
                left.append(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0])
        except OSError:
            pass
    assert r.ok and "started" in r.output, r.output
    assert not [state for state in left if state != "Z"], left  # an exited child not yet reaped runs nothing


def test_a_bash_command_waits_for_a_baseline_timing_at_most_its_timeout(env):
    """While an evaluation times its baselines quiet, a command waits; past its own timeout it is not run, and
    the model reads why."""
    from cuda_agent.sandbox.gpu import GpuLock

    with GpuLock(env.config.sandbox.cache_dir, 0).quiet() as quiet:
        assert quiet
        r = env.execute("bash", {"command": "echo ran", "timeout": 1})
    assert not r.ok and "not run" in r.output and "ran" not in r.output.replace("not run", ""), r.output
    assert env.execute("bash", {"command": "echo ran"}).ok


def test_bash_output_is_truncated(env):
    r = env.execute("bash", {"command": "yes 0123456789 | head -c 100000"})
    assert "characters cut" in r.output and len(r.output) < env.config.limits.max_output_chars + 200


def test_argument_validation():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "s": {"type": "string"},
                                               "b": {"type": "boolean"}}, "required": ["s"]}
    assert validate_args({"s": "x", "n": "5", "b": "true"}, schema) == ({"s": "x", "n": 5, "b": True}, None)
    assert "missing" in validate_args({}, schema)[1]
    assert "unknown" in validate_args({"s": "x", "zz": 1}, schema)[1]
    assert "must be a integer" in validate_args({"s": "x", "n": "five"}, schema)[1]
    assert "JSON object" in validate_args(["s"], schema)[1]


def test_unknown_tool_and_bad_arguments_are_messages(env):
    assert "unknown tool" in env.execute("rm_rf", {}).output
    assert "missing required" in env.execute("write_file", {"path": "a"}).output


def test_templates_fail_loudly():
    with pytest.raises(TemplateError, match="no value for target_speedup"):
        render("SKILL.md", precision="fp32")
    with pytest.raises(TemplateError, match="which it does not use"):
        render_text("{{ a }}", {"a": 1, "b": 2})
    assert render_text("x {{a}} {b} {{ a }}", {"a": 1}) == "x 1 {b} 1"


def test_starter_copies_the_constructor():
    src = ("import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self, n):\n"
           "        super(Model, self).__init__()\n        self.lin = nn.Linear(n, n)\n\n"
           "    def forward(self, x):\n        y = self.lin(x)\n        return torch.relu(y)\n")
    text = starter_model_new(src)
    ns = {}
    exec(compile(text, "model_new.py", "exec"), ns)
    m = ns["ModelNew"](4)
    assert set(m.state_dict()) == {"lin.weight", "lin.bias"}
    with pytest.raises(NotImplementedError):
        m(None)


def test_hostile_strings_are_messages_not_crashes(env):
    assert not env.execute("bash", {"command": "echo a\0b"}).ok
    r = env.execute("write_file", {"path": "kernels/s.cu", "content": "// \ud800 lone surrogate\n"})
    assert r.ok and (env.workspace.root / "kernels/s.cu").read_bytes() == b"// ? lone surrogate\n"
    assert env.execute("edit_file", {"path": "kernels/s.cu", "old_string": "lone", "new_string": "\udfff"}).ok
    assert not env.execute("read_file", {"path": "a\0b"}).ok


def test_the_best_verdict_is_kept_and_copied_aside(env, tmp_path):
    """The environment's bookkeeping, fed verdict records as the sandbox returns them."""
    src = tmp_path / "cand"
    (src / "kernels").mkdir(parents=True)
    (src / "model_new.py").write_text("# v1\n")
    files = {"model_new.py": b"# v1\n"}

    def verdict(kind, s_compile, s_eager=2.0):
        return {"verdict": kind, "speedup_vs_compile": s_compile, "speedup_vs_eager": s_eager, "reward": 3.0}

    assert not env.target_reached()
    env.record_verdict(verdict("incorrect", None), "fp0", files, src)
    assert env.best is None
    env.record_verdict(verdict("correct", 1.02), "fp1", files, src)
    assert env.best.fingerprint == "fp1" and not env.target_reached()
    assert (env.best_dir / "model_new.py").read_text() == "# v1\n" and (env.best_dir / "verdict.json").is_file()
    env.record_verdict(verdict("correct", 0.9), "fp2", files, src)
    assert env.best.fingerprint == "fp1"
    env.record_verdict(verdict("correct", 1.3), "fp3", files, src)
    assert env.best.fingerprint == "fp3" and env.target_reached()
    assert "1.30x vs torch.compile" in env.best_summary()
    env.config.target_speedup = None
    assert not env.target_reached()


def test_verify_and_profile_replies_say_how_far_the_kernel_is_from_the_hardwares_limit(tmp_path):
    """One line each: the fraction of the roofline bound the candidate reaches, with compile's beside it."""
    from cuda_agent.sandbox import Verdict
    from cuda_agent.sandbox.profiling import ProfileReport
    from cuda_agent.sandbox.roofline import Work, assess

    block = assess(gpu_name="NVIDIA H200", precision="fp32", work=Work(flops=0), input_bytes=4800 * 10**6,
                   param_bytes=0, output_bytes=0, ms=2.5, eager_ms=5.0, compile_ms=2.4390243).to_dict()

    host = [{"candidate": 0.2, "eager": 0.1, "threshold": 0.7}, {"candidate": 0.96, "eager": 0.98, "threshold": 0.7}]

    def verifier(task, solution):
        return Verdict(verdict="correct", ms=2.5, eager_ms=5.0, compile_ms=2.439, roofline=block,
                       timing={"host_bound": host.pop(0)})

    env = Environment(tiny_task(tmp_path), tmp_path / "run", config(tmp_path), verifier=verifier)
    r = env.execute("verify", {})
    assert ("headroom: at 40% of the H200 SXM's memory-bandwidth bound of 1 ms (eager: 20%, compile: 41%)"
            in r.output), r.output
    assert "host-bound" not in r.output  # the GPU did not wait for the host
    r = env.execute("verify", {})  # a host-bound call: said, with eager's share beside it
    assert "host-bound: the host took 96% of your call's GPU time to issue it (eager: 98%)" in r.output, r.output
    assert "headroom, by kernel time per call: at 40%" in ProfileReport(roofline=block).table()
    assert "headroom" not in ProfileReport().table()
    skill = (env.workspace.root / "SKILL.md").read_text()
    for must in ("headroom: at 38%", "memory-bandwidth", "sm_90a", "wgmma", "setmaxnreg", "TMA", "host-bound:"):
        assert must in skill, must
