"""Which tasks a bench run selects, and where it finds their solutions (three layouts)."""

import pytest

from cuda_agent.bench.sources import BenchError, find_solutions, parse_ids, select_tasks

from .bench_helpers import broken_file, compile_error, rejected, write_problems
from .conftest import ROOT


def test_parse_ids():
    assert parse_ids("1,2,5-9") == (1, 2, 5, 6, 7, 8, 9)
    assert parse_ids("3,3,1") == (3, 1)
    assert parse_ids(None) is None and parse_ids("all") is None
    for bad in ("1,x", "5-2", "1-", "-3"):
        with pytest.raises(BenchError, match="--problems"):
            parse_ids(bad)


def test_select_tasks_from_a_kernelbench_tree():
    tasks, notices = select_tasks(ROOT / "tests" / "data" / "kernelbench_mini", (1, 2), (1, 19, 23, 77))
    assert [t.name for t in tasks] == ["L1_1", "L1_19", "L1_23", "L2_1", "L2_23"]
    assert tasks[1].meta == {"level": 1, "problem_id": 19, "title": "19_ReLU"}
    assert notices == ["level 1: no problem file for 77", "level 2: no problem file for 19,77"]


def test_missing_level_directory_is_a_clear_error(tmp_path):
    write_problems(tmp_path, 1, [1])
    with pytest.raises(BenchError, match="level3: missing"):
        select_tasks(tmp_path, (1, 3), None)
    with pytest.raises(BenchError, match="no such directory"):
        select_tasks(tmp_path / "nope", (1,), None)


def test_duplicate_task_id_is_a_clear_error(tmp_path):
    write_problems(tmp_path, 1, [1, 2])
    (tmp_path / "level1" / "2_another_name.py").write_text((tmp_path / "level1" / "2_relu_add_2.py").read_text())
    with pytest.raises(BenchError, match=r"duplicate task id L1_2: .*\.py and .*\.py have the same") as e:
        select_tasks(tmp_path, (1,), None)
    assert "2_another_name.py" in str(e.value) and "2_relu_add_2.py" in str(e.value)


def test_kernelbench_generation_layout(tmp_path):
    # the file names KernelBench's scripts/generate_samples.py writes and eval_from_generations.py reads
    for level, problem, sample in ((1, 19, 0), (1, 19, 1), (2, 3, 0)):
        broken_file(tmp_path / f"level_{level}_problem_{problem}_sample_{sample}_kernel.py")
    (tmp_path / "level_1_problem_19_sample_0_prompt.txt").write_text("a prompt")
    (tmp_path / "generation_config.yaml").write_text("x: 1")
    found = find_solutions(tmp_path)
    assert sorted(found.solutions) == [("L1_19", 0), ("L1_19", 1), ("L2_3", 0)]
    assert found.solutions[("L1_19", 1)].name == "level_1_problem_19_sample_1_kernel.py"
    assert set(found.layouts.values()) == {"kernelbench"}
    assert sorted(found.ignored) == ["generation_config.yaml", "level_1_problem_19_sample_0_prompt.txt"]


def test_workspaces_named_by_task_id(tmp_path):
    rejected(tmp_path / "L1_1", 1)
    broken_file(tmp_path / "L1_2.py")
    compile_error(tmp_path / "L2_4" / "sample_0", 4)
    compile_error(tmp_path / "L2_4" / "sample_3", 4)
    found = find_solutions(tmp_path)
    assert found.solutions == {("L1_1", 0): tmp_path / "L1_1", ("L1_2", 0): tmp_path / "L1_2.py",
                               ("L2_4", 0): tmp_path / "L2_4" / "sample_0", ("L2_4", 3): tmp_path / "L2_4" / "sample_3"}
    assert found.for_task("L2_4") == [(0, tmp_path / "L2_4" / "sample_0"), (3, tmp_path / "L2_4" / "sample_3")]


def test_a_bench_run_directory(tmp_path):
    (tmp_path / "bench.json").write_text("{}")
    rejected(tmp_path / "tasks" / "L1_1" / "sample_0" / "solution", 1)
    (tmp_path / "tasks" / "L1_5" / "sample_2" / "solution").mkdir(parents=True)
    broken_file(tmp_path / "tasks" / "L1_5" / "sample_2" / "solution" / "level_1_problem_5_sample_2_kernel.py")
    (tmp_path / "tasks" / "L1_6" / "sample_0").mkdir(parents=True)  # no solution copied: nothing to find
    found = find_solutions(tmp_path)
    assert found.solutions == {
        ("L1_1", 0): tmp_path / "tasks" / "L1_1" / "sample_0" / "solution",
        ("L1_5", 2): tmp_path / "tasks" / "L1_5" / "sample_2" / "solution" / "level_1_problem_5_sample_2_kernel.py"}
    assert set(found.layouts.values()) == {"run"}


def test_two_solutions_for_one_task_are_a_clear_error(tmp_path):
    rejected(tmp_path / "L1_3", 3)
    broken_file(tmp_path / "level_1_problem_3_sample_0_kernel.py")
    with pytest.raises(BenchError, match=r"duplicate solution for task L1_3 sample 0: .*L1_3 and .*kernel\.py"):
        find_solutions(tmp_path)


def test_missing_solutions_directory(tmp_path):
    with pytest.raises(BenchError, match="--solutions .*: no such directory"):
        find_solutions(tmp_path / "nope")


def test_the_gpu_benchmark_generator_writes_what_bench_reads(tmp_path):
    import json

    from cuda_agent.sandbox import check_solution, load_solution, rejecting

    gen = _script("make_bench_problems")
    assert gen.main(["--out", str(tmp_path)]) == 0
    expected = json.loads((tmp_path / "expected.json").read_text())["verdicts"]
    tasks, notices = select_tasks(tmp_path / "kb", (1, 2), None)
    assert len(tasks) == len(expected) == 26 and not notices
    found = find_solutions(tmp_path / "solutions")
    assert len(found.solutions) == 25 and not found.ignored  # L2_8 has none on purpose
    assert sorted(expected.values()).count("correct") == 16
    assert rejecting(check_solution(load_solution(found.solutions[("L1_11", 0)])))  # the static cheat
    for (task, _), path in found.solutions.items():  # honest, wrong and crashing kernels pass the static rules
        if expected[task] in ("correct", "incorrect", "runtime_error"):
            assert not rejecting(check_solution(load_solution(path))), task


def test_copies_make_distinct_problems_with_the_variants_once(tmp_path):
    import json

    gen = _script("make_bench_problems")
    assert gen.main(["--out", str(tmp_path), "--copies", "2"]) == 0
    expected = json.loads((tmp_path / "expected.json").read_text())["verdicts"]
    tasks, notices = select_tasks(tmp_path / "kb", (1, 2), None)
    assert len(tasks) == len(expected) == 52 and not notices
    assert len({t.source.split("\n", 1)[1] for t in tasks}) == 52  # other shapes (the title line aside)
    assert sorted(expected.values()).count("correct") == 42  # the 10 wrong/crashing/rejected ones only once


def _rows(*evals):
    """bench_multi_gpu rows: (task, sample, lane, verdict) with the given timed windows on one GPU."""
    return [(task, 0, "gpu0.0", {"verdict": "correct", "ms": 1.0,
                                 "timing": {"gpu_uuid": gpu, "timed_windows": windows}})
            for task, gpu, windows in evals]


def test_multi_gpu_check_finds_overlapping_timings_only_on_one_gpu():
    mg = _script("bench_multi_gpu")
    apart = _rows(("a", "GPU-0", [(10.0, 11.0), (11.5, 12.0)]), ("b", "GPU-0", [(12.0, 13.0)]),
                  ("c", "GPU-1", [(10.5, 12.5)]))  # c overlaps a and b in time, on another GPU
    assert mg.overlaps(apart) == []
    clash = _rows(("a", "GPU-0", [(10.0, 11.0), (11.5, 12.0)]), ("b", "GPU-0", [(10.6, 10.9)]))
    assert [(o["a"], o["b"]) for o in mg.overlaps(clash)] == [("a/0", "b/0")]
    agree = mg.agreement({"x/0": 1.0, "y/0": 2.0, "z/0": 1.0}, {"x/0": 1.01, "y/0": 2.2})
    assert agree["tasks"] == 2 and agree["within_3pct"] == 1 and agree["worst"] == {"task": "y/0", "ratio": 1.1}


def _script(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
