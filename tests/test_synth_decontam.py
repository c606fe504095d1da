"""Decontamination against a (mini) KernelBench checkout, and de-duplication keys."""

from pathlib import Path

import pytest

from cuda_agent.cli import main
from cuda_agent.synth.decontam import KernelBenchIndex, op_sequence, structure_key

MINI = Path(__file__).parent / "data" / "kernelbench_mini"
PROBLEMS = sorted(MINI.rglob("*.py"))


@pytest.fixture(scope="module")
def kb():
    return KernelBenchIndex(MINI)


def test_index_reads_both_levels(kb):
    assert len(kb) == len(PROBLEMS) >= 6
    assert {r.name for r in kb.refs} >= {"L1_1", "L1_19", "L2_12"}


@pytest.mark.parametrize("path", PROBLEMS, ids=lambda p: p.name)
def test_kernelbench_problem_fed_as_generated_is_caught(kb, path):
    assert kb.check(path.read_text()).startswith("fail")


def test_near_copy_with_other_names_and_sizes_is_caught_by_similarity(kb):
    src = (MINI / "level2" / "12_Gemm_Multiply_LeakyReLU.py").read_text()
    copy = (src.replace("gemm", "fc").replace("multiplier", "alpha").replace("1024", "333")
            .replace("nn.LeakyReLU(negative_slope)", "nn.ELU(negative_slope)"))
    assert op_sequence(copy) != op_sequence(src)  # not caught by the op sequence ...
    verdict = kb.check(copy)
    assert verdict.startswith("fail: AST similarity"), verdict  # ... but by the AST


def test_unrelated_task_passes(kb):
    src = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv_transpose3d = nn.ConvTranspose3d(in_channels, out_channels, kernel_size)
        self.norm = nn.InstanceNorm3d(out_channels)

    def forward(self, x):
        x = self.conv_transpose3d(x)
        x = self.norm(x)
        return torch.logsumexp(x, dim=1)


batch_size = 2
in_channels = 4
out_channels = 8
depth = height = width = 8
kernel_size = 3


def get_inputs():
    return [torch.randn(batch_size, in_channels, depth, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
'''
    assert kb.check(src) == "pass"


def test_structure_key_ignores_sizes_and_names_not_ops():
    src = (MINI / "level1" / "19_ReLU.py").read_text()
    resized = src.replace("16384", "4096").replace("batch_size", "n")
    other_op = src.replace("torch.relu", "torch.sigmoid")
    assert structure_key(src) == structure_key(resized)
    assert structure_key(src) != structure_key(other_op)


def test_bad_kernelbench_path_exits_2_naming_it(tmp_path, capsys):
    missing = tmp_path / "no_such_checkout"
    rc = main(["synth", "--count", "1", "--out", str(tmp_path / "o.jsonl"), "--kernelbench", str(missing),
               "--no-progress"])
    assert rc == 2
    assert str(missing) in capsys.readouterr().err


def test_unknown_op_exits_2_naming_it(tmp_path, capsys):
    rc = main(["synth", "--count", "1", "--out", str(tmp_path / "o.jsonl"), "--ops", "nn.Conv2d,nn.Bogus",
               "--no-progress"])
    assert rc == 2
    assert "nn.Bogus" in capsys.readouterr().err
