"""``cuda-agent report``: Table 1 in markdown, the HTML report with plots, the per-task table,
from run databases filled with real Verdict records."""

import importlib.util
import json
import re

import pytest

from cuda_agent.bench.report import TABLE1_COLUMNS, load, write_report
from cuda_agent.cli import main

from .bench_helpers import demo_rows, fill_run, verdict

HAS_MPL = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    hand = [(1, 1, verdict("L1_1", "correct", eager=2.0, compile_=1.0, ms=0.5)),  # 4x eager, 2x compile
            (1, 2, verdict("L1_2", "correct", eager=1.0, compile_=1.0, ms=1.0)),  # 1x, 1x
            (1, 3, verdict("L1_3", "rejected", reason="forward ran torch operators that compute: aten::mm",
                           flags=("torch_compute",))),
            (2, 1, verdict("L2_1", "compile_error", reason="build failed")),
            (2, 2, verdict("L2_2", "correct", eager=3.0, compile_=None, ms=1.0))]  # no compile baseline
    a = fill_run(tmp / "hand", hand)
    b = fill_run(tmp / "demo", demo_rows(7))
    return a, b, tmp


def test_markdown_table1_has_the_papers_columns_and_hand_computed_values(runs):
    a, _, tmp = runs
    paths = write_report([load(a)], tmp / "out_a")
    md = paths["markdown"].read_text()
    header = "| " + " | ".join(TABLE1_COLUMNS) + " |"
    assert header in md
    table1 = md[md.index("## Table 1"):md.index("## Strict")]
    lines = {ln.split("|")[1].strip(): ln for ln in table1.splitlines() if ln.startswith(("| Level", "| Overall"))}
    # level 1: 2 of 3 correct; faster (> 1.05) than eager: L1_1 only; geomean eager sqrt(4 * 1) = 2
    assert lines["Level 1"] == "| Level 1 | 3 | 66.7% | 33.3% | 33.3% | 2.00x | 1.41x |"
    # level 2: L2_2 is correct with no compile baseline: not faster than compile, no compile geomean
    assert lines["Level 2"] == "| Level 2 | 2 | 50.0% | 50.0% | 0.0% | 3.00x | - |"
    # overall: 3 of 5; geomean eager (4 * 1 * 3) ** (1/3)
    assert lines["Overall"] == f"| Overall | 5 | 60.0% | 40.0% | 20.0% | {12 ** (1 / 3):.2f}x | 1.41x |"
    for section in ("## Strict faster rates", "## fast_p (KernelBench)", "## Definitions", "geometric mean"):
        assert section in md
    assert "GPU: NVIDIA H200" in md and "precision mode: fp32" in md and "torch: 2.9.1+cu130" in md
    tasks = paths["tasks"].read_text()
    assert "| L1_3 | 0 | 3_problem | evaluated | rejected | -1 |" in tasks
    assert "torch_compute" in tasks and "aten::mm" in tasks


def test_html_report_is_self_contained_with_plots(runs):
    a, b, tmp = runs
    out = tmp / "out_cmp"
    assert main(["report", str(a), "--compare", str(b), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    for col in TABLE1_COLUMNS:
        assert f">{col}</th>" in page
    assert "<style>" in page and "<link" not in page and "<script" not in page  # nothing to fetch
    assert page.count("<h2>Per-task results: hand</h2>") == 1
    assert "demo: vs. Compile" in page  # the per-task comparison column
    assert 'href="../hand/tasks/L1_3/sample_0/verdict.json"' in page
    if not HAS_MPL:
        assert "Plots need matplotlib" in page
        pytest.skip("matplotlib is not installed: plots not checked")
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    captions = [c for c, _ in images]
    assert captions == ["Speed-up distribution per level", "Per-task speed-ups, sorted", "Verdicts per level",
                        "Comparison of runs", "hand vs. demo, task by task"]
    import base64

    assert all(base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n" for _, data in images)


def test_report_of_a_missing_run_is_bad_input(tmp_path, capsys):
    assert main(["report", str(tmp_path / "nothing")]) == 2
    assert "not a bench run directory" in capsys.readouterr().err


def test_report_with_no_correct_attempt_says_so(tmp_path):
    run = fill_run(tmp_path / "bad", [(1, 1, verdict("L1_1", "compile_error", reason="build failed"))])
    paths = write_report([load(run)], tmp_path / "out")
    page = paths["html"].read_text()
    assert "No correct attempt" in page or "Plots need matplotlib" in page
    assert "| Level 1 | 1 | 0.0% | 0.0% | 0.0% | - | - |" in paths["markdown"].read_text()


def test_verdict_json_in_the_database_round_trips(runs):
    a, _, _ = runs
    run = load(a)
    r = next(r for r in run.results if r.task == "L1_1")
    assert r.verdict["speedup_vs_eager"] == 4.0 and r.verdict["reward"] == 3.0
    assert json.loads(json.dumps(r.to_dict()))["verdict"]["format_version"] == 1


def test_compile_error_reason_quotes_the_compiler():
    """'build failed' alone tells a reader nothing: the report adds the first error line of the log."""
    from cuda_agent.bench.report import first_reason
    from cuda_agent.bench.store import Result

    v = {"verdict": "compile_error", "reasons": ["build failed"],
         "log": "kernels/ew.cu(30): error: expected an expression\n    return +;\n            ^"}
    assert first_reason(Result("L1_9", 0, "evaluated", v)) == \
        "build failed: kernels/ew.cu(30): error: expected an expression"
    other = {"verdict": "incorrect", "reasons": ["trial 0: wrong"], "log": "error: unrelated"}
    assert first_reason(Result("L1_3", 0, "evaluated", other)) == "trial 0: wrong"
