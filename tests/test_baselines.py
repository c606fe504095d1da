"""The baseline store: eager/compile timings keyed by (task_sha, gpu, torch, precision), in SQLite."""

import json

import pytest

from cuda_agent.sandbox.baselines import TIMING_VERSION, Baseline, BaselineStore


def baseline(**kw) -> Baseline:
    fields = dict(task_sha="a" * 64, gpu="NVIDIA H200", torch="2.13.0", precision="fp32", eager_ms=1.25,
                  compile_ms=0.75, overhead_ms=0.01, details={"iters": 100, "rotate": 3})
    fields.update(kw)
    return Baseline(**fields)


@pytest.fixture
def store(tmp_path):
    return BaselineStore(tmp_path / "sub" / "baselines.sqlite")


def key(b: Baseline) -> tuple:
    return b.task_sha, b.gpu, b.torch, b.precision


def test_put_get_round_trip(store):
    b = baseline()
    store.put(b)
    assert store.get(*key(b)) == b


def test_round_trip_with_compile_failure(store):
    b = baseline(compile_ms=None, compile_error="torch.compile failed: InductorError", details=None)
    store.put(b)
    assert store.get(*key(b)) == b


@pytest.mark.parametrize("field,other", [("precision", "tf32"), ("gpu", "NVIDIA A100"), ("torch", "2.12.0"),
                                         ("task_sha", "b" * 64)])
def test_a_different_key_field_misses(store, field, other):
    b = baseline()
    store.put(b)
    probe = dict(zip(("task_sha", "gpu", "torch", "precision"), key(b)))
    probe[field] = other
    assert store.get(**probe) is None


def test_put_replaces_the_same_key(store):
    store.put(baseline(eager_ms=1.0))
    store.put(baseline(eager_ms=2.0))
    assert store.get(*key(baseline())).eager_ms == 2.0
    assert len(store.all()) == 1


def test_store_persists_across_instances(tmp_path):
    path = tmp_path / "b.sqlite"
    BaselineStore(path).put(baseline())
    assert BaselineStore(path).get(*key(baseline())) == baseline()


def test_an_old_timing_version_does_not_match(store):
    store.put(baseline(timing_version=TIMING_VERSION + "-old"))
    assert store.get(*key(baseline())) is None


def test_export_import_json_round_trip(store, tmp_path):
    rows = [baseline(), baseline(precision="tf32", eager_ms=0.9),
            baseline(task_sha="c" * 64, compile_ms=None, compile_error="boom", details=None)]
    for b in rows:
        store.put(b)
    out = tmp_path / "baselines.json"
    assert store.export_json(out) == 3
    assert len(json.loads(out.read_text())) == 3
    fresh = BaselineStore(tmp_path / "fresh.sqlite")
    assert fresh.import_json(out) == 3
    for b in rows:
        assert fresh.get(*key(b)) == b


def test_claim_makes_a_second_process_wait_until_released(tmp_path):
    import subprocess
    import sys
    import time

    store = BaselineStore(tmp_path / "baselines.sqlite")
    held = store.claim("sha", "gpu", "2.11", "fp32")
    code = ("import sys, time; from cuda_agent.sandbox.baselines import BaselineStore; "
            f"s = BaselineStore({str(tmp_path / 'baselines.sqlite')!r}); t = time.time(); "
            "s.claim('sha', 'gpu', '2.11', 'fp32').close(); print(time.time() - t)")
    other = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    time.sleep(1.5)
    assert other.poll() is None  # still waiting on our claim
    held.close()
    out, _ = other.communicate(timeout=30)
    assert float(out) >= 1.0
    # a different key is not blocked
    store.claim("sha", "gpu", "2.11", "tf32").close()
