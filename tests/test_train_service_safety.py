"""The evaluation service on a cluster network: its token, its refusal to serve a network without
one, idempotent retries, per-client limits, the queue in /v1/health, and its timeout paths on every
Python from 3.10 to 3.13 (issue 18).

The evaluator is a :class:`Gate` (counts calls, holds them until released) where what is tested is
the service's handling of requests and jobs; the sandbox itself is tested in test_train_service.py.
"""

import glob
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from cuda_agent import cli
from cuda_agent.sandbox import confine
from cuda_agent.tasks import load_task
from cuda_agent.train import client as client_module
from cuda_agent.train.auth import (
    TOKEN_ENV,
    TOKEN_FILE_ENV,
    ServiceConfigError,
    bearer_ok,
    is_loopback,
    read_token,
)
from cuda_agent.train.client import EvalClient, EvalUnauthorized
from cuda_agent.train.service import EvalService, EvalServiceConfig

from .conftest import ROOT, TASKS
from .service_timeout_probe import FILES, Gate, wait_until

TOKEN = "s3cret-" + "x" * 40
SWISH = load_task(TASKS / "swish_small.py", name="swish")


@pytest.fixture(autouse=True)
def no_token_in_the_environment(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    monkeypatch.delenv(TOKEN_FILE_ENV, raising=False)
    monkeypatch.setattr(confine, "_HIDDEN", [])  # token files the tests read stay hidden for that test only


@pytest.fixture()
def gated(monkeypatch):
    """A service (one job at a time, token required) whose evaluator is a closed Gate."""
    gate = Gate()
    monkeypatch.setattr("cuda_agent.train.service.LocalEvaluator", lambda sandbox: gate)
    made = []

    def make(**kw):
        cfg = {"port": 0, "gpus": [0], "per_gpu": 1, "token": TOKEN} | kw
        svc = EvalService(EvalServiceConfig(**cfg)).start()
        made.append(svc)
        return svc

    yield gate, make
    gate.release.set()
    for svc in made:
        svc.stop()


def _post(url, body: bytes, headers: dict, source: str = "127.0.0.1", timeout=60):
    """One raw POST /v1/evaluate from the loopback address ``source`` -> (status, JSON body)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout, source_address=(source, 0))
    try:
        conn.request("POST", "/v1/evaluate", body=body, headers={"Content-Type": "application/json", **headers})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def _body(timeout_s=60.0, files=FILES) -> bytes:
    return json.dumps({"task": {"name": SWISH.name, "source": SWISH.source}, "files": files,
                       "timeout_s": timeout_s}).encode()


AUTH = {"Authorization": f"Bearer {TOKEN}"}


# ---------------------------------------------------------------------------- the token

def test_every_request_but_health_needs_the_token(gated):
    gate, make = gated
    gate.release.set()
    svc = make()
    for headers in ({}, {"Authorization": "Bearer wrong-token-wrong-token"}, {"Authorization": TOKEN},
                    {"Authorization": f"Basic {TOKEN}"}):
        status, reply = _post(svc.url, _body(), headers)
        assert status == 401, headers
        assert TOKEN not in json.dumps(reply) and "Authorization: Bearer" in reply["error"]
    assert gate.calls == 0  # nothing was evaluated for them
    status, reply = _post(svc.url, _body(), AUTH)
    assert status == 200 and reply["verdict"]["verdict"] == "rejected" and gate.calls == 1

    health = EvalClient(svc.url, token="").health()  # open to all, and says whether our token would do
    assert health["token_required"] and not health["authorized"] and TOKEN not in json.dumps(health)
    assert EvalClient(svc.url, token=TOKEN).health()["authorized"]
    with pytest.raises(urllib.error.HTTPError) as e:  # other GETs need it too
        urllib.request.urlopen(svc.url + "/v1/else", timeout=10)
    assert e.value.code == 401


def test_the_client_sends_the_token_from_a_file_or_the_environment(gated, tmp_path, monkeypatch):
    gate, make = gated
    gate.release.set()
    svc = make()
    (tmp_path / "token").write_text(TOKEN + "\n")
    monkeypatch.setenv(TOKEN_FILE_ENV, str(tmp_path / "token"))
    assert EvalClient(svc.url, retries=0).evaluate(SWISH, FILES).reward == -1.0
    monkeypatch.delenv(TOKEN_FILE_ENV)
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    client = EvalClient(svc.url, retries=0)
    assert client.evaluate(SWISH, FILES).reward == -1.0 and client.check()["authorized"]
    assert TOKEN not in repr(client) and TOKEN not in repr(svc.config)


def test_a_missing_or_wrong_token_is_raised_at_once_not_retried(gated, monkeypatch):
    gate, make = gated
    svc = make()
    sleeps = []
    monkeypatch.setattr(client_module.time, "sleep", sleeps.append)
    for token in ("", "wrong-token-wrong-token"):
        client = EvalClient(svc.url, retries=5, token=token)
        with pytest.raises(EvalUnauthorized, match="401"):
            client.evaluate(SWISH, FILES)
        with pytest.raises(EvalUnauthorized, match=TOKEN_FILE_ENV):
            client.check()
    assert sleeps == [] and gate.calls == 0


def test_tokens_are_read_with_errors_that_name_the_source_and_not_the_token(tmp_path):
    assert read_token(environ={}) is None
    assert read_token(environ={TOKEN_ENV: f"  {TOKEN}\n"}) == TOKEN
    (tmp_path / "t").write_text(TOKEN)
    assert read_token(environ={TOKEN_FILE_ENV: str(tmp_path / "t"), TOKEN_ENV: "other" * 5}) == TOKEN  # file first
    with pytest.raises(ServiceConfigError, match=f"token file {tmp_path / 'missing'}: cannot read it"):
        read_token(tmp_path / "missing")
    with pytest.raises(ServiceConfigError, match="at least 16 characters") as e:
        read_token(environ={TOKEN_ENV: "short-secret"})
    assert "short-secret" not in str(e.value)
    with pytest.raises(ServiceConfigError, match="printable ASCII"):
        read_token(environ={TOKEN_ENV: "a" * 20 + " b"})
    assert bearer_ok(f"Bearer {TOKEN}", TOKEN) and bearer_ok(f"bearer  {TOKEN} ", TOKEN)
    assert not bearer_ok(None, TOKEN) and not bearer_ok(f"Bearer {TOKEN}x", TOKEN) and not bearer_ok(TOKEN, TOKEN)


# ---------------------------------------------------------------------------- binding

@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_serving_a_network_without_a_token_is_refused(host):
    with pytest.raises(ServiceConfigError, match="refusing to serve on .* without a token"):
        EvalService(EvalServiceConfig(host=host, port=0))
    EvalService(EvalServiceConfig(host=host, port=0, token=TOKEN))  # with one it is allowed (not started here)


def test_loopback_names_and_addresses():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "", "10.0.0.1", "192.168.1.7"))


def test_train_serve_refuses_in_one_sentence_not_a_traceback(capsys, tmp_path):
    assert cli.main(["train", "serve", "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cuda-agent train serve: refusing to serve on 0.0.0.0") and "Traceback" not in err
    assert len(err.splitlines()) == 1 and "--token-file" in err
    assert cli.main(["train", "serve", "--host", "0.0.0.0", "--token-file", str(tmp_path / "none")]) == 2
    assert f"token file {tmp_path / 'none'}: cannot read it" in capsys.readouterr().err


@pytest.fixture()
def secrets_dir(tmp_path):
    """A directory outside /tmp where possible: a jail's own /tmp covers the host's, and this one must not be."""
    if not os.access("/var/tmp", os.W_OK):
        return tmp_path
    path = Path(tempfile.mkdtemp(prefix="cuda-agent-test-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_the_token_file_the_service_reads_is_hidden_from_every_jail(secrets_dir, monkeypatch):
    """Wherever --token-file points (not named by $CUDA_AGENT_EVAL_TOKEN_FILE), a jail started afterwards
    reads nothing there, even where a directory bound into the jail holds it."""
    token_file = secrets_dir / "eval_token"
    token_file.write_text(TOKEN)

    class Started:  # the service `train serve` would start, as far as the command goes
        url = "http://0.0.0.0:0"

        def __init__(self, config):
            self.config = config

        def start(self):
            return self

        def serve_forever(self):
            pass
    monkeypatch.setattr("cuda_agent.train.service.EvalService", Started)
    assert cli.main(["train", "serve", "--host", "0.0.0.0", "--port", "0", "--token-file", str(token_file)]) == 0

    bound = [*confine.readable_paths(), str(secrets_dir)]  # as if it lay under /opt or sys.prefix
    monkeypatch.setattr(confine, "readable_paths", lambda: bound)
    argv = confine.Jail().command(["cat", str(token_file)], scratch=None)
    assert ["--ro-bind", "/dev/null", str(token_file)] in [argv[i:i + 3] for i in range(len(argv))]
    assert argv.index(str(secrets_dir)) < argv.index(str(token_file))  # hidden after the bind, not under it
    if confine.probe() is None and not str(secrets_dir).startswith("/tmp/"):
        r = subprocess.run(argv, env=confine.confined_env(dict(os.environ)), capture_output=True, text=True,
                           timeout=60)
        assert r.stdout == "" and TOKEN not in r.stderr, (r.stdout, r.stderr)  # /dev/null there: nodev, unreadable
        monkeypatch.setattr(confine, "_HIDDEN", [])  # the control: not hidden, the bound directory shows it
        shown = subprocess.run(confine.Jail().command(["cat", str(token_file)], scratch=None),
                               env=confine.confined_env(dict(os.environ)), capture_output=True, text=True, timeout=60)
        assert shown.stdout == TOKEN, shown.stderr


# ---------------------------------------------------------------------------- idempotent retries

def test_a_retry_after_a_504_joins_the_running_evaluation(gated):
    """The client's retry carries the first try's key: the service evaluates once, however often
    the request is sent (before: one more evaluation per retry)."""
    gate, make = gated
    svc = make(job_timeout_s=0.5)
    released = threading.Thread(target=lambda: (wait_until(lambda: svc.health()["timed_out"] >= 1, "a 504"),
                                                gate.release.set()))
    released.start()
    r = EvalClient(svc.url, token=TOKEN, retries=5, backoff_s=0.05, timeout_s=0.5).evaluate(SWISH, FILES)
    released.join()
    assert r.verdict.verdict == "rejected"
    assert gate.calls == 1
    health = svc.health()
    assert health["timed_out"] >= 1 and health["joined"] >= 1 and health["done"] == 1


def test_a_key_joins_its_job_or_gets_its_result_and_is_scoped_to_its_request(gated):
    gate, make = gated
    svc = make()
    key = {"Idempotency-Key": "rollout-7.turn-3", **AUTH}
    replies = []
    first = threading.Thread(target=lambda: replies.append(_post(svc.url, _body(), key)))
    first.start()
    wait_until(lambda: svc.health()["running"] == 1, "the first job to start")
    second = threading.Thread(target=lambda: replies.append(_post(svc.url, _body(), key)))  # a retry, while it runs
    second.start()
    wait_until(lambda: svc.health()["joined"] == 1, "the retry to join")
    assert _post(svc.url, _body(files={"model_new.py": "other"}), key) == (
        422, {"error": "Idempotency-Key rollout-7.turn-3 was used for a different request"})
    gate.release.set()
    first.join()
    second.join()
    assert [status for status, _ in replies] == [200, 200] and replies[0] == replies[1]
    assert _post(svc.url, _body(), key) == replies[0]  # after it finished: its result, not a new run
    assert gate.calls == 1
    status, _ = _post(svc.url, _body(), key, source="127.0.0.2")  # another client's key is its own
    assert status == 200 and gate.calls == 2
    assert _post(svc.url, _body(), {**AUTH, "Idempotency-Key": "no spaces"})[0] == 400


def test_a_retry_keeps_its_place_in_the_queue_and_an_abandoned_job_is_dropped(gated):
    gate, make = gated
    svc = make()
    first = svc.submit(SWISH, FILES, "paper", 60.0)  # holds the one worker
    wait_until(lambda: svc.health()["running"] == 1, "the first job to start")
    assert _post(svc.url, _body(timeout_s=0.2), AUTH)[0] == 504  # no key: dropped as its request gives up
    assert svc.health()["queued"] == 0
    key = {"Idempotency-Key": "k1", **AUTH}
    assert _post(svc.url, _body(timeout_s=0.2), key)[0] == 504  # a key: kept queued for its retry
    assert svc.health()["queued"] == 1
    retry = threading.Thread(target=lambda: replies.append(_post(svc.url, _body(), key)))
    replies = []
    retry.start()
    wait_until(lambda: svc.health()["joined"] == 1, "the retry to join")
    gate.release.set()
    retry.join()
    assert replies[0][0] == 200 and svc.wait(first, 60).reward == -1.0
    assert gate.calls == 2  # the first job and the keyed one, once


# ---------------------------------------------------------------------------- limits and health

def test_per_client_limit_and_the_queue_in_health(gated):
    gate, make = gated
    svc = make(per_client=1)
    calls = [threading.Thread(target=_post, args=(svc.url, _body(), AUTH, source)) for source in ("127.0.0.1", "127.0.0.2")]
    calls[0].start()
    wait_until(lambda: svc.health()["running"] == 1, "the first client's job to start")
    status, reply = _post(svc.url, _body(), AUTH)  # the same client again: over its limit
    assert status == 429 and "client 127.0.0.1 has 1 jobs queued or running" in reply["error"]
    calls[1].start()  # another client is still admitted, and waits for the one worker
    wait_until(lambda: svc.health()["queued"] == 1, "the second client's job to queue")
    time.sleep(0.05)
    health = svc.health()
    assert health["clients"] == 2 and health["per_client"] == 1
    assert health["oldest_queued_s"] >= 0.05 and health["oldest_running_s"] >= health["oldest_queued_s"]
    gate.release.set()
    for t in calls:
        t.join()
    health = svc.health()
    assert gate.calls == 2 and health["done"] == 2 and health["queued"] == 0 and health["oldest_queued_s"] == 0.0


# ---------------------------------------------------------------------------- Python 3.10 ... 3.13

def _python(version: str) -> str | None:
    """An interpreter of ``version`` on this machine: on PATH, under pyenv, or known to uv."""
    candidates = [shutil.which(f"python{version}")]
    pyenv_root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates += sorted(glob.glob(f"{pyenv_root}/versions/{version}.*/bin/python{version}"))
    if shutil.which("uv"):
        found = subprocess.run(["uv", "python", "find", version], capture_output=True, text=True, check=False)
        candidates.append(found.stdout.strip() if found.returncode == 0 else None)
    for exe in filter(None, candidates):
        said = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                              capture_output=True, text=True, check=False)
        if said.returncode == 0 and said.stdout.strip() == version:
            return exe
    return None


@pytest.mark.parametrize("version", ["3.10", "3.11", "3.12", "3.13"])
def test_the_timeout_paths_on_every_supported_python(version):
    """Before 3.11, ``Future.result``'s timeout is not the builtin TimeoutError: a service catching
    the builtin answered 500 there, and its client retried a job that was still running."""
    exe = _python(version)
    if exe is None:
        pytest.skip(f"no Python {version} here (looked on PATH, under pyenv and with uv)")
    env = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, TOKEN_FILE_ENV)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")])
    run = subprocess.run([exe, str(Path(__file__).with_name("service_timeout_probe.py")), str(TASKS / "swish_small.py")],
                         capture_output=True, text=True, check=False, env=env, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["python"] == version
    assert "HTTP 504: job did not finish" in out["request_past_timeout"], out
    assert out["queued_past_deadline"] == "FutureTimeout: timed out in the queue"
    assert out["first"] == "rejected" and out["evaluations"] == 1
    assert out["health"]["timed_out"] == 2 and out["health"]["done"] == 1 and out["health"]["queued"] == 0


@pytest.mark.parametrize("version", ["3.10"])
def test_the_package_compiles_on_the_oldest_supported_python(version):
    """requires-python says >=3.10: no syntax of a later Python may creep in."""
    exe = _python(version)
    if exe is None:
        pytest.skip(f"no Python {version} here (looked on PATH, under pyenv and with uv)")
    code = ("import pathlib, sys\n"
            "for p in sorted(pathlib.Path(sys.argv[1]).rglob('*.py')):\n"
            "    compile(p.read_text(), str(p), 'exec')\n")
    run = subprocess.run([exe, "-c", code, str(ROOT / "src")], capture_output=True, text=True, check=False, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]


# ---------------------------------------------------------------------------- the cluster launcher

LAUNCHER = ROOT / "scripts" / "launch_verl_ray.sh"


def _launch(tmp_path, role, **env):
    """scripts/launch_verl_ray.sh with a ``cuda-agent`` on PATH that only records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "cuda-agent"
    fake.write_text(f'#!/usr/bin/env bash\necho "$@" >> {tmp_path / "calls"}\n')
    fake.chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k not in (TOKEN_ENV, TOKEN_FILE_ENV)}
    full = base | {"ROLE": role, "PATH": f"{bin_dir}{os.pathsep}{base['PATH']}",
                   "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), base.get("PYTHONPATH", "")])} | env
    return subprocess.run(["bash", str(LAUNCHER)], capture_output=True, text=True, check=False, env=full, timeout=120)


def test_the_launcher_serves_the_network_only_with_a_token(tmp_path):
    token_file = tmp_path / "secrets" / "eval_token"
    run = _launch(tmp_path, "eval", EVAL_TOKEN_FILE=str(token_file))
    assert run.returncode == 0, run.stderr
    args = (tmp_path / "calls").read_text().split()
    assert args[:2] == ["train", "serve"] and args[args.index("--token-file") + 1] == str(token_file)
    assert read_token(token_file) and token_file.stat().st_mode & 0o077 == 0  # made, and private
    made = token_file.read_text()
    assert _launch(tmp_path, "eval", EVAL_TOKEN_FILE=str(token_file)).returncode == 0
    assert token_file.read_text() == made  # kept, not remade: clients already hold it


def test_the_launcher_submits_only_with_the_services_token(tmp_path, gated):
    _, make = gated
    svc = make()
    run = _launch(tmp_path, "submit", EVAL_URL=svc.url, EVAL_TOKEN_FILE=str(tmp_path / "absent"), HEAD_IP="127.0.0.1")
    assert run.returncode == 1 and "no token file for the evaluation service" in run.stderr
    (tmp_path / "wrong").write_text("wrong-token-wrong-token")
    run = _launch(tmp_path, "submit", EVAL_URL=svc.url, EVAL_TOKEN_FILE=str(tmp_path / "wrong"), HEAD_IP="127.0.0.1")
    assert run.returncode == 1 and "requires a token and refuses ours" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "calls").exists()  # stopped before any work
