"""What an evaluation needs and uses in memory (sandbox/memory.py, inputs.rotation_sets): the task's
footprint read on the meta device, the GPU need that the fit check compares, and the rotation sets
sized to the budget."""
import types

import pytest
import torch

from cuda_agent.sandbox import memory, roofline
from cuda_agent.sandbox.inputs import rotation_sets


def _task(get_inputs, forward, init=()):
    class Model(torch.nn.Module):
        def __init__(self, *args):
            super().__init__()
            self.lin = torch.nn.Linear(64, 32)

        def forward(self, *xs):
            return forward(self, *xs)

    return types.SimpleNamespace(Model=Model, get_inputs=get_inputs, get_init_inputs=lambda: list(init))


def test_the_footprint_is_read_on_the_meta_device_without_allocating():
    # 16 GiB of input and a 32 GiB output: nothing is allocated, so this runs on any machine in no time
    n = 1 << 32
    task = _task(lambda: [torch.rand(n), torch.randint(0, 9, (1024,))], lambda self, x, i: torch.stack([x, x]))
    fp = memory.task_footprint(task, [])
    assert fp.input_bytes == 4 * n + 8 * 1024 and fp.output_bytes == 8 * n and fp.error is None
    assert fp.to_dict() == {"input_mib": round((4 * n + 8192) / 2**20, 1), "output_mib": 32768.0}


def test_a_module_with_weights_and_tuple_outputs():
    task = _task(lambda: [torch.randn(8, 64)], lambda self, x: (self.lin(x), x.sum()))
    fp = memory.task_footprint(task, [])
    assert fp.input_bytes == 8 * 64 * 4 and fp.output_bytes == 8 * 32 * 4 + 4


def test_an_operator_without_a_meta_kernel_leaves_the_output_unknown_and_says_why():
    def forward(self, x):
        return torch.from_numpy(x.numpy())  # needs real data

    fp = memory.task_footprint(_task(lambda: [torch.rand(10)], forward), [])
    assert fp.input_bytes == 40 and fp.output_bytes is None
    assert fp.error.startswith("Model.forward on the meta device")


def test_inputs_made_on_a_named_device_leave_everything_unknown():
    def get_inputs():
        raise RuntimeError("Found no NVIDIA driver")

    fp = memory.task_footprint(_task(get_inputs, lambda self, x: x), [])
    assert (fp.input_bytes, fp.output_bytes) == (None, None) and "get_inputs()" in fp.error


@pytest.mark.parametrize("set_mib, expected", [
    (1, 4),       # small sets: up to 4, the L2 cache never holds the next one
    (200, 2),     # two fit the 512 MiB budget
    (300, 1),     # two do not: one set, rewritten before every call
    (6144, 1),    # a 6 GiB task (KernelBench L1_19): one
])
def test_rotation_sets_are_sized_to_the_budget(set_mib, expected):
    assert rotation_sets(set_mib << 20, 512 << 20, num_recheck=2) == expected


def test_rotation_keeps_one_set_per_recheck_while_two_fit():
    assert rotation_sets(1 << 20, 512 << 20, num_recheck=6) == 6


def test_peak_rss_can_be_reset_and_grows_with_use():
    memory.reset_peak_rss()
    before = memory.peak_rss_mb()
    block = bytearray(300 << 20)  # touched: 300 MiB resident
    for i in range(0, len(block), 4096):
        block[i] = 1
    assert memory.peak_rss_mb() >= before + 250
    del block
    assert memory.peak_gpu_mb(torch.device("cpu")) is None


def test_a_task_that_cannot_fit_is_named_with_its_sizes():
    gib = 1 << 30
    assert memory.fit_problem(memory.Footprint(16 * gib, 16 * gib), 141 * gib) is None
    why = memory.fit_problem(memory.Footprint(40 * gib, 40 * gib), 141 * gib)
    assert why.startswith("the task does not fit on this GPU") and "160.0 GiB" in why and "141.0 GiB" in why
    assert memory.fit_problem(memory.Footprint(None, None), gib) is None  # unknown: no claim
    assert memory.fit_problem(memory.Footprint(40 * gib, 40 * gib), None) is None  # GPU size unknown


def test_the_evaluator_says_so_before_anything_runs(monkeypatch, tmp_path):
    from cuda_agent.sandbox import SandboxConfig, evaluate, evaluator, load_solution
    from cuda_agent.tasks import load_task

    from .conftest import SOLUTIONS, TASKS

    monkeypatch.setenv("CUDA_AGENT_REHEARSAL", "cpu")
    monkeypatch.setattr(evaluator, "gpu_memory_bytes", lambda device: 1 << 10)  # a 1 KiB "GPU"
    requests = []
    real = evaluator.WorkerProcess.request
    monkeypatch.setattr(evaluator.WorkerProcess, "request",
                        lambda self, msg, timeout: requests.append((self.label, msg["op"])) or real(self, msg, timeout))
    v = evaluate(load_task(TASKS / "swish_small.py"), load_solution(SOLUTIONS / "rehearsal_swish_cpu"),
                 SandboxConfig(cache_dir=tmp_path))
    assert v.verdict == "harness_error" and v.flags == ["does_not_fit"] and v.reward is None
    assert v.reasons[0].startswith("the task does not fit") and v.timing["footprint"]["input_mib"] == 1.0
    assert requests == []  # the reference said so in its setup: no candidate setup, trial or timing


def test_the_sizes_an_earlier_evaluation_read_are_used_from_the_baseline_cache(monkeypatch, tmp_path):
    """The reference worker reads a task's footprint and FLOPs on the meta device once per task x torch; later
    evaluations take them from the baseline cache (the meta device's first run imports dynamo: seconds). Here
    the cache is planted with a footprint 65536 times the real one, and the fit check goes by it; with the
    cache off, the worker reads the real one."""
    from cuda_agent.sandbox import SandboxConfig, evaluate, evaluator, load_solution
    from cuda_agent.sandbox.baselines import BaselineStore
    from cuda_agent.tasks import load_task

    from .conftest import SOLUTIONS, TASKS

    monkeypatch.setenv("CUDA_AGENT_REHEARSAL", "cpu")
    monkeypatch.setattr(evaluator, "gpu_memory_bytes", lambda device: 1 << 10)  # a 1 KiB "GPU": fails the fit
    task = load_task(TASKS / "swish_small.py")
    work = roofline.Work(flops=0).to_dict()
    BaselineStore(tmp_path / "baselines.sqlite").put_sizes(
        task.sha256, torch.__version__, {"footprint": {"input_bytes": 1 << 36, "output_bytes": 0}, "work": work})

    def run(**cfg):
        return evaluate(task, load_solution(SOLUTIONS / "rehearsal_swish_cpu"),
                        SandboxConfig(cache_dir=tmp_path, **cfg))

    v = run()
    assert v.flags == ["does_not_fit"] and v.timing["footprint"] == {"input_mib": 65536.0, "output_mib": 0.0,
                                                                     "cached": True}
    assert "64.0 GiB" in v.reasons[0]
    v = run(use_baseline_cache=False)
    assert v.flags == ["does_not_fit"] and v.timing["footprint"] == {"input_mib": 1.0, "output_mib": 1.0}
    # a cached form this harness cannot read (a field it does not know): read on the meta device again
    store = BaselineStore(tmp_path / "baselines.sqlite")
    store.put_sizes(task.sha256, torch.__version__, {"footprint": {"input_bytes": 1 << 36, "output_bytes": 0,
                                                                   "later_field": 1}, "work": work})
    v = run()
    assert v.flags == ["does_not_fit"] and v.timing["footprint"] == {"input_mib": 1.0, "output_mib": 1.0}


def test_cached_sizes_of_another_version_are_not_read(tmp_path, monkeypatch):
    from cuda_agent.sandbox import baselines

    store = baselines.BaselineStore(tmp_path / "b.sqlite")
    sizes = {"footprint": {"input_bytes": 4, "output_bytes": 4}, "work": roofline.Work(flops=0).to_dict()}
    store.put_sizes("sha", "2.11", sizes)
    assert store.get_sizes("sha", "2.11") == sizes and store.get_sizes("sha", "2.12") is None
    monkeypatch.setattr(baselines, "SIZES_VERSION", "next")
    assert store.get_sizes("sha", "2.11") is None


def test_gpu_need_is_the_larger_of_its_two_multiples_plus_weights_and_a_fixed_part():
    gib = 1 << 30
    fixed = memory.GPU_NEED["fixed_gib"] * gib
    assert memory.gpu_need(6 * gib, 6 * gib) == 8 * 12 * gib + fixed  # in and out alike: 8 x (in + out)
    assert memory.gpu_need(8 * gib, 0) == 9 * 8 * gib + fixed  # a small output: 9 x in
    assert memory.gpu_need(gib // 512, 4 * gib) == 8 * (4 * gib + gib // 512) + fixed  # a small input: 8 x (in + out)
    assert memory.gpu_need(0, 4 * gib) == 8 * 4 * gib + fixed
    assert memory.gpu_need(gib, None, param_bytes=gib) == 9 * gib + 3 * gib + fixed
    assert memory.gpu_need(None, gib) is None  # unknown: the evaluation waits for the GPU to itself


def _ledger(tmp_path, total):
    from cuda_agent.sandbox.gpu import GpuMemory

    m = GpuMemory(tmp_path, 0, total)
    m.POLL_S = 0.02
    return m


def test_gpu_memory_reservations_wait_for_room_and_count_until_the_workers_are_gone(tmp_path):
    import subprocess
    import sys
    import time

    gib = 1 << 30
    first, second = _ledger(tmp_path, 10 * gib), _ledger(tmp_path, 10 * gib)
    assert first.reserve(8 * gib, timeout_s=1) and first.waited_s < 0.5
    assert not second.reserve(3 * gib, timeout_s=0.3) and second.waited_s >= 0.3  # 8 + 3 > 10: it waited
    assert second.reserve(2 * gib, timeout_s=1)  # 8 + 2 fits
    second.release([])
    assert second.others_bytes() == 8 * gib
    # released while a worker of it is still running: counted until that worker's process group is empty
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        first.release([worker.pid])
        assert _ledger(tmp_path, 10 * gib).others_bytes() == 8 * gib
        late = _ledger(tmp_path, 10 * gib)
        assert not late.reserve(3 * gib, timeout_s=0.2)
        worker.kill()
        worker.wait()
        t0 = time.monotonic()
        assert late.reserve(3 * gib, timeout_s=5) and time.monotonic() - t0 < 3
    finally:
        worker.kill()
    assert not list(late.dir.glob("*.tmp"))


def _until(condition, timeout_s: float = 5.0) -> bool:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _in_line(ledger, order: list, name: str, need: int, holding: int):
    """A thread that reserves ``need`` on ``ledger`` (holding ``holding`` while it waits) and, once admitted,
    appends ``name`` to ``order``. Started."""
    import threading

    thread = threading.Thread(target=lambda: ledger.reserve(need, timeout_s=10, holding=holding)
                              and order.append(name))
    thread.start()
    return thread


def test_waiters_are_admitted_in_the_order_they_came(tmp_path):
    """A large evaluation waiting for room is not overtaken by a small one that came later and would fit."""
    import time

    gib = 1 << 30
    holder, large, small = (_ledger(tmp_path, 10 * gib) for _ in range(3))
    assert holder.reserve(6 * gib, timeout_s=1)
    order = []
    first = _in_line(large, order, "large", 8 * gib, holding=gib)
    # the large one is waiting now (6 + 8 > 10), holding 1 GiB meanwhile
    assert _until(lambda: _ledger(tmp_path, 10 * gib).others_bytes() == 7 * gib)
    second = _in_line(small, order, "small", 3 * gib, holding=gib // 2)
    assert _until(lambda: _ledger(tmp_path, 10 * gib).others_bytes() == 7 * gib + gib // 2)  # the small one waits
    time.sleep(0.3)
    assert order == []  # 6 + 1.5 + 3 would not fit, 6 + 1 + 3 would: the large one came first, though
    holder.release([])
    first.join(5)
    assert order == ["large"]  # 8 alone, and 8 + 3 does not fit beside it: the small one waits on
    time.sleep(0.3)
    assert order == ["large"]
    large.release([])
    second.join(5)
    assert order == ["large", "small"]
    small.release([])
    assert not list(holder.dir.glob("*.json"))


def test_a_lone_evaluation_is_admitted_whatever_it_asks_and_a_dead_owners_reservation_is_dropped(tmp_path):
    import json
    import subprocess
    import sys

    gib = 1 << 30
    alone = _ledger(tmp_path, gib)
    assert alone.reserve(100 * gib, timeout_s=0.1)  # nothing else on the GPU: a task above it was refused earlier
    alone.release([])
    assert not list(alone.dir.glob("*.json"))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (alone.dir / "stale.json").write_text(json.dumps({"bytes": 100 * gib, "owner": int(dead.stdout),
                                                       "state": "held"}))
    (alone.dir / "torn.json").write_text('{"bytes": ')  # half-written: not counted
    assert _ledger(tmp_path, gib).reserve(gib // 2, timeout_s=0.1)
    assert not (alone.dir / "stale.json").exists()


def test_an_evaluation_reserves_its_gpu_memory_and_waits_for_the_others(monkeypatch, tmp_path):
    """Bench lanes sharing a GPU: an evaluation holds memory.gpu_need of its task before its trials, and waits
    while another evaluation's reservation leaves no room (here for gpu_memory_wait_s, then it goes on and says
    so). Once it is over, its reservation is gone with its workers."""
    import json
    import time

    from cuda_agent.sandbox import SandboxConfig, evaluate, evaluator, load_solution
    from cuda_agent.sandbox.gpu import GpuMemory
    from cuda_agent.tasks import load_task

    from .conftest import SOLUTIONS, TASKS

    gib = 1 << 30
    monkeypatch.setenv("CUDA_AGENT_REHEARSAL", "cpu")
    monkeypatch.setattr(evaluator, "gpu_memory_bytes", lambda device: 64 * gib)
    other = GpuMemory(tmp_path, 0, 64 * gib)
    assert other.reserve(58 * gib, timeout_s=1)  # 58 + 4 GiB and more: above 95% of 64 GiB
    v = evaluate(load_task(TASKS / "swish_small.py"), load_solution(SOLUTIONS / "rehearsal_swish_cpu"),
                 SandboxConfig(cache_dir=tmp_path, rep_ms=20.0, warmup_ms=5.0, run_timeout_s=120.0, profile=False,
                               gpu_memory_wait_s=0.5))
    assert v.verdict == "correct", (v.reasons, v.log)
    need = memory.gpu_need(1 << 20, 1 << 20)  # swish_small: 1 MiB in, 1 MiB out, no weights
    assert v.timing["gpu_memory"]["reserved_mb"] == round(need / 2**20)
    assert v.timing["gpu_memory"]["waited_s"] >= 0.5 and "timed out" in v.timing["gpu_memory"]["unreserved"]
    other.release([])
    again = evaluate(load_task(TASKS / "swish_small.py"), load_solution(SOLUTIONS / "rehearsal_swish_cpu"),
                     SandboxConfig(cache_dir=tmp_path, rep_ms=20.0, warmup_ms=5.0, run_timeout_s=120.0, profile=False))
    assert again.verdict == "correct" and again.timing["gpu_memory"]["waited_s"] < 0.5
    assert "unreserved" not in again.timing["gpu_memory"]
    files = list(other.dir.glob("*.json"))  # its reservation, released: it lasts while its workers do
    assert all(json.loads(f.read_text())["state"] == "released" for f in files)
    deadline = time.monotonic() + 10
    while other.others_bytes() and time.monotonic() < deadline:  # the workers were killed, not waited for
        time.sleep(0.1)
    assert other.others_bytes() == 0 and not list(other.dir.glob("*.json"))


def test_a_candidate_out_of_gpu_memory_beside_other_evaluations_is_flagged_not_excused(monkeypatch, tmp_path):
    """Out of GPU memory while another evaluation held a reservation on the GPU: still the candidate's runtime
    error (its own worker names the error, so it cannot be believed), flagged gpu_shared_oom with what the others
    held. Alone on the GPU, no flag. Where the GPU is smaller than the evaluation's own expected need, the flag
    over_gpu_oom says the harness's layout is the likely cause, and the verdict stays the candidate's."""
    import shutil

    from cuda_agent.sandbox import SandboxConfig, evaluate, evaluator, load_solution
    from cuda_agent.sandbox.gpu import GpuMemory
    from cuda_agent.tasks import load_task

    from .conftest import SOLUTIONS, TASKS

    gib = 1 << 30
    monkeypatch.setenv("CUDA_AGENT_REHEARSAL", "cpu")
    monkeypatch.setattr(evaluator, "gpu_memory_bytes", lambda device: 64 * gib)
    ws = tmp_path / "ws"
    shutil.copytree(SOLUTIONS / "rehearsal_swish_cpu", ws)
    (ws / "model_new.py").write_text(
        "import torch\nimport torch.nn as nn\n\nimport cuda_ext\n\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x):\n"
        "        raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 20.00 GiB')\n"
        "        return cuda_ext.ew(x.contiguous())\n")

    def run():
        return evaluate(load_task(TASKS / "swish_small.py"), load_solution(ws),
                        SandboxConfig(cache_dir=tmp_path / "cache", rep_ms=20.0, warmup_ms=5.0, run_timeout_s=120.0,
                                      profile=False, static_rules=False))

    other = GpuMemory(tmp_path / "cache", 0, 64 * gib)
    assert other.reserve(10 * gib, timeout_s=1)
    v = run()
    assert v.verdict == "runtime_error" and v.flags == ["gpu_shared_oom"] and v.reward == -1, (v.reasons, v.flags)
    assert v.reasons[0].startswith("OutOfMemoryError") and "10.0 GiB" in v.reasons[1]
    other.release([])
    v = run()
    assert v.verdict == "runtime_error" and v.reasons[0].startswith("OutOfMemoryError") and not v.flags, v.reasons
    # a GPU smaller than the evaluation was expected to need (memory.gpu_need, here 4 GiB beyond the task's
    # 2 MiB): admitted alone, its out-of-memory error is likely the harness's layout and said so, but it keeps
    # its -1 (the error's name is the candidate's word, and a null reward would be a gain)
    monkeypatch.setattr(evaluator, "gpu_memory_bytes", lambda device: 3 * gib)
    v = run()
    assert v.verdict == "runtime_error" and v.flags == ["over_gpu_oom"] and v.reward == -1, (v.reasons, v.flags)
    assert v.reasons[0].startswith("OutOfMemoryError") and "does not fit on this GPU beside its reference" in v.reasons[1]
    assert v.timing["gpu_memory"]["reserved_mb"] > 2.85 * 1024  # 0.95 x 3 GiB: over what the GPU gives


def test_the_first_in_line_goes_once_nothing_is_held_whatever_those_behind_it_hold(tmp_path):
    """An evaluation that asks for the whole GPU (its size unknown) waits first in line; one behind it holds its
    contexts while waiting. Once the holder is gone, the first in line goes, though 1 GiB is held behind it."""
    gib = 1 << 30
    holder, whole, behind = (_ledger(tmp_path, 10 * gib) for _ in range(3))
    assert holder.reserve(2 * gib, timeout_s=1)
    order = []
    first = _in_line(whole, order, "whole", 10 * gib, holding=gib)
    assert _until(lambda: _ledger(tmp_path, 10 * gib).others_bytes() == 3 * gib)  # 2 held, 1 waiting
    second = _in_line(behind, order, "behind", gib, holding=gib)
    assert _until(lambda: _ledger(tmp_path, 10 * gib).others_bytes() == 4 * gib)  # both in line
    holder.release([])
    first.join(5)
    assert order == ["whole"]
    whole.release([])
    second.join(5)
    assert order == ["whole", "behind"]
    behind.release([])
