"""Loading KernelBench-format task files: good ones load, broken ones raise a TaskError naming the file."""

import textwrap

import pytest

pytest.importorskip("torch")

from cuda_agent.tasks import Task, TaskError, iter_kernelbench, iter_tasks, load_task  # noqa: E402

from .conftest import TASKS  # noqa: E402

GOOD = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return [2.0]
'''


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def good(inputs: str = "torch.randn(4, 8)") -> str:
    return GOOD.format(inputs=inputs)


def test_load_task_on_a_good_file(tmp_path):
    path = write(tmp_path, "scale.py", good())
    task = load_task(path)
    assert isinstance(task, Task)
    assert task.name == "scale" and task.path == path.resolve() and task.source == path.read_text()
    module = task.load_module()
    model = module.Model(*module.get_init_inputs())
    (x,) = module.get_inputs()
    assert model(x).shape == (4, 8)


def test_load_task_on_a_repository_task():
    task = load_task(TASKS / "row_sum.py")
    assert task.name == "row_sum" and len(task.sha256) == 64


def test_sha_depends_on_the_source(tmp_path):
    a = load_task(write(tmp_path, "a.py", good()), validate=False)
    b = load_task(write(tmp_path, "b.py", good("torch.randn(4, 9)")), validate=False)
    assert a.sha256 != b.sha256


def test_missing_file_names_the_file(tmp_path):
    with pytest.raises(TaskError, match="nope.py"):
        load_task(tmp_path / "nope.py")


def test_missing_get_inputs_names_the_file_and_the_function(tmp_path):
    src = good().replace("def get_inputs():\n    return [torch.randn(4, 8)]\n", "")
    path = write(tmp_path, "no_inputs.py", src)
    with pytest.raises(TaskError) as e:
        load_task(path)
    assert "no_inputs.py" in str(e.value) and "get_inputs" in str(e.value)


def test_missing_get_inputs_is_caught_without_executing(tmp_path):
    src = "raise SystemExit('executed!')\n" + good().replace("def get_inputs():", "def get_inputz():")
    with pytest.raises(TaskError, match="get_inputs"):
        load_task(write(tmp_path, "t.py", src), validate=False)


def test_syntax_error_gives_file_and_line(tmp_path):
    src = good().replace("return x * self.scale", "return x * (self.scale")
    path = write(tmp_path, "broken.py", src)
    line = src.splitlines().index("        return x * (self.scale") + 1
    with pytest.raises(TaskError) as e:
        load_task(path)
    msg = str(e.value)
    assert "broken.py:" in msg and "syntax error" in msg
    # Python reports an unclosed bracket at the bracket's line or just after it
    reported = int(msg.split("broken.py:")[1].split(":")[0])
    assert line <= reported <= line + 2


@pytest.mark.parametrize("inputs,what", [
    ("3", "int"),
    ("[1.0, 2.0]", "list"),
    ("torch.empty(4, 8, device='meta')", "meta"),
])
def test_bad_inputs_raise_task_error(tmp_path, inputs, what):
    path = write(tmp_path, "bad.py", good(inputs))
    with pytest.raises(TaskError) as e:
        load_task(path)
    assert "bad.py" in str(e.value) and "get_inputs()[0]" in str(e.value) and what in str(e.value)


def test_a_plain_number_beside_a_tensor_is_an_input(tmp_path):
    """KernelBench L1_5 passes a float scale beside its matrix: the harness hands plain numbers through."""
    load_task(write(tmp_path, "scalar.py", good("torch.randn(4, 8), 3.5")))
    with pytest.raises(TaskError, match=r"get_inputs\(\)\[1\] is a str"):
        load_task(write(tmp_path, "text.py", good("torch.randn(4, 8), 'x'")))
    with pytest.raises(TaskError, match=r"get_inputs\(\)\[1\] is a float64"):  # numpy's: not a plain number
        load_task(write(tmp_path, "np.py", "import numpy\n" + good("torch.randn(4, 8), numpy.float64(3.5)")))
    with pytest.raises(TaskError, match=r"get_inputs\(\)\[0\] is a float"):  # a number needs a tensor beside it
        load_task(write(tmp_path, "alone.py", good("3.5")))


def test_empty_inputs_raise_task_error(tmp_path):
    path = write(tmp_path, "empty.py", GOOD.replace("return [{inputs}]", "return []"))
    with pytest.raises(TaskError, match="non-empty"):
        load_task(path)


def test_task_raising_at_import_is_a_task_error(tmp_path):
    path = write(tmp_path, "boom.py", "import no_such_module_xyz\n" + good())
    with pytest.raises(TaskError, match="boom.py.*ModuleNotFoundError"):
        load_task(path)


def test_model_must_be_a_module(tmp_path):
    src = good().replace("class Model(nn.Module):", "class Model:").replace("super().__init__()", "pass")
    with pytest.raises(TaskError, match="nn.Module"):
        load_task(write(tmp_path, "m.py", src))


# ----------------------------------------------------------------------------- directories

def test_iter_tasks_is_sorted_and_reads_only_py_files(tmp_path):
    for name in ("b.py", "a.py", "c.py"):
        write(tmp_path, name, good())
    (tmp_path / "notes.txt").write_text("not a task")
    assert [t.name for t in iter_tasks(tmp_path)] == ["a", "b", "c"]


def make_kernelbench(root, nested: bool = True):
    base = root / "KernelBench" if nested else root
    for level, files in {1: ["1_Matmul.py", "2_Relu.py", "10_Softmax.py", "helper.py"], 2: ["3_Conv_ReLU.py"]}.items():
        d = base / f"level{level}"
        d.mkdir(parents=True)
        for f in files:
            (d / f).write_text(good())
    return root


def test_iter_kernelbench_names_levels_and_orders_by_problem_id(tmp_path):
    tasks = list(iter_kernelbench(make_kernelbench(tmp_path), levels=(1, 2)))
    assert [t.name for t in tasks] == ["L1_1", "L1_2", "L1_10", "L2_3"]  # numeric, helper.py skipped
    assert tasks[2].meta == {"level": 1, "problem_id": 10, "title": "10_Softmax"}


def test_iter_kernelbench_without_the_kernelbench_subdir(tmp_path):
    tasks = list(iter_kernelbench(make_kernelbench(tmp_path, nested=False), levels=(2,)))
    assert [t.name for t in tasks] == ["L2_3"]


def test_iter_kernelbench_filters_problems(tmp_path):
    tasks = list(iter_kernelbench(make_kernelbench(tmp_path), levels=(1,), problems=[2, 10]))
    assert [t.name for t in tasks] == ["L1_2", "L1_10"]


def test_iter_kernelbench_missing_level_is_a_task_error(tmp_path):
    with pytest.raises(TaskError, match="level3"):
        list(iter_kernelbench(make_kernelbench(tmp_path), levels=(1, 3)))


def test_iter_kernelbench_on_a_missing_directory(tmp_path):
    with pytest.raises(TaskError, match="not a KernelBench directory"):
        list(iter_kernelbench(tmp_path / "missing"))


def test_checking_a_task_does_not_make_its_inputs_on_the_host(tmp_path):
    """KernelBench's Level-1 inputs are up to 16 GiB: load_task checks their shapes and devices without
    making them. A 4 TiB input set loads in an instant; the evaluation makes its inputs on the GPU."""
    path = write(tmp_path, "huge.py", good("torch.rand(1 << 40)"))
    assert load_task(path).name == "huge"


def test_a_task_whose_inputs_need_real_values_is_checked_as_written(tmp_path):
    """get_inputs() that reads a value (.item()) cannot run on fake tensors: it is run as written."""
    path = write(tmp_path, "item.py", good("torch.randn(int(torch.randint(2, 5, (1,)).item()), 8)"))
    assert load_task(path).name == "item"
    bad = write(tmp_path, "bad_item.py", good("torch.randn(4, 8).cuda() if torch.zeros(1).item() else 3"))
    with pytest.raises(TaskError, match=r"get_inputs\(\)\[0\] is a int"):
        load_task(bad)


def test_a_task_naming_a_device_is_still_checked_without_making_its_inputs(tmp_path):
    """Inputs made with an explicit device are not made on the meta device (that would allocate them for
    real, or start CUDA in the evaluator): they are checked on fake tensors. 4 TiB loads in an instant."""
    path = write(tmp_path, "named.py", good("torch.rand(1 << 40, device='cpu')"))
    assert load_task(path).name == "named"
    moved = write(tmp_path, "moved.py", good("torch.rand(1 << 40).to(torch.device('cpu'))"))
    assert load_task(moved).name == "moved"


def test_checking_a_plain_task_imports_no_dynamo(tmp_path):
    """The usual task (torch.rand and friends on the default device) is checked on the meta device: no fake
    tensors, whose first use imports dynamo (about a second of every `cuda-agent eval`)."""
    import subprocess
    import sys

    path = write(tmp_path, "plain.py", good("torch.randn(1 << 30, 4)"))
    code = ("import sys; from cuda_agent.tasks import load_task; load_task(sys.argv[1]); "
            "print('torch._dynamo' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "False", (r.stdout, r.stderr[-2000:])


def test_a_task_that_moves_the_default_device_is_still_refused(tmp_path):
    """The meta device must not hide a task that sets torch's default device itself: its inputs are not made
    on the CPU, and the check says so as before (on fake tensors, so nothing is made)."""
    src = "import torch\ntorch.set_default_device('meta')\n" + good("torch.rand(4, 8)")
    try:
        with pytest.raises(TaskError, match=r"get_inputs\(\)\[0\] is on meta"):
            load_task(write(tmp_path, "moved_default.py", src))
    finally:
        import torch

        torch.set_default_device(None)
