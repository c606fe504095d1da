"""End to end: synthesize, output columns, loader, determinism, resume after a kill."""

import json

import pytest

torch = pytest.importorskip("torch")

from cuda_agent.synth import ConfigError, SynthConfig, synthesize  # noqa: E402
from cuda_agent.synth import pipeline  # noqa: E402
from cuda_agent.synth.config import parse_mix  # noqa: E402
from cuda_agent.tasks import validate_task  # noqa: E402
from cuda_agent.tasks.ops_dataset import iter_dataset  # noqa: E402


def cfg(tmp_path, name="out.jsonl", **kw):
    return SynthConfig(**{"count": 5, "seed": 3, "out": tmp_path / name, "workers": 1,
                          "progress": False, **kw})


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_jsonl_output_has_ops6k_columns_and_loads(tmp_path):
    s = synthesize(cfg(tmp_path))
    assert s.accepted == 5
    rows = read_jsonl(tmp_path / "out.jsonl")
    assert len(rows) == 5
    for r in rows:
        ops = json.loads(r["ops"])
        assert r["data_source"] == f"torch#{len(ops)}" and r["n_ops"] == len(ops)
        filters = json.loads(r["filters"])
        assert filters["runtime"] == "pending" and filters["compile"] == "pending"
        assert all(v == "pass" or v.startswith("pending") for v in filters.values())
        assert r["flops"] > 0 and r["bytes"] > 0 and r["eager_ms"] is None
    assert len({r["structure_key"] for r in rows}) == 5
    tasks = list(iter_dataset(tmp_path / "out.jsonl"))
    assert [t.meta["ops"] for t in tasks] == [json.loads(r["ops"]) for r in rows]
    for t in tasks:
        validate_task(t)


def test_parquet_output_and_ops6k_as_published(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    synthesize(cfg(tmp_path, "out.parquet", count=3))
    tasks = list(iter_dataset(tmp_path / "out.parquet"))
    assert len(tasks) == 3 and all(t.meta["filters"]["eager"] == "pass" for t in tasks)
    # Ops-6K as published: only code / ops / data_source.
    table = pa.table({"code": [t.source for t in tasks], "ops": [json.dumps(t.meta["ops"]) for t in tasks],
                      "data_source": [t.meta["data_source"] for t in tasks]})
    pq.write_table(table, tmp_path / "ops6k.parquet")
    published = list(iter_dataset(tmp_path / "ops6k.parquet", validate=True))
    assert [t.meta["ops"] for t in published] == [t.meta["ops"] for t in tasks]


def test_same_seed_same_tasks(tmp_path):
    synthesize(cfg(tmp_path, "a.jsonl", count=4))
    synthesize(cfg(tmp_path, "b.jsonl", count=4))
    synthesize(cfg(tmp_path, "c.jsonl", count=4, seed=4))
    a, b, c = (read_jsonl(tmp_path / n) for n in ("a.jsonl", "b.jsonl", "c.jsonl"))
    assert [r["code"] for r in a] == [r["code"] for r in b]
    assert [r["code"] for r in a] != [r["code"] for r in c]


def test_resume_after_interrupt_no_duplicates_no_lost_rows(tmp_path, monkeypatch):
    reference = tmp_path / "ref.jsonl"
    synthesize(cfg(tmp_path, "ref.jsonl", count=8))
    # Run again and "kill" it at attempt 5: the worker raises like a Ctrl-C would ...
    real = pipeline.run_attempt

    def dies_at_5(i):
        if i == 5:
            raise KeyboardInterrupt
        return real(i)

    monkeypatch.setattr(pipeline, "run_attempt", dies_at_5)
    with pytest.raises(KeyboardInterrupt):
        synthesize(cfg(tmp_path, "run.jsonl", count=8))
    monkeypatch.setattr(pipeline, "run_attempt", real)
    log = tmp_path / "run.jsonl.parts" / "attempts.jsonl"
    assert len(log.read_text().splitlines()) == 5
    # ... and a kill -9 in the middle of a write leaves half a line behind.
    with open(log, "a") as f:
        f.write('{"attempt": 5, "status": "acc')
    s = synthesize(cfg(tmp_path, "run.jsonl", count=8))
    assert s.resumed_from == 5
    rows, ref = read_jsonl(tmp_path / "run.jsonl"), read_jsonl(reference)
    assert [r["attempt"] for r in rows] == sorted({r["attempt"] for r in rows})  # no duplicates
    assert [r["code"] for r in rows] == [r["code"] for r in ref]  # nothing lost, nothing new
    attempts = [json.loads(line)["attempt"] for line in log.read_text().splitlines()]
    assert attempts == list(range(len(attempts)))


def test_resume_with_other_settings_is_refused(tmp_path):
    synthesize(cfg(tmp_path, count=2))
    with pytest.raises(ConfigError, match="different settings"):
        synthesize(cfg(tmp_path, count=2, seed=99))


def test_mix_parsing():
    assert parse_mix("1:1,2:3") == {1: 0.25, 2: 0.75}
    with pytest.raises(ConfigError):
        parse_mix("7:1")
    with pytest.raises(ConfigError):
        parse_mix("2=5")


def test_op_restriction_is_respected(tmp_path):
    synthesize(cfg(tmp_path, count=3, ops=("nn.Linear", "nn.ReLU", "torch.sum", "nn.GELU"),
                   op_mix={1: 1, 2: 1}))
    rows = list(read_jsonl(tmp_path / "out.jsonl"))
    assert len(rows) == 3
    for r in rows:
        assert set(json.loads(r["ops"])) <= {"nn.Linear", "nn.ReLU", "torch.sum", "nn.GELU"}


def test_pool_of_two_workers_gives_the_same_tasks(tmp_path):
    synthesize(cfg(tmp_path, "one.jsonl", count=4))
    synthesize(cfg(tmp_path, "two.jsonl", count=4, workers=2))
    assert [r["code"] for r in read_jsonl(tmp_path / "one.jsonl")] == \
        [r["code"] for r in read_jsonl(tmp_path / "two.jsonl")]
