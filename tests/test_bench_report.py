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


def _with_roofline(v: dict, compile_ms: float) -> dict:
    """A verdict with the roofline block the sandbox would add: a 1 ms memory bound on the H200's datasheet."""
    from cuda_agent.sandbox.roofline import Work, assess

    block = assess(gpu_name="NVIDIA H200", precision="fp32", work=Work(flops=0), input_bytes=4800 * 10**6,
                   param_bytes=0, output_bytes=0, ms=v.get("ms") if v["verdict"] == "correct" else None,
                   compile_ms=compile_ms)
    v["compile_ms"], v["roofline"] = compile_ms, block.to_dict()
    v["flags"] = v["flags"] + block.flags
    return v


def test_the_roofline_in_the_report_columns_notes_headroom_and_plot(tmp_path):
    rows = [(1, 1, _with_roofline(verdict("L1_1", "correct", eager=4.0, compile_=1.25, ms=2.0), 1.25)),  # 50%, 80%
            (1, 2, _with_roofline(verdict("L1_2", "correct", eager=8.0, compile_=5.0, ms=4.0), 5.0)),  # 25%, 20%
            (1, 3, _with_roofline(verdict("L1_3", "incorrect", reason="wrong"), 10.0)),  # compile 10%
            (2, 1, _with_roofline(verdict("L2_1", "correct", eager=4.0, compile_=2.0, ms=0.8), 2.0))]  # 125%, 50%
    run = fill_run(tmp_path / "roof", rows)
    paths = write_report([load(run)], tmp_path / "out")
    md = paths["markdown"].read_text()
    # Table 1's note: geometric means over the correct attempts having both fractions, hand-computed
    assert ("- Level 1: the candidate reaches 35.4% of the roofline bound, compile 40.0% "
            "(geometric means over 2 correct attempts)") in md
    assert "- Level 2: 1 attempt(s) report a fraction above 100% of the bound (flagged `roofline_above_bound`)" in md
    # the most headroom under compile, least fraction first
    section = md[md.index("## Most headroom under torch.compile"):]
    order = [ln.split("|")[1].strip() for ln in section.splitlines() if ln.startswith("| L")]
    assert order == ["L1_3", "L1_2", "L2_1", "L1_1"]
    assert "| L1_3 | 3_problem | memory 1 ms | 10.0000 | 10% | - |" in section
    # the distribution per level: compile's level-1 fractions are 10%, 20%, 80% (p10 by linear interpolation: 12%)
    assert "| Level 1 | compile | 3 | 12% | 20% | 68% | 80% |" in md
    assert "| Level 2 | candidate | 1 | 125% (above 1: a bug) |" in md
    tasks = paths["tasks"].read_text()
    assert "| memory 1 ms | 50% | - | 80% |" in tasks and "125% (above 1: a bug)" in tasks
    summary = json.loads(paths["summary"].read_text())["runs"][0]["summaries"]
    assert summary[0]["fraction_of_bound"] == pytest.approx((0.5 * 0.25) ** 0.5)
    assert summary[-1]["above_bound"] == 1
    page = paths["html"].read_text()
    assert "Most headroom under torch.compile" in page and "Of bound" in page and "roofline bound per level</h2>" in page
    if not HAS_MPL:
        pytest.skip("matplotlib is not installed: the plot is not checked")
    assert 'alt="Fraction of the roofline bound per level"' in page
    assert paths["roofline_plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_without_roofline_blocks_has_no_roofline_sections(runs):
    a, _, tmp = runs
    paths = write_report([load(a)], tmp / "out_plain")
    md = paths["markdown"].read_text()
    assert "roofline bound, compile" not in md and "Most headroom" not in md and "roofline_plot" not in paths
