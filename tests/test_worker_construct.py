"""The trusted worker builds the reference Model on the GPU only when nothing outside its state_dict would
then differ from a ModelNew built on the CPU (sandbox/worker.py: _construct, _state_outside_dict)."""

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from cuda_agent.sandbox.worker import _construct, _state_outside_dict  # noqa: E402


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 4), nn.ReLU())
        self.register_buffer("scale", torch.ones(4))  # persistent: in the state_dict


class HiddenState(Plain):
    def __init__(self):
        super().__init__()
        self.h0 = torch.randn(2, 4)  # like KernelBench L3_41's self.h0: drawn, not in the state_dict


class NonPersistent(Plain):
    def __init__(self):
        super().__init__()
        self.net[0].register_buffer("mask", torch.rand(4), persistent=False)


@pytest.mark.parametrize("cls,outside", [(Plain, False), (HiddenState, True), (NonPersistent, True)])
def test_state_outside_the_state_dict_is_found_in_any_submodule(cls, outside):
    assert _state_outside_dict(cls()) is outside


def test_on_the_cpu_the_model_is_built_from_the_seed_as_written():
    a, b = _construct(HiddenState, [], 5, torch.device("cpu")), _construct(HiddenState, [], 5, torch.device("cpu"))
    assert torch.equal(a.h0, b.h0) and torch.equal(a.net[0].weight, b.net[0].weight)
    torch.manual_seed(5)
    assert torch.equal(HiddenState().h0, a.h0)
