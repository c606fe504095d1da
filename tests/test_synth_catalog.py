"""The operator catalog: crawled from torch, probed, aliases folded."""

import random

import pytest

torch = pytest.importorskip("torch")

from cuda_agent.synth.catalog import build_catalog  # noqa: E402
from cuda_agent.synth.composer import Composer  # noqa: E402
from cuda_agent.synth.filters import STOCHASTIC_NAMES  # noqa: E402


@pytest.fixture(scope="module")
def catalog():
    return build_catalog()


def test_at_least_150_distinct_operators(catalog):
    assert catalog.distinct() >= 150
    assert len(catalog.names()) >= catalog.distinct()


def test_families_cover_the_issue_list(catalog):
    for fam in ("conv", "pool", "norm", "activation", "unary", "binary", "reduction", "scan",
                "matmul", "reshape", "loss", "attention", "linear"):
        assert catalog.families.get(fam), fam
    for name in ("nn.Conv2d", "nn.ConvTranspose3d", "nn.LayerNorm", "nn.MaxPool2d", "torch.cumsum",
                 "torch.matmul", "nn.MultiheadAttention", "nn.Linear"):
        assert catalog.get(name) is not None, name


def test_stochastic_ops_are_dropped_with_a_reason(catalog):
    for name in ("nn.Dropout", "nn.RReLU", "nn.AlphaDropout", "nn.FractionalMaxPool2d"):
        assert catalog.get(name) is None
        assert "stochastic" in catalog.rejected[name]
    assert not [op.name for op in catalog.ops if STOCHASTIC_NAMES.match(op.short)]


def test_probe_found_domains_and_ranks(catalog):
    assert catalog.get("torch.log").domain in ("pos", "nonneg")
    assert catalog.get("torch.acos").domain == "unit"
    assert catalog.get("nn.Conv2d").ranks == (4,)
    assert catalog.get("nn.BCELoss").terminal


def test_aliases_fold_to_one_operator(catalog):
    relu = {op.fold for op in catalog.ops if op.name in ("nn.ReLU", "F.relu")}
    assert len(relu) == 1
    assert "torch.absolute" in catalog.rejected, sorted(catalog.rejected)[:20]
    assert "alias" in catalog.rejected["torch.absolute"]


def test_restrict_names_unknown_ops(catalog):
    small = catalog.restrict(("nn.Conv2d", "nn.ReLU"))
    assert small.names() == ["nn.Conv2d", "nn.ReLU"]
    with pytest.raises(KeyError, match="nn.NoSuchOp"):
        catalog.restrict(("nn.NoSuchOp",))


def test_every_op_composes_on_meta(catalog):
    """Each family yields at least one valid single-op task."""
    comp = Composer(catalog)
    seen = set()
    for i in range(300):
        d = comp.compose(random.Random(f"fam:{i}"), 1)
        if d is not None:
            seen.update(d.families)
    assert {"conv", "norm", "pool", "matmul"} <= seen
