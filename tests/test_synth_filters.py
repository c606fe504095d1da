"""The rubric rejects what it should and records an outcome per filter."""

import pytest

torch = pytest.importorskip("torch")

from cuda_agent.synth.filters import CPU_FILTERS, check_cpu, stochastic_check  # noqa: E402

TEMPLATE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
{init}

    def forward(self, x):
{body}


batch_size = 8
dim = 32


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]
'''


def task(body: str, init: str = "        self.linear = nn.Linear(dim, dim)") -> str:
    return TEMPLATE.format(init=init, body="\n".join("        " + ln for ln in body.splitlines()))


def test_good_task_passes_every_cpu_filter():
    r = check_cpu(task("x = self.linear(x)\nreturn torch.relu(x)"))
    assert r.ok, r.results
    assert set(r.results) == set(CPU_FILTERS)
    assert all(v == "pass" for v in r.results.values())


def test_stochastic_op_is_rejected():
    src = task("x = self.drop(self.linear(x))\nreturn x", init="        self.linear = nn.Linear(dim, dim)\n"
               "        self.drop = nn.Dropout(0.5)")
    r = check_cpu(src)
    assert r.results["stochastic"].startswith("fail")
    assert r.results["deterministic"].startswith("fail")
    assert not r.ok
    assert check_cpu(task("return x + torch.randn_like(x)")).results["stochastic"].startswith("fail")


def test_random_parameter_init_is_not_stochastic():
    src = task("return x * self.scale", init="        self.scale = nn.Parameter(torch.randn(dim))")
    assert stochastic_check(src) == "pass"
    assert check_cpu(src).ok


def test_constant_output_is_rejected():
    r = check_cpu(task("return torch.zeros_like(x) + 1.0"))
    assert r.results["nonconstant"].startswith("fail")
    assert r.results["input_sensitive"].startswith("fail")


def test_nan_output_is_rejected():
    r = check_cpu(task("return torch.log(x)"))
    assert r.results["finite"].startswith("fail")
    assert not r.ok


def test_all_zero_output_is_rejected():
    r = check_cpu(task("return x * 0.0"))
    assert r.results["nonzero"].startswith("fail")


def test_broken_task_fails_eager_with_the_error():
    r = check_cpu(task("return x @ torch.ones(3, 3)"))
    assert r.results["eager"].startswith("fail") and "RuntimeError" in r.results["eager"]
    assert r.results["dynamo"].startswith("skipped")
