"""Rule sets and the static rules on KernelBench-style code (no GPU).

The corpus tests/solutions/kb_*.py is written the way LLMs write KernelBench solutions, each file
paired with a small task in tests/solutions/kb_tasks/ and listed with its expected results per rule
set in tests/solutions/kb_expected.json. Here: every honest file passes ``check`` under both rule
sets, every cheat is rejected under both by the rule the table names, except where a rule set allows
the construct or only run time can see it (listed below by name). The GPU half of the table (verdicts
and flags) is tests/gpu/test_rules_gpu.py.
"""

import json
import re
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from cuda_agent.cli import main  # noqa: E402
from cuda_agent.sandbox import SandboxConfig, evaluate, load_solution  # noqa: E402
from cuda_agent.sandbox.static import (  # noqa: E402
    KERNELBENCH, RULE_SETS, RULES, check_python, check_solution, rejecting, rules_table,
)
from cuda_agent.tasks import load_task  # noqa: E402

from .conftest import ROOT, SOLUTIONS  # noqa: E402

EXPECTED = json.loads((SOLUTIONS / "kb_expected.json").read_text())["solutions"]
CORPUS = sorted(p.name for p in SOLUTIONS.glob("kb_*.py"))
CASES = [(name, rules) for name in CORPUS for rules in RULE_SETS]

# cheats that `check` lets through, and why: the test names every one
PASS_CHECK = {
    ("kb_cheat_result_reuse.py", "cuda-agent"): "only run time can see it (returns uninitialized memory)",
    ("kb_cheat_result_reuse.py", "kernelbench"): "only run time can see it (returns uninitialized memory)",
    ("kb_cheat_torch_only.py", "kernelbench"): "kernelbench allows torch in forward; the kernel census rejects it",
}


def rejected_by(findings) -> list[str]:
    return sorted({f.rule for f in rejecting(findings)})


# ----------------------------------------------------------------------------- the corpus and its table

def test_the_corpus_has_twenty_files_each_with_a_task_and_an_expectation():
    assert len(CORPUS) >= 20
    assert set(CORPUS) == set(EXPECTED)
    for name, e in EXPECTED.items():
        assert (SOLUTIONS / "kb_tasks" / e["task"]).is_file(), name
        assert e["kind"] in ("honest", "torch_layers", "cheat", "broken"), name
        assert set(e) >= {"task", "kind", "what", *RULE_SETS}, name


@pytest.mark.parametrize("name,rules", CASES, ids=[f"{n[:-3]}-{r}" for n, r in CASES])
def test_check_rejects_exactly_the_expected_rules(name, rules):
    findings = check_solution(load_solution(SOLUTIONS / name), rules=rules)
    assert rejected_by(findings) == sorted(EXPECTED[name][rules]["check"]), [str(f) for f in findings]


def test_every_honest_file_passes_under_both_rule_sets():
    honest = [n for n, e in EXPECTED.items() if e["kind"] == "honest"]
    assert len(honest) >= 10
    for name in honest:
        for rules in RULE_SETS:
            assert EXPECTED[name][rules]["check"] == [] and EXPECTED[name][rules]["verdict"] == "correct", name


def test_torch_layers_in_forward_are_rejected_by_cuda_agent_and_allowed_by_kernelbench():
    layered = [n for n, e in EXPECTED.items() if e["kind"] == "torch_layers"]
    assert layered
    for name in layered:
        assert EXPECTED[name]["cuda-agent"]["check"] == ["torch_compute"]
        assert EXPECTED[name][KERNELBENCH] == {"check": [], "verdict": "correct", "flag": None}


def test_every_cheat_is_rejected_under_both_rule_sets_except_the_named_ones():
    let_through = {(n, r) for n, e in EXPECTED.items() if e["kind"] in ("cheat", "broken") for r in RULE_SETS
                   if not e[r]["check"]}
    assert let_through == set(PASS_CHECK)
    for (name, rules) in PASS_CHECK:  # and evaluation still fails them
        assert EXPECTED[name][rules]["verdict"] in ("rejected", "incorrect")


@pytest.mark.parametrize("name", ["kb_relu_inline.py", "kb_conv_epilogue.py", "kb_cheat_thread.py"])
def test_check_exit_codes_follow_the_table(name, capsys):
    for rules in RULE_SETS:
        expected = 1 if EXPECTED[name][rules]["check"] else 0
        assert main(["check", "--rules", rules, str(SOLUTIONS / name)]) == expected, rules
        out = capsys.readouterr().out
        assert out.startswith(f"verdict: {'rejected' if expected else 'ok'}   rules: {rules}")


def test_check_on_bad_input_exits_2(tmp_path, capsys):
    assert main(["check", str(tmp_path / "missing.py")]) == 2
    assert "missing.py" in capsys.readouterr().err


# ----------------------------------------------------------------------------- one table of rules

def test_rule_ids_are_unique_and_each_is_written_once_in_the_rules_module():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    source = (ROOT / "src" / "cuda_agent" / "sandbox" / "static.py").read_text()
    for r in RULES:
        assert source.count(f'"{r.id}"') == 1, f"rule id {r.id!r} spelled out more than once"
        assert r.severity in ("reject", "warn") and r.forbids and r.why and set(r.rule_sets) <= set(RULE_SETS)


def test_only_torch_compute_is_off_under_kernelbench():
    assert [r.id for r in RULES if not r.applies(KERNELBENCH)] == ["torch_compute"]
    assert all(r.applies("cuda-agent") for r in RULES)


def test_list_rules_prints_the_table(capsys):
    assert main(["check", "--list-rules"]) == 0
    out = capsys.readouterr().out
    for r in RULES:
        assert re.search(rf"^{r.id}\s", out, re.M), r.id


def test_the_rules_table_has_a_header_and_names_each_rules_sets():
    md = rules_table(markdown=True).splitlines()
    assert md[:2] == ["| rule | severity | forbids | why | rule sets |", "| --- | --- | --- | --- | --- |"]
    assert len(md) == len(RULES) + 2
    text = {line.split()[0]: line.split()[1:3] for line in rules_table().splitlines()}
    assert text["input_mutation"] == ["reject", "cuda-agent,kernelbench"]
    assert text["torch_compute"] == ["reject", "cuda-agent"]


def test_docs_carry_the_rules_table_verbatim():
    docs = (ROOT / "docs" / "sandbox.md").read_text()
    assert rules_table(markdown=True) in docs, "regenerate with: python -c 'from cuda_agent.sandbox.static " \
                                               "import rules_table; print(rules_table(markdown=True))'"


def test_an_unknown_rule_set_is_refused():
    with pytest.raises(ValueError, match="rules must be one of"):
        SandboxConfig(rules="paper")
    with pytest.raises(ValueError, match="rules must be one of"):
        check_solution(load_solution(SOLUTIONS / "kb_alias.py"), rules="paper")


# ----------------------------------------------------------------------------- what is judged

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport cuda_ext\n\n"


def found(src: str, rules: str = "cuda-agent") -> list[str]:
    return rejected_by(check_python(HEADER + textwrap.dedent(src), "sol.py", rules=rules))


MODEL = """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_ext.f(x)
"""


def test_module_level_copies_of_get_inputs_are_not_forward_compute():
    assert found(MODEL + "\ndef get_inputs():\n    return [torch.rand(4, 4).cuda() @ torch.rand(4, 4).cuda()]\n"
                 "\ndef get_init_inputs():\n    return [F.relu(torch.ones(1))]\n") == []


def test_a_function_nobody_calls_is_not_judged_but_one_forward_calls_is():
    assert found(MODEL + "\ndef unused(x):\n    return torch.sigmoid(x)\n") == []
    called = MODEL.replace("return cuda_ext.f(x)", "return helper(x)") + "\ndef helper(x):\n    return torch.sigmoid(x)\n"
    assert found(called) == ["torch_compute"]


def test_what_judged_code_refers_to_is_judged_transitively():
    src = MODEL.replace("return cuda_ext.f(x)", "return a(x)") + \
        "\ndef a(x):\n    return b(x)\n\ndef b(x):\n    return torch.sigmoid(x)\n"
    assert found(src) == ["torch_compute"]


def test_a_main_block_is_not_judged_but_module_level_tampering_is():
    assert found(MODEL + "\nif __name__ == '__main__':\n    torch.relu(torch.ones(1))\n    import threading\n") == []
    assert found(MODEL + "\nif torch.cuda.is_available():\n    import threading\n") == ["threads"]


@pytest.mark.parametrize("test,judged", [('"__main__" == __name__', False), ('__name__ != "__main__"', True),
                                         ('__name__ == "model_new"', True)])
def test_only_a_true_main_block_is_left_unjudged(test, judged):
    """The body of ``if __name__ != "__main__":`` runs when the harness imports the file (it was once skipped
    like a main block)."""
    assert found(MODEL + f"\nif {test}:\n    import threading\n") == (["threads"] if judged else [])


def test_init_code_may_use_private_torch_helpers_and_what_only_init_calls_is_init_code():
    src = """
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.empty(4, 4))
            fan_in, _ = torch.nn.init._calculate_fan_in_and_fan_out(self.w)
            self.reset_parameters()
            self.scale = make_scale(self.w)

        def reset_parameters(self):
            fan_in, _ = nn.init._calculate_fan_in_and_fan_out(self.w)
            nn.init.uniform_(self.w, -1 / fan_in, 1 / fan_in)

        def forward(self, x):
            return cuda_ext.f(x, self.w)

    def make_scale(w):
        return torch.linalg.norm(w) * torch._C._get_tracing_state() is None
    """
    assert found(src) == []


def test_private_torch_outside_init_code_is_still_rejected():
    assert found("x = torch._C._get_tracing_state()\n" + MODEL) == ["private_torch"]
    for rules in RULE_SETS:
        assert found(MODEL.replace("return cuda_ext.f(x)", "return cuda_ext.f(torch._C._nn.gelu(x))"), rules) == \
            ["private_torch"]


@pytest.mark.parametrize("how", ["self.fn = helper", "self.fn = lambda t: helper(t)"])
def test_a_helper_handed_from_init_to_forward_is_run_code(how):
    src = MODEL.replace("super().__init__()", f"super().__init__()\n        {how}") \
        .replace("return cuda_ext.f(x)", "return self.fn(x)") + "\ndef helper(x):\n    return torch.sigmoid(x)\n"
    assert found(src) == ["torch_compute"]


def test_a_method_called_from_both_init_and_forward_is_run_code():
    src = """
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            self.y = self.act(torch.ones(3))

        def act(self, t):
            return torch.sigmoid(t)

        def forward(self, x):
            return self.act(x)
    """
    assert found(src) == ["torch_compute"]


def test_model_new_may_be_an_alias_and_a_local_model_class_is_then_not_the_reference():
    own = MODEL.replace("ModelNew", "Model").replace("super().__init__()", "super(Model, self).__init__()")
    assert found(own + "\nModelNew = Model\n") == []
    assert found(MODEL.replace("ModelNew", "Fast") + "\nModelNew = Fast\n") == []


def test_model_new_calling_a_local_model_is_delegation_under_both_rule_sets():
    src = MODEL.replace("ModelNew", "Model") + MODEL.replace("return cuda_ext.f(x)", "return Model()(x)")
    for rules in RULE_SETS:
        assert "delegates_to_reference" in found(src, rules)


def test_kernelbench_allows_torch_layers_in_forward_but_not_the_anti_cheat_rules():
    layer = MODEL.replace("super().__init__()", "super().__init__()\n        self.conv = nn.Conv2d(3, 8, 3)") \
        .replace("return cuda_ext.f(x)", "return cuda_ext.f(F.relu(self.conv(x)) @ x)")
    assert found(layer) == ["torch_compute"] and found(layer, KERNELBENCH) == []
    for stmt, rule in [("s = torch.cuda.Stream()", "side_stream"), ("x.zero_()", "input_mutation"),
                       ("exec('1')", "monkey_patch")]:
        cheat = MODEL.replace("return cuda_ext.f(x)", f"{stmt}\n        return cuda_ext.f(x)")
        assert rule in found(cheat, KERNELBENCH), stmt
    fallback = MODEL.replace("return cuda_ext.f(x)", "try:\n            return cuda_ext.f(x)\n"
                                                       "        except RuntimeError:\n            return F.relu(x)")
    assert found(fallback, KERNELBENCH) == ["fallback"]


def test_cpp_torch_compute_is_allowed_by_kernelbench_only():
    src = ('#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor a, torch::Tensor b) {\n'
           '  return at::matmul(a, b);\n}\n')
    sol = HEADER + f"SRC = '''\n{src}'''\n" + MODEL
    assert rejected_by(check_python(sol, "sol.py")) == ["torch_compute"]
    assert rejected_by(check_python(sol, "sol.py", rules=KERNELBENCH)) == []


# ----------------------------------------------------------------------------- verdicts without a GPU

def test_no_model_new_is_a_rejection_with_its_flag_not_a_compile_error(tmp_path):
    task = load_task(SOLUTIONS / "kb_tasks" / "relu.py", validate=False)
    for static_rules in (True, False):
        v = evaluate(task, load_solution(SOLUTIONS / "kb_no_model_new.py"),
                     SandboxConfig(cache_dir=tmp_path, static_rules=static_rules))
        assert v.verdict == "rejected" and v.flags == ["no_model_new"], (v.verdict, v.flags)
        assert "defines no ModelNew" in v.reasons[0]


def test_a_static_rejection_states_its_rule_set(tmp_path):
    task = load_task(SOLUTIONS / "kb_tasks" / "conv_relu_bias.py", validate=False)
    v = evaluate(task, load_solution(SOLUTIONS / "kb_conv_epilogue.py"), SandboxConfig(cache_dir=tmp_path))
    assert (v.verdict, v.flags, v.rules) == ("rejected", ["torch_compute"], "cuda-agent")
    assert v.to_dict()["rules"] == "cuda-agent"
    task = load_task(SOLUTIONS / "kb_tasks" / "relu.py", validate=False)
    v = evaluate(task, load_solution(SOLUTIONS / "kb_cheat_side_stream.py"),
                 SandboxConfig(cache_dir=tmp_path, rules=KERNELBENCH))
    assert (v.verdict, v.flags, v.rules) == ("rejected", ["side_stream"], "kernelbench")


# ----------------------------------------------------------------------------- bench

def _kernelbench(tmp_path: Path) -> Path:
    from .bench_helpers import write_problems

    return write_problems(tmp_path / "kb", 1, [1])


@pytest.mark.parametrize("stored", [{"rules": "cuda-agent"}, {}], ids=["cuda-agent", "before_rules_existed"])
def test_a_bench_resume_with_another_rule_set_is_refused(tmp_path, capsys, stored):
    from cuda_agent.bench.store import RunDir

    kb = _kernelbench(tmp_path)
    (tmp_path / "sols").mkdir()
    out = tmp_path / "run"
    RunDir(out).write_config({"format_version": 1, "mode": "solutions", "precision": "fp32",
                              "kernelbench": str(kb.resolve()), **stored})
    argv = ["bench", "--kernelbench", str(kb), "--levels", "1", "--solutions", str(tmp_path / "sols"),
            "--out", str(out), "--no-progress", "--rules", "kernelbench"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "rules 'cuda-agent'" in err and "'kernelbench'" in err
    assert not (out / "results.sqlite").exists()


def test_reports_count_no_solution_apart_and_state_the_rule_set(tmp_path):
    from cuda_agent.bench.report import load, write_report
    from cuda_agent.bench.runner import Item, failure_verdict

    from .bench_helpers import fill_run, verdict

    task = load_task(_kernelbench(tmp_path) / "level1" / "1_relu_add_1.py")
    missing = failure_verdict(Item(task, 0), {"status": "no_solution"}, KERNELBENCH)
    assert missing["rules"] == KERNELBENCH
    broken = {**verdict("L1_2", "compile_error", reason="build failed"), "rules": KERNELBENCH}
    rows = [(1, 1, missing), (1, 2, broken)]
    run = fill_run(tmp_path / "run", rows, {"format_version": 1, "mode": "solutions", "precision": "fp32",
                                            "rules": KERNELBENCH, "invocations": []})
    data = load(run)
    overall = data.summaries[-1]
    assert overall.verdicts == {"no_solution": 1, "compile_error": 1}
    paths = write_report([data], tmp_path / "report")
    md = paths["markdown"].read_text()
    header = next(ln for ln in md.splitlines() if ln.startswith("| Split | correct"))
    assert header.rstrip(" |").endswith("no_solution")
    assert "rules: kernelbench" in md
    assert "| L1_1 | 0 | 1_problem | evaluated | no_solution |" in paths["tasks"].read_text()
    assert ">no_solution</th>" in paths["html"].read_text()


def test_the_corpus_stages_as_kernelbench_and_its_generations(tmp_path):
    """benchmarks/rules_corpus.py's layout: one level-1 problem per solution, found by bench as KernelBench
    generations; its comparison flags a wrong verdict and a missing flag."""
    from cuda_agent.bench.corpus import compare, stage
    from cuda_agent.bench.sources import find_solutions, select_tasks

    staged = stage(SOLUTIONS, tmp_path)
    tasks, _ = select_tasks(staged.kernelbench, [1], None)
    found = find_solutions(staged.solutions)
    assert {t.name for t in tasks} == set(staged.files) == {t for t, _ in found.solutions}
    assert set(staged.files.values()) == set(EXPECTED)
    for task in tasks:
        name = staged.files[task.name]
        assert task.source == (SOLUTIONS / "kb_tasks" / EXPECTED[name]["task"]).read_text()
        assert found.solutions[(task.name, 0)].read_text() == (SOLUTIONS / name).read_text()
    exact = {t: {"verdict": EXPECTED[n]["kernelbench"]["verdict"], "flags": [EXPECTED[n]["kernelbench"]["flag"]]}
             for t, n in staged.files.items()}
    assert compare(EXPECTED, staged, "kernelbench", exact) == []
    wrong = dict(exact)
    thread = next(t for t, n in staged.files.items() if n == "kb_cheat_thread.py")
    wrong[thread] = {"verdict": "rejected", "flags": ["monkey_patch"]}
    [m] = compare(EXPECTED, staged, "kernelbench", wrong)
    assert m.file == "kb_cheat_thread.py" and "expected rejected with flag threads" in str(m)


def test_init_of_a_model_new_defined_inside_a_try_block_is_still_init_code():
    src = """
    try:
        import ninja
    except ImportError:
        ninja = None
    if True:
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.w = nn.Parameter(torch.randn(4, 4) @ torch.randn(4, 4))

            def forward(self, x):
                return cuda_ext.f(x, self.w)
    """
    assert found(src) == []


def test_a_module_base_defined_after_its_subclass_is_still_found():
    """nn.Module classes are found through local bases whatever the order of the classes in the file (a
    fixed point, not one pass), so ModelNew's __init__ stays initialization code. (The import makes the static
    pass read the base as helpers.Base, so only reach.py's analysis can tell.)"""
    src = """
    from helpers import Base

    class Plain(nn.Module):
        pass

    class ModelNew(Base):
        def __init__(self):
            super().__init__()
            self.w = torch.randn(3)

        def forward(self, x):
            return cuda_ext.f(x, self.w)

    class Base(nn.Module):
        pass
    """
    assert check_python(HEADER + textwrap.dedent(src), "sol.py") == []


def test_a_method_named_only_in_a_string_is_run_code():
    """getattr(self, "helper") hands the method out as a value: it is not a direct call from __init__."""
    src = """
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            self.act = getattr(self, "helper")

        def helper(self, x):
            return torch.sigmoid(x)

        def forward(self, x):
            return cuda_ext.f(self.act(x))
    """
    assert found(src) == ["torch_compute"]


def test_init_code_is_entered_through_a_helper_defined_after_its_callee():
    """__init__ calls build(), build() calls table(), defined first: table() is initialization code too."""
    src = MODEL.replace("super().__init__()", "super().__init__()\n        self.w = build()") + """
def table():
    return torch.randn(3)

def build():
    return table() + 1
"""
    assert found(src) == []


def test_a_function_init_calls_is_run_code_when_run_code_reaches_it_through_a_later_helper():
    """__init__ and build() call table(), defined first; forward calls build(): build() is run code, so table()
    is too (the fixed point takes a second pass to see it)."""
    src = MODEL.replace("super().__init__()", "super().__init__()\n        self.w = table()") \
        .replace("return cuda_ext.f(x)", "return cuda_ext.f(x, build())") + """
def table():
    return torch.randn(3)

def build():
    return table() + 1
"""
    assert found(src) == ["torch_compute"]


@pytest.mark.parametrize("stmt,binds", [("import ModelNew.kernels", True), ("import kernels.ModelNew", False),
                                        ("import kernels.ModelNew as ModelNew", True)])
def test_an_import_binds_model_new_by_the_name_it_binds(stmt, binds):
    import ast

    from cuda_agent.sandbox.reach import binds_model_new

    assert binds_model_new(ast.parse(stmt)) == (binds, None)


# ----------------------------------------------------------------------------- evaluation, rehearsed on the CPU

@pytest.mark.nvcc
def test_torch_ops_in_forward_are_rejected_by_the_dispatch_guard_only_under_cuda_agent(monkeypatch, tmp_path_factory,
                                                                                     tmp_path):
    """A forward that adds torch arithmetic to its own kernel's output (nothing a static rule sees: `*` and `+`)
    is rejected by the dispatch guard under cuda-agent and correct under kernelbench, where the census
    (skipped in a rehearsal) runs instead, with profile off."""
    import shutil

    from .conftest import TASKS

    monkeypatch.setenv("CUDA_AGENT_REHEARSAL", "cpu")
    ws = tmp_path / "ws"
    shutil.copytree(SOLUTIONS / "rehearsal_swish_cpu", ws)
    (ws / "model_new.py").write_text("import torch\nimport torch.nn as nn\n\nimport cuda_ext\n\n\n"
                                     "class ModelNew(nn.Module):\n    def forward(self, x):\n"
                                     "        return cuda_ext.ew(x.contiguous()) + torch.zeros_like(x) * x\n")
    cache = tmp_path_factory.getbasetemp() / "rehearsal_cache"
    verdicts = {}
    for rules in RULE_SETS:
        assert rejected_by(check_solution(load_solution(ws), rules=rules)) == []
        verdicts[rules] = evaluate(load_task(TASKS / "swish_small.py"), load_solution(ws),
                                   SandboxConfig(cache_dir=cache, rep_ms=20.0, warmup_ms=5.0, run_timeout_s=120.0,
                                                 profile=False, rules=rules))
    v = verdicts["cuda-agent"]
    assert (v.verdict, v.flags, v.rules) == ("rejected", ["torch_compute"], "cuda-agent"), (v.reasons, v.log)
    assert "aten.mul" in v.reasons[0]
    v = verdicts[KERNELBENCH]
    assert (v.verdict, v.rules) == ("correct", KERNELBENCH), (v.verdict, v.reasons, v.log)
    assert "torch_compute" not in v.flags and "profile" in v.timing  # the census ran although profile is off
