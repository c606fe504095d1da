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
        return evaluate(task, load_solution(SOLUTIONS / "rehearsal_swish_cpu"), SandboxConfig(cache_dir=tmp_path, **cfg))

    v = run()
    assert v.flags == ["does_not_fit"] and v.timing["footprint"] == {"input_mib": 65536.0, "output_mib": 0.0,
                                                                     "cached": True}
    assert "64.0 GiB" in v.reasons[0]
    v = run(use_baseline_cache=False)
    assert v.flags == ["does_not_fit"] and v.timing["footprint"] == {"input_mib": 1.0, "output_mib": 1.0}
