"""Composer: seeded, KernelBench format, loads with the project's loader."""

import random

import pytest

torch = pytest.importorskip("torch")

from cuda_agent.synth.catalog import build_catalog  # noqa: E402
from cuda_agent.synth.composer import Composer  # noqa: E402
from cuda_agent.synth.decontam import fold, op_sequence  # noqa: E402
from cuda_agent.tasks import load_task, validate_task  # noqa: E402


@pytest.fixture(scope="module")
def drafts():
    comp = Composer(build_catalog())
    out = []
    for i in range(40):
        rng = random.Random(f"7:{i}")
        d = comp.compose(rng, rng.choice((1, 2, 2, 3, 4, 5)))
        assert d is not None
        out.append(d)
    return out


def test_same_seed_same_code():
    a = Composer(build_catalog()).compose(random.Random("42:3"), 3)
    b = Composer(build_catalog()).compose(random.Random("42:3"), 3)
    assert a.code == b.code and a.ops == b.ops
    c = Composer(build_catalog()).compose(random.Random("42:4"), 3)
    assert c.code != a.code


def test_every_task_loads_and_validates(drafts, tmp_path):
    for i, d in enumerate(drafts):
        path = tmp_path / f"{i}_synth.py"
        path.write_text(d.code)
        task = load_task(path)
        module = validate_task(task)
        model = module.Model(*module.get_init_inputs())
        with torch.no_grad():
            out = model(*module.get_inputs())
        assert tuple(out.shape) == tuple(d.output_shape)
        assert [tuple(t.shape) for t in module.get_inputs()] == [tuple(s) for s in d.input_shapes]


def test_kernelbench_layout(drafts):
    for d in drafts:
        assert "class Model(nn.Module):" in d.code
        assert "def get_inputs():" in d.code and "def get_init_inputs():" in d.code
        assert "batch_size = " in d.code
        assert 1 <= len(d.ops) <= 5


def test_op_sequence_read_back_from_code(drafts):
    """What decontamination extracts from the source is the op list the composer used."""
    for d in drafts:
        assert list(op_sequence(d.code)) == [fold(o) for o in d.ops], d.code
