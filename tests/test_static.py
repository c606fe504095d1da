"""Static honesty rules (no GPU, no compiler): cheats are rejected by the right rule, honest code is not.

The rules live in ``cuda_agent.sandbox.static``; the GPU suite (tests/gpu) shows the dynamic
defense behind each rule. Here every case is a static fact about a source text.
"""

import textwrap

import pytest

pytest.importorskip("torch")

from cuda_agent.sandbox import SandboxConfig, evaluate, load_solution  # noqa: E402
from cuda_agent.sandbox.static import REJECT, WARN, check_cpp, check_python, check_solution, rejecting  # noqa: E402
from cuda_agent.tasks import load_task  # noqa: E402

from .conftest import EXAMPLES, HAS_CUDA, SOLUTIONS  # noqa: E402

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport cuda_ext\n\n"


def py(body: str) -> list:
    """Findings for a model_new.py made of the usual imports plus ``body`` (dedented)."""
    return check_python(HEADER + textwrap.dedent(body), "model_new.py")


def rules(findings) -> set[str]:
    return {f.rule for f in rejecting(findings)}


def model(forward: str, init: str = "pass") -> str:
    """A ModelNew with the given __init__ and forward bodies (one statement per line)."""
    ind = "\n" + " " * 8
    return (f"class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            f"        {ind.join(init.splitlines())}\n\n    def forward(self, x, y=None):\n"
            f"        {ind.join(forward.splitlines())}\n")


# ----------------------------------------------------------------------------- the solutions on disk

CHEATS = [
    ("cheat_torch_fallback", "torch_compute"),
    ("cheat_try_except", "fallback"),
    ("cheat_delegate", "delegates_to_reference"),
    ("cheat_monkeypatch_timer", "monkey_patch"),
    ("cheat_thread", "threads"),
    ("cheat_side_stream", "side_stream"),
    ("cheat_lazy_tensor", "lazy_tensor"),
]


@pytest.mark.parametrize("name,rule", CHEATS, ids=[c[0] for c in CHEATS])
def test_cheat_solution_is_rejected_by_its_rule(name, rule):
    findings = check_solution(load_solution(SOLUTIONS / name))
    assert rule in rules(findings), [str(f) for f in findings]


HONEST = [SOLUTIONS / "honest_row_sum", SOLUTIONS / "honest_linear_relu", SOLUTIONS / "honest_layer_norm",
          SOLUTIONS / "honest_swish_inline.py", EXAMPLES / "swish" / "solution"]


@pytest.mark.parametrize("path", HONEST, ids=[p.name if p.name != "solution" else "examples/swish" for p in HONEST])
def test_honest_solution_has_no_reject_finding(path):
    findings = check_solution(load_solution(path))
    assert rejecting(findings) == [], [str(f) for f in findings]


def test_finding_points_at_the_offending_line():
    [f] = rejecting(check_solution(load_solution(SOLUTIONS / "cheat_try_except")))
    lines = (SOLUTIONS / "cheat_try_except" / "model_new.py").read_text().splitlines()
    assert f.file == "model_new.py"
    assert "silu" in lines[f.line - 1]


def test_tf32_gemm_is_a_warning_not_a_rejection():
    findings = check_solution(load_solution(SOLUTIONS / "cheat_tf32_gemm"))
    assert not rejecting(findings)
    assert any(f.rule == "precision" and f.severity == WARN for f in findings)


def test_workspace_without_model_new_is_a_layout_problem(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "k.cu").write_text("__global__ void k() {}\n")
    findings = check_solution(load_solution(tmp_path))
    assert "layout" in rules(findings)


def test_model_new_without_model_new_is_rejected_as_no_model_new(tmp_path):
    """Not a layout (compile_error) problem: the file is there and parses; it names no ModelNew."""
    (tmp_path / "model_new.py").write_text("import torch\n\nclass Model2(torch.nn.Module):\n    pass\n")
    assert rules(check_solution(load_solution(tmp_path))) == {"no_model_new"}


def test_syntax_error_is_reported_with_its_line():
    findings = check_python("class ModelNew:\n    def forward(self, x)\n        return x\n", "model_new.py")
    assert [(f.rule, f.line) for f in findings] == [("syntax", 2)]


# ----------------------------------------------------------------------------- Python snippets: torch compute

def test_matmul_operator_in_forward_is_rejected():
    assert "torch_compute" in rules(py(model("return x @ y")))


def test_aten_op_in_forward_is_rejected():
    assert "torch_compute" in rules(py(model("return torch.ops.aten.mm(x, y)")))


def test_functional_call_in_forward_is_rejected():
    assert "torch_compute" in rules(py(model("return F.relu(x)")))


def test_tensor_compute_method_in_forward_is_rejected():
    assert "torch_compute" in rules(py(model("return x.sigmoid()")))


def test_torch_compute_in_a_helper_method_is_rejected():
    src = model("return self._impl(x)") + "\n    def _impl(self, x):\n        return torch.sigmoid(x)\n"
    assert "torch_compute" in rules(py(src))


def test_functional_call_in_except_branch_is_a_fallback():
    found = py(model("try:\n    return cuda_ext.f(x)\nexcept RuntimeError:\n    return F.silu(x)"))
    assert rules(found) == {"fallback"}


def test_allocation_views_and_own_ops_in_forward_are_allowed():
    forward = ("out = torch.empty_like(x)\nn = x.numel()\n"
               "cuda_ext.f(x.contiguous().view(-1), out.view(-1), n)\n"
               "z = torch.ops.cuda_ext.swish(x)\n"
               "return out.reshape(x.shape)")
    assert rules(py(model(forward))) == set()


def test_import_error_guard_and_pass_branch_are_not_rejected():
    src = """
    try:
        import ninja  # optional, only speeds up the build
    except ImportError:
        ninja = None

    class ModelNew(nn.Module):
        def forward(self, x):
            if x.dim() == 0:
                pass
            return cuda_ext.f(x)
    """
    assert rejecting(py(src)) == []


def test_torch_compute_in_init_and_prepare_is_allowed():
    src = """
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(8, 8))
            self.w2 = torch.matmul(self.w, self.w)
            self.ws = [torch.relu(torch.randn(3)) for _ in range(2)]

        def prepare(self):
            self.wt = F.relu(self.w).t().contiguous() @ self.w2

        def forward(self, x):
            return cuda_ext.f(x, self.wt)
    """
    assert rejecting(py(src)) == []


def test_torch_compute_in_a_lambda_defined_in_init_is_rejected():
    found = py(model("return self.fn(x)", init="self.fn = lambda t: torch.sigmoid(t) * t"))
    assert "torch_compute" in rules(found)


def test_torch_compute_in_a_function_nested_in_init_is_rejected():
    found = py(model("return self.fn(x)", init="def g(t):\n    return torch.sigmoid(t)\nself.fn = g"))
    assert "torch_compute" in rules(found)


def test_calling_a_torch_layer_built_in_init_is_rejected():
    found = py(model("return self.conv(x)", init="self.conv = nn.Conv2d(3, 8, 3)"))
    assert "torch_compute" in rules(found)


def test_calling_a_torch_layers_forward_is_rejected():
    found = py(model("return self.conv.forward(x)", init="self.conv = nn.Conv2d(3, 8, 3)"))
    assert "torch_compute" in rules(found)


def test_reading_a_torch_layers_weights_is_allowed():
    found = py(model("return cuda_ext.conv(x, self.conv.weight, self.conv.bias)",
                     init="self.conv = nn.Conv2d(3, 8, 3)"))
    assert rejecting(found) == []


def test_building_a_torch_layer_in_forward_is_rejected():
    assert "torch_compute" in rules(py(model("return nn.ReLU()(x)")))


def test_torch_compile_is_rejected_even_in_init():
    found = py(model("return self.f(x)", init="self.f = torch.compile(cuda_ext.f)"))
    assert "torch_compute" in rules(found)


def test_calibrate_mode_skips_torch_op_rules():
    src = HEADER + model("return torch.sigmoid(x) @ y")
    assert rejecting(check_python(src, "model.py")) and not rejecting(check_python(src, "model.py", calibrate=True))


# ----------------------------------------------------------------------------- Python snippets: tampering

def test_setattr_on_torch_is_a_monkey_patch():
    assert "monkey_patch" in rules(py("setattr(torch, 'sigmoid', lambda t: t)\n"))


def test_assigning_event_elapsed_time_is_a_monkey_patch():
    assert "monkey_patch" in rules(py("torch.cuda.Event.elapsed_time = lambda self, other: 1e-3\n"))


def test_setattr_on_self_is_allowed():
    assert rejecting(py(model("return cuda_ext.f(x)", init="setattr(self, 'scale', 2.0)"))) == []


def test_import_triton_is_another_framework():
    assert rules(check_python("import triton\n", "model_new.py")) == {"other_framework"}


@pytest.mark.parametrize("call", ["exec('y = 1')", "eval('1 + 1')", "__import__('os')"])
def test_dynamic_code_is_rejected(call):
    assert "monkey_patch" in rules(py(model(f"{call}\nreturn cuda_ext.f(x)")))


@pytest.mark.parametrize("mod,rule", [("threading", "threads"), ("subprocess", "threads"),
                                      ("ctypes", "forbidden_import"), ("torch._dynamo", "private_torch"),
                                      ("model", "delegates_to_reference"), ("cuda_agent.sandbox", "harness_access")])
def test_forbidden_imports(mod, rule):
    assert rules(check_python(f"import {mod}\n", "model_new.py")) == {rule}


def test_side_stream_from_python_is_rejected():
    assert "side_stream" in rules(py(model("s = torch.cuda.Stream()\nreturn cuda_ext.f(x)")))


def test_writing_into_an_input_is_rejected():
    assert "input_mutation" in rules(py(model("x[0] = 0\nreturn cuda_ext.f(x)")))


@pytest.mark.parametrize("stmt", ["x.add_(1)", "x.copy_(cuda_ext.f(x))", "x.zero_()", "y.mul_(2)"])
def test_an_in_place_method_on_an_input_is_rejected(stmt):
    assert "input_mutation" in rules(py(model(f"{stmt}\nreturn cuda_ext.f(x)"))), stmt


def test_in_place_methods_on_fresh_tensors_are_not_input_mutation():
    found = py(model("out = torch.empty_like(x)\nout.zero_()\nx.data_ptr()\nreturn cuda_ext.f(x, out)"))
    assert "input_mutation" not in {f.rule for f in found}, [str(f) for f in found]


@pytest.mark.parametrize("stmt", ["x[0], z = 0, 1", "z, [x[1], w] = 1, [2, 3]"])
def test_writing_into_an_input_through_a_tuple_target_is_rejected(stmt):
    assert "input_mutation" in rules(py(model(f"{stmt}\nreturn cuda_ext.f(x)"))), stmt


def test_patching_a_module_through_a_tuple_target_is_a_monkey_patch():
    assert "monkey_patch" in rules(py("torch.sigmoid, other = (lambda t: t), 1\n" + model("return cuda_ext.f(x)")))


def test_embedded_cpp_in_a_python_string_is_scanned():
    src = HEADER + 'SRC = """\n#include <torch/extension.h>\ntorch::Tensor f(torch::Tensor a, torch::Tensor b) {\n' \
                   '  return at::matmul(a, b);\n}\n"""\n' + model("return cuda_ext.f(x)")
    found = [f for f in rejecting(check_python(src, "sol.py")) if f.rule == "torch_compute"]
    assert found, "at::matmul inside a load_inline source was not seen"
    assert src.splitlines()[found[0].line - 1].strip() == "return at::matmul(a, b);"


# ----------------------------------------------------------------------------- C++/CUDA snippets

def cpp_rules(src: str, severity: str = REJECT) -> set[str]:
    return {f.rule for f in check_cpp(src, "kernels/k_binding.cpp") if f.severity == severity}


def test_cpp_at_matmul_is_rejected():
    src = "torch::Tensor f(torch::Tensor a, torch::Tensor b) { return at::matmul(a, b); }"
    assert "torch_compute" in cpp_rules(src)


def test_cpp_tensor_method_compute_is_rejected():
    assert "torch_compute" in cpp_rules("torch::Tensor f(torch::Tensor a) { return a.relu(); }")


def test_cpp_allocation_and_checks_are_allowed():
    src = ('torch::Tensor f(torch::Tensor x) {\n  TORCH_CHECK(x.is_cuda(), "x must be CUDA");\n'
           '  auto y = torch::empty({x.size(0)}, x.options());\n  auto z = torch::stable::empty_like(x);\n'
           '  auto s = at::cuda::getCurrentCUDAStream();\n  return y;\n}\n')
    assert check_cpp(src, "k.cpp") == []


def test_cpp_std_thread_is_rejected():
    assert "threads" in cpp_rules("void f() { std::thread t([] {}); t.join(); }")


def test_cpp_stream_create_is_rejected():
    assert "side_stream" in cpp_rules("void f() { cudaStream_t s; cudaStreamCreate(&s); }")


def test_cpp_static_tensor_is_an_output_cache():
    assert "output_cache" in cpp_rules("static torch::Tensor cache;\n")


def test_cpp_tf32_math_mode_is_a_warning_only():
    src = "void f(cublasHandle_t h) { cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH); }"
    assert cpp_rules(src) == set()
    assert cpp_rules(src, WARN) == {"precision"}


def test_cpp_comments_and_string_literals_are_ignored():
    src = ('// at::matmul(a, b) was too slow\n/* at::matmul(a,\n   b) */\n'
           'const char* msg = "at::matmul(a, b) is not used";\nvoid f() {}\n')
    assert check_cpp(src, "k.cu") == []


def test_cpp_finding_line_numbers_survive_comment_stripping():
    src = "/* a\n   block */\n// line\nauto y = at::mm(a, b);\n"
    assert [f.line for f in check_cpp(src, "k.cu")] == [4]


# ----------------------------------------------------------------------------- gaps found by review, now closed

@pytest.mark.parametrize("src", [
    'const char* url = "http://example.com"; torch::Tensor f(torch::Tensor a) { return at::mm(a, a); }',
    'const char* open = "/*";\ntorch::Tensor f(torch::Tensor a) { return at::mm(a, a); }\nconst char* close = "*/";\n',
], ids=["line_comment_in_string", "block_comment_in_string"])
def test_cpp_comment_marker_inside_a_string_does_not_hide_code(src):
    assert "torch_compute" in cpp_rules(src)


def test_torch_function_stored_on_self_and_called_in_forward_is_rejected():
    assert "torch_compute" in rules(py(model("return self.act(x)", init="self.act = torch.sigmoid")))


def test_torch_compute_in_a_helper_class_built_in_forward_is_rejected():
    src = """
    class _Fallback:
        def __init__(self, t):
            self.out = torch.sigmoid(t) * t

    class ModelNew(nn.Module):
        def forward(self, x):
            return _Fallback(x).out
    """
    assert "torch_compute" in rules(py(src))


@pytest.mark.parametrize("body", [
    model("return getattr(torch, 'sigmoid')(x)"),
    "act = torch.sigmoid\n\n" + model("return act(x)"),
], ids=["getattr_constant", "module_alias"])
def test_torch_function_reached_indirectly_in_forward_is_rejected(body):
    assert "torch_compute" in rules(py(body))


# ----------------------------------------------------------------------------- as a Verdict, without a GPU

def test_static_rejection_becomes_a_verdict_without_a_gpu(tmp_path):
    v = evaluate(load_task(EXAMPLES / "swish" / "task.py", validate=False),
                 load_solution(SOLUTIONS / "cheat_thread"), SandboxConfig(cache_dir=tmp_path))
    assert v.verdict == "rejected" and v.reward == -1
    assert "threads" in v.flags
    assert any(f["rule"] == "threads" for f in v.static_findings)


@pytest.mark.skipif(HAS_CUDA, reason="checks the behaviour on a host without a GPU")
def test_honest_solution_without_a_gpu_raises_no_gpu_error(tmp_path):
    from cuda_agent.sandbox import NoGpuError
    from cuda_agent.sandbox.gpu import list_gpus

    if list_gpus():
        pytest.skip("nvidia-smi lists a GPU here")
    with pytest.raises(NoGpuError, match="no CUDA GPU"):
        evaluate(load_task(EXAMPLES / "swish" / "task.py", validate=False),
                 load_solution(EXAMPLES / "swish" / "solution"), SandboxConfig(cache_dir=tmp_path))


def test_host_round_trip_in_forward_is_rejected():
    src = (
        "import torch\nimport torch.nn as nn\n"
        "class ModelNew(nn.Module):\n"
        "    def forward(self, x):\n"
        "        y = x.cpu().numpy()\n"
        "        return torch.from_numpy(y).cuda()\n"
    )
    findings = rejecting(check_python(src, "model_new.py"))
    assert any(f.rule == "torch_compute" and ".cpu()" in f.message for f in findings)
    assert any(".numpy()" in f.message for f in findings)


def test_device_copy_is_seen_by_the_dispatch_guard():
    import torch

    from cuda_agent.sandbox.guards import TorchOpGuard

    x = torch.ones(4)
    with TorchOpGuard() as g:
        x.to("meta")
    assert any("between devices" in v for v in g.violations), g.violations
    with TorchOpGuard() as g2:
        x.to(torch.float32).contiguous().view(2, 2)
    assert not g2.violations, g2.violations


def test_thread_starts_are_counted_even_when_the_thread_has_ended():
    """A forward that starts a short-lived thread is seen (active_count() after the call misses it),
    through every way of starting one; undoing the counter shows in the integrity snapshot."""
    import _thread
    import concurrent.futures
    import threading
    import time

    from cuda_agent.sandbox import guards

    starts = guards.count_thread_starts()
    snap = guards.integrity_snapshot()
    before = starts()
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()
    assert starts() == before + 1
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        ex.submit(lambda: 1).result()
    _thread.start_new_thread(lambda: None, ())
    time.sleep(0.05)
    assert starts() == before + 3
    assert guards.integrity_diff(snap, guards.integrity_snapshot()) == []
    saved = _thread.start_new_thread
    try:
        _thread.start_new_thread = lambda *a: None  # a candidate undoing the counter
        assert "_thread.start_new_thread" in guards.integrity_diff(snap, guards.integrity_snapshot())
    finally:
        _thread.start_new_thread = saved


def test_tensor_subclass_outputs_are_not_sent_as_data():
    """A lazy tensor subclass would make the reply unreadable (weights_only) and look like a crash;
    the worker shares a placeholder instead and the trial's lazy_output flag rejects it."""
    import io

    import torch

    from cuda_agent.sandbox.share import export_tree, open_tree

    class Lazy(torch.Tensor):
        pass

    out = export_tree((torch.ones(2).as_subclass(Lazy), torch.zeros(3)))
    buf = io.BytesIO()
    torch.save({"output": out}, buf)
    buf.seek(0)
    back = open_tree(torch.load(buf, weights_only=True)["output"])
    assert isinstance(back, tuple) and isinstance(back[0], str) and "Lazy" in back[0]
    assert torch.equal(back[1], torch.zeros(3))


def test_a_finding_names_the_line_of_the_offending_code():
    """HEADER is 5 lines; the class starts at line 6, forward's body at line 12 (mutation testing found no
    test reading a Python finding's line)."""
    findings = [f for f in py(model("y = x\nreturn torch.relu(y)")) if f.rule == "torch_compute"]
    assert [f.line for f in findings] == [13], [(f.line, f.message) for f in findings]
    findings = [f for f in py("from torch import _C\n" + model("return x")) if f.rule == "private_torch"]
    assert [f.line for f in findings] == [6] and "torch._C" in findings[0].message


# ----------------------------------------------------------------------------- pinned by mutation testing (issue 21)
# Each test below failed to exist when benchmarks/mutation.py let a small bug in static.py through: a finding's
# line, the thing its message names (the agent reads it to fix its code), or a pattern one branch alone decides.

def at(findings, rule: str) -> list[tuple[int, str]]:
    """(line, message) of every finding of one rule."""
    return [(f.line, f.message) for f in findings if f.rule == rule]


@pytest.mark.parametrize("call,flagged", [("getattr(torch, name)", True), ("getattr(torch.nn.functional, name)", True),
                                          ("getattr(self, name)", False), ("getattr(x, name)", False),
                                          ("getattr(torch, 'float32')", False)])
def test_getattr_with_a_computed_name_is_a_monkey_patch_only_on_a_module(call, flagged):
    found = py(model(f"name = 'sig' + 'moid'\nf = {call}\nreturn cuda_ext.f(x)"))
    assert at(found, "monkey_patch") == ([(13, "getattr on a module with a computed name")] if flagged else []), found


@pytest.mark.parametrize("stmt,flagged", [("from .model import Model", True), ("from . import model", True),
                                          ("from .reference.utils import helper", True),
                                          ("from .helpers import helper", False), ("from . import helpers", False)])
def test_a_relative_import_of_the_reference_is_delegation(stmt, flagged):
    found = py(stmt + "\n" + model("return cuda_ext.f(x)"))
    assert at(found, "delegates_to_reference") == ([(6, "imports the reference module")] if flagged else [])
    assert rules(found) == ({"delegates_to_reference"} if flagged else set())


@pytest.mark.parametrize("deco,rule,named", [
    ("@functools.lru_cache(maxsize=None)", "output_cache", "@functools.lru_cache caches"),
    ("@lru_cache", "output_cache", "@functools.lru_cache caches"),
    ("@functools.cache", "output_cache", "@functools.cache caches"),
    ("@functools.cached_property", "output_cache", "@functools.cached_property caches"),
    ("@torch.compile", "torch_compute", "@torch.compile: torch compilers"),
    ("@torch.jit.script", "torch_compute", "@torch.jit.script: torch compilers"),
    ("@functools.wraps(cuda_ext.f)", None, None),
    ("@cache", None, None),  # the file's own decorator that happens to be called cache
])
def test_a_decorator_that_caches_or_compiles_is_flagged_at_its_line(deco, rule, named):
    src = ("import functools\nfrom functools import lru_cache\n\ndef cache(f):\n    return f\n\n"
           f"{deco}\ndef helper(t):\n    return cuda_ext.f(t)\n\n" + model("return helper(x)"))
    found = py(src)
    if rule is None:
        assert rejecting(found) == [], found
    else:
        assert [(line, m.split("(")[0][:len(named)]) for line, m in at(found, rule)] == [(12, named)], found


def test_torch_decorators_are_allowed_in_calibrate_mode():
    src = HEADER + "@torch.compile\ndef helper(t):\n    return t\n\n" + model("return helper(x)")
    assert rules(check_python(src, "model.py")) == {"torch_compute"}
    assert rules(check_python(src, "model.py", calibrate=True)) == set()


def test_a_property_setter_is_not_mistaken_for_a_module_decorator():
    src = """
    class ModelNew(nn.Module):
        @property
        def scale(self):
            return 2.0

        @scale.setter
        def scale(self, v):
            pass

        def forward(self, x):
            return cuda_ext.f(x, self.scale)
    """
    assert py(src) == []


def test_a_lambda_is_named_in_the_finding():
    found = py(model("return self.fn(x)", init="self.fn = lambda t: torch.sigmoid(t) * t"))
    assert [(line, m.split(";")[0]) for line, m in at(found, "torch_compute")] == \
        [(9, "calls torch.sigmoid in <lambda>()")], found


def test_the_function_holding_torch_compute_is_named_in_the_finding():
    src = model("return self._impl(x)") + "\n    def _impl(self, x):\n        return torch.sigmoid(x)\n"
    [(line, message)] = at(py(src), "torch_compute")
    assert line == 15 and message.startswith("calls torch.sigmoid in _impl(); the work must be done by your CUDA")
    assert "allowed only in initialization code: __init__, prepare and what only they call" in message


def test_a_fallback_names_its_line_and_the_except_branch():
    found = py(model("try:\n    return cuda_ext.f(x)\nexcept RuntimeError:\n    return F.silu(x)"))
    assert at(found, "fallback") == [(15, "calls torch.nn.functional.silu in an except branch: falling back to "
                                          "torch compute")]


def test_the_matmul_operator_is_named_at_its_line():
    found = py(model("y = x\nreturn y @ y"))
    assert [(line, m.split(" in ")[0]) for line, m in at(found, "torch_compute")] == [(13, "uses the @ operator")]


def test_global_and_nonlocal_state_written_in_a_call_is_a_warning():
    found = py("A = B = None\n" + model("global A, B\nA = x\ndef g():\n    nonlocal x\n    x = 1\nreturn cuda_ext.f(x)"))
    state = [(f.line, f.severity, f.message.split(":")[0]) for f in found if f.rule == "state_across_calls"]
    assert state == [(13, "warn", "global A, B"), (16, "warn", "global x")], found  # nonlocal reads as global
    assert found[0].message == "global A, B: module state written from a function can carry results across calls"
    assert py("global A\nA = 1\n" + model("return cuda_ext.f(x)")) == []  # module level: nothing is called yet


@pytest.mark.parametrize("call,writes", [("open('log.txt', 'w')", True), ("open('log.txt', mode='a')", True),
                                         ("open('log.txt', 'r+')", True),
                                         ("open('log.txt', encoding='utf-8', mode='x')", True),
                                         ("open('log.txt')", False), ("open('log.txt', 'r')", False),
                                         ("open('log.txt', mode='r', encoding='ascii')", False),
                                         ("open('log.txt', mode)", False),
                                         ("open('log.txt', 'rX')", False)])  # an invalid mode: open raises
def test_opening_a_file_for_writing_is_a_monkey_patch(call, writes):
    found = py(model(f"mode = 'r'\nf = {call}\nreturn cuda_ext.f(x)"))
    assert at(found, "monkey_patch") == ([(13, "opens a file for writing")] if writes else []), found


def test_a_workspace_without_model_new_is_told_what_to_add(tmp_path):
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "k.cu").write_text("__global__ void k() {}\n")
    [f] = check_solution(load_solution(tmp_path))
    assert (f.rule, f.file, f.line, f.severity) == ("layout", "model_new.py", 0, REJECT)
    assert f.message == "no model_new.py: a workspace solution needs model_new.py defining ModelNew"


def test_a_source_file_too_large_to_read_is_a_layout_finding_naming_it(tmp_path):
    from cuda_agent.sandbox.solution import MAX_SOURCE_BYTES

    (tmp_path / "model_new.py").write_text("import threading\n" + HEADER + model("return cuda_ext.f(x)"))
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "big.cu").write_text("//" + " " * MAX_SOURCE_BYTES + "\n")
    found = check_solution(load_solution(tmp_path))  # the files after the unreadable one are still checked
    assert [(f.rule, f.file, f.line, f.severity) for f in found] == [("layout", "kernels/big.cu", 0, REJECT),
                                                                     ("threads", "model_new.py", 1, REJECT)]
    assert found[0].message.startswith("cannot read: ") and f"larger than {MAX_SOURCE_BYTES} bytes" in found[0].message


def test_check_solution_passes_its_rule_set_and_calibrate_mode_to_every_file(tmp_path):
    (tmp_path / "model_new.py").write_text(HEADER + model("return cuda_ext.f(torch.sigmoid(x))"))
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "k.cu").write_text("torch::Tensor f(torch::Tensor a) {\n  return at::matmul(a, a);\n}\n")
    sol = load_solution(tmp_path)
    assert sorted((f.file, f.line) for f in check_solution(sol)) == [("kernels/k.cu", 2), ("model_new.py", 12)]
    assert check_solution(sol, rules="kernelbench") == []
    assert [(f.file, f.line) for f in check_solution(sol, calibrate=True)] == [("kernels/k.cu", 2)]


def test_a_model_file_without_model_new_keeps_its_tampering_findings_and_names_itself(tmp_path):
    (tmp_path / "model_new.py").write_text("import threading\nimport torch\n\nclass Fast(torch.nn.Module):\n"
                                           "    def forward(self, x):\n        return torch.relu(x)\n")
    found = check_solution(load_solution(tmp_path))
    assert [(f.rule, f.file, f.line) for f in found] == [("threads", "model_new.py", 1),
                                                         ("no_model_new", "model_new.py", 0)]
    assert found[1].message == ("defines no ModelNew: the harness instantiates ModelNew, so the file needs "
                                "class ModelNew(nn.Module) (or ModelNew = YourClass)")


def test_model_new_imported_from_a_sibling_file_is_bound(tmp_path):
    (tmp_path / "impl.py").write_text(HEADER + model("return cuda_ext.f(x)"))
    (tmp_path / "model_new.py").write_text("from impl import ModelNew\n")
    assert check_solution(load_solution(tmp_path)) == []


# Every finding (rule, line, message) of one statement in forward. The message is what the agent reads to fix its
# code, so it is pinned whole. HEADER + "import os\nimport sys\n" puts forward's first statement on line 14.
TAIL = ("; the work must be done by your CUDA kernels (under the cuda-agent rules torch compute is allowed only in "
        "initialization code: __init__, prepare and what only they call)")
FORWARD_FINDINGS = [
    ('m = sys.modules', [('monkey_patch', 14, 'uses sys.modules')]),
    ('sys.settrace(None)', [('monkey_patch', 14, 'uses sys.settrace')]),
    ('v = sys.version', []),
    ("os.system('ls')", [('forbidden_import', 14, 'uses os.system')]),
    ('os.fork()', [('threads', 14, 'uses os.fork')]),
    ("os.spawnv(0, 'a', [])", [('threads', 14, 'uses os.spawnv')]),
    ('e = os.environ', [('forbidden_import', 14, 'uses os.environ')]),
    ("p = os.path.join('a', 'b')", []),
    ('f = torch._C._nn.gelu', [('private_torch', 14, 'uses torch internals (torch._C._nn.gelu)'), ('private_torch', 14, 'uses torch internals (torch._C._nn)'), ('private_torch', 14, 'uses torch internals (torch._C)')]),
    ('v = torch.__version__', []),
    ('s = torch.cuda.current_stream()', []),
    ('with torch.cuda.stream(s0):\n    pass', [('side_stream', 14, 'uses torch.cuda.stream: all work must run on the current stream')]),
    ('y = torch.ops.aten.relu(x)', [('torch_compute', 14, 'calls torch operators through torch.ops.aten.relu'), ('torch_compute', 14, 'calls torch operators through torch.ops.aten')]),
    ('y = torch.ops.cuda_ext.f(x)', []),
    ('t = torch.backends.cuda.matmul.allow_tf32', [('precision', 14, 'reads or changes torch.backends.cuda.matmul.allow_tf32; precision is set by the harness')]),
    ('torch.backends.cuda.matmul.allow_tf32 = True', [('monkey_patch', 14, 'assigns to torch.backends.cuda.matmul.allow_tf32: patching a module is not allowed')]),
    ('t = torch.backends.cudnn.flags', [('precision', 14, 'reads or changes torch.backends.cudnn.flags; precision is set by the harness')]),
    ('d = x.__dict__', [('monkey_patch', 14, 'touches .__dict__ (reaching into objects or frames)')]),
    ('b = __builtins__', [('monkey_patch', 14, 'touches __builtins__')]),
    ("c = compile('1', 'f', 'eval')", [('monkey_patch', 14, 'calls compile(): dynamic code is not allowed')]),
    ('g = globals()', [('monkey_patch', 14, 'calls globals(): dynamic code is not allowed')]),
    ("delattr(self, 'a')", [('monkey_patch', 14, 'calls delattr(): dynamic code is not allowed')]),
    ("setattr(x, 'a', 1)", [('monkey_patch', 14, 'setattr on something other than self')]),
    ('y = torch.compile(f)', [('torch_compute', 14, 'torch.compile: compiling with torch is not a CUDA solution')]),
    ('y = torch.jit.trace(f, x)', [('torch_compute', 14, 'torch.jit.trace: compiling with torch is not a CUDA solution')]),
    ('g = torch.cuda.CUDAGraph()', []),
    ('torch.cuda.synchronize()', []),
    ("m = torch.utils.cpp_extension.load_inline('a', 'b')", []),
    ('p = torch.nn.Parameter(x)', []),
    ('nn.init.zeros_(x)', []),
    ('y = torch.linalg.norm(x)', [('torch_compute', 14, 'calls torch.linalg.norm in forward()' + TAIL)]),
    ('y = torch.fft.fft(x)', [('torch_compute', 14, 'calls torch.fft.fft in forward()' + TAIL)]),
    ('y = torch.special.expit(x)', [('torch_compute', 14, 'calls torch.special.expit in forward()' + TAIL)]),
    ('y = torch.empty_like(x)', []),
    ('l = nn.Linear(3, 4)', [('torch_compute', 14, 'builds a torch layer torch.nn.Linear outside __init__/prepare')]),
    ('act = F.relu\nreturn act(x)', [('torch_compute', 15, 'calls torch.nn.functional.relu in forward()' + TAIL)]),
    ('self.cache = x', [('state_across_calls', 14, 'stores self.cache during a call; results must not be carried across calls (the harness checks this at run time)')]),
    ('self.cache[0] = x', [('state_across_calls', 14, 'writes into self.cache[...] during a call (a cache)')]),
    ('y = x.float()', [('torch_compute', 14, 'calls the tensor method .float() in forward()' + TAIL)]),
    ('y = x.cpu()', [('torch_compute', 14, 'calls .cpu() in forward(): moving data to the host to compute there is not a CUDA solution')]),
    ('x[0] += 1', [('input_mutation', 14, 'writes into the input x[...]')]),
    ('self.count += 1', [('state_across_calls', 14, 'stores self.count during a call; results must not be carried across calls (the harness checks this at run time)')]),
    ('out: torch.Tensor = torch.empty_like(x)', []),
    ('n: int = x.numel()', []),
    ('x[0], z = 0, 1', [('input_mutation', 14, 'writes into the input x[...]')]),
    ('torch.relu, z = (lambda t: t), 1', [('monkey_patch', 14, 'assigns to torch.relu: patching a module is not allowed')]),
    ('g = torch.jit.script(f)', [('torch_compute', 14, 'torch.jit.script: compiling with torch is not a CUDA solution')]),
    ('out = torch.empty_like(x)\nout[0] = 1', []),
    ('m = nn.ModuleList()', []),
    ('md = nn.ModuleDict()', []),
    ('pl = nn.ParameterList()', []),
    ('pd = nn.ParameterDict()', []),
    ('i = nn.Identity()', []),
    ('b = nn.Module()', []),
    ('y = torch.sparse.mm(x, y)', [('torch_compute', 14, 'calls torch.sparse.mm in forward()' + TAIL)]),
    ('y = torch.nested.nested_tensor([x])', [('torch_compute', 14, 'calls torch.nested.nested_tensor in forward()' + TAIL)]),
    ('d = torch.distributions.Normal(0, 1)', [('torch_compute', 14, 'calls torch.distributions.Normal in forward()' + TAIL)]),
    ('w = torch.signal.windows.hann(8)', [('torch_compute', 14, 'calls torch.signal.windows.hann in forward()' + TAIL)]),
    ('y = x.float()\nz = x.float()', [('torch_compute', 14, 'calls the tensor method .float() in forward()' + TAIL), ('torch_compute', 15, 'calls the tensor method .float() in forward()' + TAIL)]),
    ('y = torch.ops.prims.add(x, x)', [('torch_compute', 14, 'calls torch operators through torch.ops.prims.add'), ('torch_compute', 14, 'calls torch operators through torch.ops.prims')]),
    ('y = torch.ops.quantized.add(x, x, 1.0, 0)', [('torch_compute', 14, 'calls torch operators through torch.ops.quantized.add'), ('torch_compute', 14, 'calls torch operators through torch.ops.quantized')]),
    ('y = torch.ops.inductor.resize_storage_bytes_(x, 0)', [('torch_compute', 14, 'calls torch operators through torch.ops.inductor.resize_storage_bytes_'), ('torch_compute', 14, 'calls torch operators through torch.ops.inductor')]),
    ('o = torch.ops', []),
    ('t = torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction', [('precision', 14, 'reads or changes torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction; precision is set by the harness')]),
    ('t = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction', [('precision', 14, 'reads or changes torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction; precision is set by the harness')]),
    ('t = torch.backends.cudnn.enabled', []),
    ('s = torch.cuda.Stream()', [('side_stream', 14, 'uses torch.cuda.Stream: all work must run on the current stream')]),
    ('s = torch.cuda.ExternalStream(0)', [('side_stream', 14, 'uses torch.cuda.ExternalStream: all work must run on the current stream')]),
    ("y = getattr(torch, 'sigmoid')(x)", [('torch_compute', 14, 'calls torch.sigmoid in forward()' + TAIL)]),
    ("y = getattr(F, 'relu')(x)", [('torch_compute', 14, 'calls torch.nn.functional.relu in forward()' + TAIL)]),
    ("setattr(self, 'scale', 2.0)", []),
    ("e = eval('1')", [('monkey_patch', 14, 'calls eval(): dynamic code is not allowed')]),
    ('l = locals()', [('monkey_patch', 14, 'calls locals(): dynamic code is not allowed')]),
    ('v = vars(x)', [('monkey_patch', 14, 'calls vars(): dynamic code is not allowed')]),
    ('breakpoint()', [('monkey_patch', 14, 'calls breakpoint(): dynamic code is not allowed')]),
    ('f = getattr(torch)', [('monkey_patch', 14, 'getattr on a module with a computed name')]),
    ('y = x.float() + x.float()', [('torch_compute', 14, 'calls the tensor method .float() in forward()' + TAIL)]),
    ('y = F(x)', [('torch_compute', 14, 'calls torch.nn.functional in forward()' + TAIL)]),
    ('y = torch.linalg(x)', [('torch_compute', 14, 'calls torch.linalg in forward()' + TAIL)]),
    ('s = torch.nn.Stream()', [('torch_compute', 14, 'builds a torch layer torch.nn.Stream outside __init__/prepare')]),
]


@pytest.mark.parametrize("stmt,expected", FORWARD_FINDINGS, ids=[s.split("\n")[-1][:40] for s, _ in FORWARD_FINDINGS])
def test_every_finding_of_a_statement_in_forward(stmt, expected):
    found = py("import os\nimport sys\n" + model(stmt + "\nreturn cuda_ext.f(x)"))
    assert [(f.rule, f.line, f.message) for f in found] == expected


# Every finding of a whole file (after HEADER, so its first line is line 6); a fourth item is a severity other than reject.
FILE_FINDINGS = [
    (
        'class Lazy(torch.Tensor):\n'
        '    pass\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return Lazy(x)\n',
     [('lazy_tensor', 6, 'class Lazy subclasses torch.Tensor (tensor subclasses can defer or fake work)')]),
    (
        'from torch import Tensor\n'
        'class Lazy(Tensor):\n'
        '    def __torch_function__(self, *a):\n'
        '        return 1\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return Lazy(x)\n',
     [('lazy_tensor', 7, 'class Lazy subclasses torch.Tensor (tensor subclasses can defer or fake work)'), ('lazy_tensor', 8, 'defines __torch_function__: intercepting torch dispatch is not allowed')]),
    (
        'from model import Model\n'
        'class ModelNew(Model):\n'
        '    pass\n',
     [('delegates_to_reference', 6, "imports the reference module 'model'"), ('delegates_to_reference', 6, 'imports the reference Model'), ('delegates_to_reference', 7, 'class ModelNew subclasses the reference Model'), ('delegates_to_reference', 7, 'refers to the reference Model')]),
    (
        'import model\n'
        'class ModelNew(model.Model):\n'
        '    pass\n',
     [('delegates_to_reference', 6, "imports the reference module 'model'"), ('delegates_to_reference', 7, 'class ModelNew subclasses the reference Model')]),
    (
        'class ModelNew(nn.Module):\n'
        '    def __getattr__(self, name):\n'
        '        return 1\n'
        '    def __call__(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n',
     [('module_override', 7, 'overrides __getattr__ on a module; ModelNew is called through nn.Module.__call__ -> forward', 'warn'), ('module_override', 9, 'overrides __call__ on a module; ModelNew is called through nn.Module.__call__ -> forward', 'warn')]),
    (
        'class Base(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = torch.randn(3)\n'
        '\n'
        'class ModelNew(Base):\n'
        '    def prepare(self):\n'
        '        self.v = torch.sigmoid(self.w)\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.v)\n',
     []),
    (
        'class Base(torch.nn.Module):\n'
        '    pass\n'
        '\n'
        'class ModelNew(Base):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.v = torch.sigmoid(torch.ones(3))\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.v)\n',
     []),
    (
        'class Plain:\n'
        '    def __init__(self):\n'
        '        self.v = torch.sigmoid(torch.ones(3))\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, Plain().v)\n',
     [('state_across_calls', 8, 'stores self.v during a call; results must not be carried across calls (the harness checks this at run time)', 'warn'), ('torch_compute', 8, 'calls torch.sigmoid in __init__()' + TAIL), ('torch_compute', 12, 'constructs Plain, whose __init__/prepare runs torch operators, in forward()' + TAIL)]),
    (
        'class Holder(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.conv = nn.Conv2d(3, 3, 1)\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.h = Holder()\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n',
     []),
    (
        'class Holder(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.v = torch.sigmoid(torch.ones(3))\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, Holder().v)\n',
     [('torch_compute', 13, 'constructs Holder, whose __init__/prepare runs torch operators, in forward()' + TAIL)]),
    (
        'class ModelNew(nn.Module):\n'
        '    class Inner(nn.Module):\n'
        '        def __init__(self):\n'
        '            super().__init__()\n'
        '            self.v = torch.ones(3).sigmoid()\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.inner = ModelNew.Inner()\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n',
     []),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.skip = nn.Identity()\n'
        '        self.w = nn.Parameter(torch.ones(3))\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(self.skip(x))\n',
     []),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.act = nn.ReLU()\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(self.act(x))\n',
     [('torch_compute', 11, 'calls the torch layer self.act in forward()' + TAIL)]),
    (
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        y = Model\n'
        '        return cuda_ext.f(x)\n',
     [('delegates_to_reference', 8, 'refers to the reference Model')]),
    (
        'import types\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        ref = types.SimpleNamespace()\n'
        '        ref.act = torch.sigmoid\n'
        '        self.acts = {}\n'
        '        self.acts["a"] = F.relu\n'
        '        self.act = cuda_ext.f\n'
        '    def forward(self, x):\n'
        '        return self.act(x)\n',
     []),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.launch = cuda_ext.kernels.Swish()\n'
        '    def forward(self, x):\n'
        '        return self.launch(x)\n',
     []),
    (
        'class Holder(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.conv = nn.Conv2d(3, 3, 1)\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, Holder().conv.weight)\n',
     []),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.act = torch.sigmoid\n'
        '        self.conv = nn.Conv2d(3, 3, 1)\n'
        '\n'
        '    def forward(self, x):\n'
        '        y = self.act(x)\n'
        '        return self.conv.forward(y)\n',
     [('torch_compute', 13, 'calls torch.sigmoid in forward()' + TAIL), ('torch_compute', 14, 'calls the torch layer self.conv.forward in forward()' + TAIL)]),
    (
        'class Inner(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.inner = Inner()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return self.inner.forward(x)\n',
     []),
    (
        'from torch.nn.modules.module import Module\n'
        '\n'
        'class ModelNew(Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = torch.randn(3).sigmoid()\n'
        '        self.v = torch.ops.aten.relu(self.w)\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.w)\n',
     []),
    (
        'import torch as T\n'
        '\n'
        'class ModelNew(T.nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = T.randn(3).sigmoid()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.w)\n',
     []),
    (
        'from torch.nn import Module\n'
        '\n'
        'class Base(Module):\n'
        '    pass\n'
        '\n'
        'class ModelNew(Base):\n'
        '    def prepare(self):\n'
        '        self.w = torch.randn(3).sigmoid()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.w)\n',
     []),
    (
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return forward(x, torch.empty_like(x))\n'
        '\n'
        'def forward(x, out):\n'
        '    out.zero_()\n'
        '    return cuda_ext.f(x, out)\n',
     []),
    (
        'class Lazy:\n'
        '    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):\n'
        '        return func(*args)\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, Lazy)\n',
     [('lazy_tensor', 7, 'defines __torch_dispatch__: intercepting torch dispatch is not allowed')]),
    (
        'class ModelNew(nn.Module):\n'
        '    def __getattribute__(self, name):\n'
        '        return super().__getattribute__(name)\n'
        '\n'
        '    def __setattr__(self, name, value):\n'
        '        super().__setattr__(name, value)\n'
        '\n'
        '    def forward(self, x):\n'
        '        n = x.__len__()\n'
        '        return cuda_ext.f(x)\n',
     [('module_override', 7, 'overrides __getattribute__ on a module; ModelNew is called through nn.Module.__call__ -> forward', 'warn'), ('monkey_patch', 8, 'touches .__getattribute__ (reaching into objects or frames)'), ('module_override', 10, 'overrides __setattr__ on a module; ModelNew is called through nn.Module.__call__ -> forward', 'warn')]),
    (
        'class ModelNew(Model):\n'
        '    pass\n',
     [('delegates_to_reference', 6, 'class ModelNew subclasses the reference Model'), ('delegates_to_reference', 6, 'refers to the reference Model')]),
    (
        'class Lazy(Tensor):\n'
        '    pass\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return Lazy(x)\n',
     [('lazy_tensor', 6, 'class Lazy subclasses torch.Tensor (tensor subclasses can defer or fake work)')]),
    (
        'from typing import Generic, TypeVar\n'
        '\n'
        'T = TypeVar("T")\n'
        '\n'
        'class Box(Generic[T]):\n'
        '    pass\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, Box())\n',
     []),
    (
        'from torch import _tensor\n'
        '\n'
        'class Lazy(_tensor.Tensor):\n'
        '    pass\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return Lazy(x)\n',
     [('private_torch', 6, 'imports torch._tensor: torch internals and compilers are off limits'), ('lazy_tensor', 8, 'class Lazy subclasses torch.Tensor (tensor subclasses can defer or fake work)'), ('private_torch', 8, 'uses torch internals (torch._tensor.Tensor)')]),
    (
        '@torch.jit.script\n'
        'class Helper:\n'
        '    pass\n'
        '\n'
        '@functools.total_ordering\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, Helper)\n',
     [('torch_compute', 6, '@torch.jit.script: torch compilers and decorators are not allowed')]),
    (
        'from torch.nn.modules.module import Module as TorchModule\n'
        'import torch.nn as layers\n'
        '\n'
        'class Base(nn.Module):\n'
        '    pass\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    class A(TorchModule):\n'
        '        def __init__(self):\n'
        '            super().__init__()\n'
        '            self.w = torch.ones(3).sigmoid()\n'
        '\n'
        '    class B(Base):\n'
        '        def __init__(self):\n'
        '            super().__init__()\n'
        '            self.w = torch.ones(3).sigmoid()\n'
        '\n'
        '    class C(layers.Module):\n'
        '        def __init__(self):\n'
        '            super().__init__()\n'
        '            self.w = torch.ones(3).sigmoid()\n'
        '\n'
        '    class D(A):\n'
        '        def __init__(self):\n'
        '            super().__init__()\n'
        '            self.w = torch.ones(3).sigmoid()\n'
        '\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.parts = [ModelNew.A(), ModelNew.B(), ModelNew.C(), ModelNew.D()]\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n',
     []),
    (
        'try:\n'
        '    class Late(nn.Module):\n'
        '        pass\n'
        'except ImportError:\n'
        '    Late = nn.Module\n'
        '\n'
        'class Other(nn.Module):\n'
        '    pass\n'
        '\n'
        'class ModelNew(Late):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = torch.ones(3).sigmoid()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.w)\n',
     []),
]


@pytest.mark.parametrize("src,expected", FILE_FINDINGS, ids=[f"file{i}" for i in range(len(FILE_FINDINGS))])
def test_every_finding_of_a_file(src, expected):
    found = py(src)
    assert [(f.rule, f.line, f.message, *([f.severity] if f.severity != REJECT else [])) for f in found] == expected


CPP_MIX = """#include <torch/extension.h>
auto s = at::cuda::getCurrentCUDAStream();
at::cuda::blas::dot<float>(h, n, a, 1, b, 1, r);
int blocks = at::ceil_div(n, 256);
at::zero_(out);
auto y = torch::nn::functional::relu(x);
at::mul_(a, b);
auto z = at::matmul(a, b);
auto w = a.relu() + a.size(0);
std::thread t(f);
"""


def test_every_finding_of_a_cpp_source_in_order_with_its_line():
    """CUDA utilities (a ::cuda:: namespace, even cuBLAS's dot), allowed names (zero_) and helpers that are no
    torch operator (ceil_div) pass, and the scan goes on after them; operators are found by their last name, an
    in-place variant by its base name."""
    found = check_cpp(CPP_MIX, "kernels/k.cu")
    assert [(f.rule, f.file, f.line, f.message) for f in found] == [
        ("threads", "kernels/k.cu", 10, "starts threads or processes (std::thread)"),
        ("torch_compute", "kernels/k.cu", 6, "calls the torch operator torch::nn::functional::relu() in C++; "
                                             "write the kernel instead"),
        ("torch_compute", "kernels/k.cu", 7, "calls the torch operator at::mul_() in C++; write the kernel instead"),
        ("torch_compute", "kernels/k.cu", 8, "calls the torch operator at::matmul() in C++; write the kernel instead"),
        ("torch_compute", "kernels/k.cu", 9, "calls .relu() on a tensor in C++; write the kernel instead"),
    ]
    assert [f.line for f in check_cpp(CPP_MIX, "k.cu", line_offset=10)] == [20, 16, 17, 18, 19]
    assert [f.rule for f in check_cpp(CPP_MIX, "k.cu", rules="kernelbench")] == ["threads"]


# What evaluation executes (reach.py): every finding of a file whose parts are reached, or not, in different ways.
JUDGED_FINDINGS = [
    (
        'class Fast(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        'def unused(x):\n'
        '    return torch.sigmoid(x)\n'
        '\n'
        'ModelNew: type = Fast\n',
     []),
    (
        'class Fast(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        'def unused(x):\n'
        '    return torch.sigmoid(x)\n'
        '\n'
        'try:\n'
        '    ModelNew = Fast\n'
        'except ImportError:\n'
        '    pass\n',
     []),
    (
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        'if "__main__" == __name__:\n'
        '    import threading\n',
     []),
    (
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        'if __name__ != "__main__":\n'
        '    import threading\n',
     [('threads', 11, 'imports threading (starts threads); not allowed in a solution')]),
    (
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        'if __name__ == "model_new":\n'
        '    import threading\n',
     [('threads', 11, 'imports threading (starts threads); not allowed in a solution')]),
    (
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return getattr(cuda_ext, "f")(x)\n'
        '\n'
        'def f(x):\n'
        '    return torch.sigmoid(x)\n',
     [('torch_compute', 11, 'calls torch.sigmoid in f()' + TAIL)]),
    (
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        '@cuda_ext.register\n'
        'def hook(x):\n'
        '    return torch.sigmoid(x)\n',
     [('torch_compute', 12, 'calls torch.sigmoid in hook()' + TAIL)]),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = make_w()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.w)\n'
        '\n'
        'def make_w(scale=torch.sigmoid(torch.ones(1))):\n'
        '    return helper() * scale\n'
        '\n'
        'def helper():\n'
        '    return torch.randn(3)\n',
     []),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = make_w()\n'
        '        self.g = lambda: make_w()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.w)\n'
        '\n'
        'def make_w():\n'
        '    return torch.randn(3)\n',
     [('torch_compute', 16, 'calls torch.randn in make_w()' + TAIL)]),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = make_w()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.w)\n'
        '\n'
        '@functools.wraps(cuda_ext.f)\n'
        'def make_w():\n'
        '    return torch.randn(3)\n',
     [('torch_compute', 16, 'calls torch.randn in make_w()' + TAIL)]),
    (
        'import functools\n'
        'class Base(nn.Module):\n'
        '    def go(self, x):\n'
        '        return torch.sigmoid(x)\n'
        '\n'
        'class Fast(Base):\n'
        '    def forward(self, x):\n'
        '        return self.go(x)\n'
        '\n'
        'ModelNew = Fast\n',
     [('torch_compute', 9, 'calls torch.sigmoid in go()' + TAIL)]),
    (
        'class Mixin:\n'
        '    def go(self, x):\n'
        '        return torch.sigmoid(x)\n'
        '\n'
        'class ModelNew(nn.Module, Mixin):\n'
        '    def forward(self, x):\n'
        '        return self.go(x)\n',
     [('torch_compute', 8, 'calls torch.sigmoid in go()' + TAIL)]),
    (
        'class Unused(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return torch.sigmoid(x)\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n',
     []),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = self.build()\n'
        '\n'
        '    def build(self):\n'
        '        return self.more()\n'
        '\n'
        '    def more(self):\n'
        '        return torch.randn(3)\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.w)\n',
     []),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = self.build()\n'
        '\n'
        '    def build(self):\n'
        '        return self.more()\n'
        '\n'
        '    def more(self):\n'
        '        return torch.randn(3)\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.build())\n',
     [('torch_compute', 15, 'calls torch.randn in more()' + TAIL)]),
    (
        'def helper(x):\n'
        '    return torch.sigmoid(x)\n'
        '\n'
        'W = helper(torch.ones(3))\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, W)\n',
     []),
    (
        'def helper(x):\n'
        '    return torch.sigmoid(x)\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, W)\n'
        '\n'
        'W = [helper][0](torch.ones(3))\n',
     [('torch_compute', 7, 'calls torch.sigmoid in helper()' + TAIL)]),
    (
        'from impl import Fast as ModelNew\n'
        '\n'
        'def unused(x):\n'
        '    return torch.sigmoid(x)\n',
     [('torch_compute', 9, 'calls torch.sigmoid in unused()' + TAIL)]),
    (
        'class Fast(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        'def unused(x):\n'
        '    return torch.sigmoid(x)\n'
        '\n'
        'ModelNew = cuda_ext.wrap(Fast)\n',
     [('torch_compute', 11, 'calls torch.sigmoid in unused()' + TAIL)]),
    (
        'if cuda_ext.ok:\n'
        '    class ModelNew(nn.Module):\n'
        '        def forward(self, x):\n'
        '            return cuda_ext.f(x)\n'
        '\n'
        'def unused(x):\n'
        '    return torch.sigmoid(x)\n',
     [('torch_compute', 12, 'calls torch.sigmoid in unused()' + TAIL)]),
    (
        'import contextlib\n'
        '\n'
        'class Fast(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        'def unused(x):\n'
        '    return torch.sigmoid(x)\n'
        '\n'
        'with contextlib.nullcontext():\n'
        '    ModelNew = Fast\n',
     []),
    (
        'class Fast(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        'def unused(x):\n'
        '    return torch.sigmoid(x)\n'
        '\n'
        'for _ in range(1):\n'
        '    pass\n'
        'else:\n'
        '    ModelNew = Fast\n',
     []),
    (
        'class Fast(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        'def unused(x):\n'
        '    return torch.sigmoid(x)\n'
        '\n'
        'while False:\n'
        '    pass\n'
        'try:\n'
        '    pass\n'
        'finally:\n'
        '    ModelNew = Fast\n',
     []),
    (
        'class Fast(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        'def unused(x):\n'
        '    return torch.sigmoid(x)\n'
        '\n'
        'try:\n'
        '    import fast_ext\n'
        'except ImportError:\n'
        '    ModelNew = Fast\n',
     []),
    (
        'class Fast(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n'
        '\n'
        'def unused(x):\n'
        '    return torch.sigmoid(x)\n'
        '\n'
        'if __name__ == "__main__":\n'
        '    ModelNew = Fast\n',
     [('torch_compute', 11, 'calls torch.sigmoid in unused()' + TAIL)]),
    (
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return run(x)\n'
        '\n'
        'async def run(x):\n'
        '    return torch.sigmoid(x)\n',
     [('torch_compute', 11, 'calls torch.sigmoid in run()' + TAIL)]),
    (
        'class Meta(type):\n'
        '    def __call__(cls, *a):\n'
        '        return torch.sigmoid(torch.ones(1))\n'
        '\n'
        'def register(c):\n'
        '    return c\n'
        '\n'
        '@register\n'
        'class ModelNew(nn.Module, metaclass=Meta):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n',
     [('module_override', 7, 'overrides __call__ on a module; ModelNew is called through nn.Module.__call__ -> forward', 'warn'), ('torch_compute', 8, 'calls torch.sigmoid in __call__()' + TAIL)]),
    (
        'def helper(t):\n'
        '    return torch.sigmoid(t)\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    act = staticmethod(helper)\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(self.act(x))\n'
        '\n'
        'class Other(nn.Module):\n'
        '    act = lambda t: unused(t)\n'
        '\n'
        'def unused(t):\n'
        '    return torch.sigmoid(t)\n',
     [('torch_compute', 7, 'calls torch.sigmoid in helper()' + TAIL)]),
    (
        'def make_w():\n'
        '    return torch.randn(3)\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    W = make_w()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.W)\n',
     []),
    (
        'def helper(t):\n'
        '    return torch.sigmoid(t)\n'
        '\n'
        'ACT = lambda t: helper(t)\n'
        '\n'
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x)\n',
     [('torch_compute', 7, 'calls torch.sigmoid in helper()' + TAIL)]),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = f()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, g())\n'
        '\n'
        'def g():\n'
        '    return f()\n'
        '\n'
        'def f():\n'
        '    return torch.randn(3)\n',
     [('torch_compute', 18, 'calls torch.randn in f()' + TAIL)]),
    (
        'class Base(nn.Module):\n'
        '    pass\n'
        '\n'
        'class ModelNew(Base):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = make_w()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.w)\n'
        '\n'
        'def make_w():\n'
        '    return torch.randn(3)\n',
     []),
    (
        'class ModelNew(torch.nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = make_w()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.w)\n'
        '\n'
        'def make_w():\n'
        '    return torch.randn(3)\n',
     []),
    (
        'class ModelNew:\n'
        '    def __init__(self):\n'
        '        self.w = make_w()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.w)\n'
        '\n'
        'def make_w():\n'
        '    return torch.randn(3)\n',
     [('state_across_calls', 8, 'stores self.w during a call; results must not be carried across calls (the harness checks this at run time)', 'warn'), ('torch_compute', 14, 'calls torch.randn in make_w()' + TAIL)]),
    (
        'from impl import Fast\n'
        '\n'
        'ModelNew = Fast\n'
        '\n'
        'def unused(x):\n'
        '    return torch.sigmoid(x)\n',
     [('torch_compute', 11, 'calls torch.sigmoid in unused()' + TAIL)]),
    (
        'class ModelNew(cuda_ext.BaseModule):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = make_w()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, self.w)\n'
        '\n'
        'def make_w():\n'
        '    return torch.randn(3)\n',
     []),
    (
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x, depth=0):\n'
        '        if depth == 0:\n'
        '            return self.forward(torch.sigmoid(x), 1)\n'
        '        return cuda_ext.f(x)\n',
     [('torch_compute', 9, 'calls torch.sigmoid in forward()' + TAIL)]),
    (
        'class ModelNew(nn.Module):\n'
        '    def forward(self, x):\n'
        '        return forward(torch.sigmoid(x))\n'
        '\n'
        'def forward(x):\n'
        '    return cuda_ext.f(x)\n',
     [('torch_compute', 8, 'calls torch.sigmoid in forward()' + TAIL)]),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.fn = getattr(self, "act")\n'
        '\n'
        '    def act(self, t):\n'
        '        return torch.sigmoid(t)\n'
        '\n'
        '    def forward(self, x):\n'
        '        return self.fn(x)\n',
     [('torch_compute', 12, 'calls torch.sigmoid in act()' + TAIL)]),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        self.w = f()\n'
        '\n'
        '    def forward(self, x):\n'
        '        return cuda_ext.f(x, g())\n'
        '\n'
        'def f():\n'
        '    return torch.randn(3)\n'
        '\n'
        'def g():\n'
        '    return f()\n',
     [('torch_compute', 15, 'calls torch.randn in f()' + TAIL)]),
]


@pytest.mark.parametrize("src,expected", JUDGED_FINDINGS, ids=[f"judged{i}" for i in range(len(JUDGED_FINDINGS))])
def test_every_finding_of_a_file_judged_by_what_evaluation_executes(src, expected):
    found = py(src)
    assert [(f.rule, f.line, f.message, *([f.severity] if f.severity != REJECT else [])) for f in found] == expected


# Every finding of the imports (line 6), at module level and in a function (a module-level line of its own).
IMPORT_FINDINGS = [
    (
        'import torch.testing\n',
     [('private_torch', 6, 'imports torch.testing: torch internals and compilers are off limits')]),
    (
        'import torch.library\n',
     [('private_torch', 6, 'imports torch.library: torch internals and compilers are off limits')]),
    (
        'import torch.fx\n',
     [('private_torch', 6, 'imports torch.fx: torch internals and compilers are off limits')]),
    (
        'from torch import fx\n',
     [('private_torch', 6, 'imports torch.fx: torch internals and compilers are off limits')]),
    (
        'import torch.profiler\n',
     [('private_torch', 6, 'imports torch.profiler: torch internals and compilers are off limits')]),
    (
        'import torch.autograd.profiler\n',
     [('private_torch', 6, 'imports torch.autograd.profiler: torch internals and compilers are off limits')]),
    (
        'import torch.utils._pytree\n',
     [('private_torch', 6, 'imports torch.utils._pytree: torch internals and compilers are off limits')]),
    (
        'import torch.compiler\n',
     [('private_torch', 6, 'imports torch.compiler: torch internals and compilers are off limits')]),
    (
        'import torch.jit\n',
     [('private_torch', 6, 'imports torch.jit: torch internals and compilers are off limits')]),
    (
        'import concurrent.futures\n',
     [('threads', 6, 'imports concurrent.futures (starts threads); not allowed in a solution')]),
    (
        'import asyncio\n',
     [('threads', 6, 'imports asyncio (runs tasks concurrently); not allowed in a solution')]),
    (
        'import sys.monitoring\n',
     [('forbidden_import', 6, 'imports sys.monitoring (tracing); not allowed in a solution')]),
    (
        'import numba.cuda\n',
     [('other_framework', 6, 'imports numba.cuda: solutions are CUDA C++; other kernel frameworks or kernel libraries are not allowed')]),
    (
        'from cuda_agent import sandbox\n',
     [('harness_access', 6, 'imports the evaluation harness')]),
    (
        'import reference as ref\n',
     [('delegates_to_reference', 6, "imports the reference module 'reference'")]),
    (
        'import torch.utils.cpp_extension\n',
     []),
    (
        'from torch.utils.cpp_extension import load_inline\n',
     []),
    (
        'import multiprocessing\n',
     [('threads', 6, 'imports multiprocessing (starts processes); not allowed in a solution')]),
    (
        'import pickle\n',
     [('forbidden_import', 6, 'imports pickle (serialization hooks); not allowed in a solution')]),
    (
        'from importlib import import_module\n',
     [('forbidden_import', 6, 'imports importlib (dynamic imports); not allowed in a solution')]),
    (
        'class ModelNew(nn.Module):\n'
        '    def __init__(self):\n'
        '        super().__init__()\n'
        '        import torch.fx\n'
        '        from torch import _C\n'
        '    def forward(self, x):\n'
        '        import torch.fx\n'
        '        return cuda_ext.f(x)\n',
     [('private_torch', 12, 'imports torch.fx: torch internals and compilers are off limits')]),
    (
        'from torch import fx\n',
     [('private_torch', 6, 'imports torch.fx: torch internals and compilers are off limits')]),
    (
        'from torch import library, nn\n',
     [('private_torch', 6, 'imports torch.library: torch internals and compilers are off limits')]),
    (
        'from torch.utils import _pytree\n',
     [('private_torch', 6, 'imports torch.utils._pytree: torch internals and compilers are off limits')]),
    (
        'from torch import _C\n',
     [('private_torch', 6, 'imports torch._C: torch internals and compilers are off limits')]),
    (
        'from torch.nn import functional as F2\n',
     []),
    (
        'from torch.utils.cpp_extension import load_inline\n',
     []),
    (
        'from torch import profiler as prof\n',
     [('private_torch', 6, 'imports torch.profiler: torch internals and compilers are off limits')]),
    (
        'from model import get_inputs\n',
     [('delegates_to_reference', 6, "imports the reference module 'model'")]),
    (
        'from reference.impl import Model\n',
     [('delegates_to_reference', 6, "imports the reference module 'reference.impl'"), ('delegates_to_reference', 6, 'imports the reference Model')]),
    (
        'from mylib import Model as Base\n',
     []),
]


@pytest.mark.parametrize("src,expected", IMPORT_FINDINGS, ids=[s.split("\n")[0][:40] for s, _ in IMPORT_FINDINGS])
def test_every_finding_of_an_import(src, expected):
    found = py(src)
    assert [(f.rule, f.line, f.message, *([f.severity] if f.severity != REJECT else [])) for f in found] == expected


def test_a_keyword_only_argument_without_a_default_is_judged_not_a_crash():
    """ast gives such an argument a None default; reach.py once walked it and raised."""
    src = "class ModelNew(nn.Module):\n    def forward(self, x, *, out):\n        out.zero_()\n" \
          "        return cuda_ext.f(x, out)\n\ndef get_inputs(*, n):\n    return [torch.rand(n)]\n"
    assert [(f.rule, f.line, f.message) for f in py(src)] == \
        [("input_mutation", 8, "calls out.zero_(): mutates an input in place")]


@pytest.mark.parametrize("call", ["torch.lu(x)", "torch.unique(x)"])
def test_torch_functions_named_beside_the_aten_ones_are_compute(call):
    """torch.lu and torch.unique are Python wrappers, not in torch._C._VariableFunctions: the list names them."""
    assert at(py(model(f"y = {call}\nreturn cuda_ext.f(x)")), "torch_compute") == \
        [(12, f"calls {call.split('(')[0]} in forward()" + TAIL)]


@pytest.mark.parametrize("method", ["float()", "half()", "bfloat16()", "double()", "int()", "long()", "short()",
                                    "bool()", "byte()", "char()", "type_as(y)", "__matmul__(y)", "apply_(abs)",
                                    "map_(y, max)"])
def test_conversions_and_python_side_tensor_methods_are_compute(method):
    """Casts run an ATen kernel; apply_/map_ run Python per element; none of them is named like a torch function."""
    name = method.split("(")[0]
    assert at(py(model(f"z = x.{method}\nreturn cuda_ext.f(x)")), "torch_compute") == \
        [(12, f"calls the tensor method .{name}() in forward()" + TAIL)]


# C++ in a Python string is scanned when it carries a C++ marker and is longer than 30 characters (line 6).
EMBEDDED_FINDINGS = [
    (
        'SRC = "__global__ void k(float* p) { std::thread t; }"\n',
     [('threads', 6, 'starts threads or processes (std::thread)')]),
    (
        'SRC = "#include <thread>\\nvoid k(float* p) { p[0] = 1; }"\n',
     [('threads', 6, 'starts threads or processes (#include <thread>)')]),
    (
        'SRC = "torch::Tensor f(torch::Tensor a) { std::thread t; return a; }"\n',
     [('threads', 6, 'starts threads or processes (std::thread)')]),
    (
        'SRC = "at::Tensor f(at::Tensor a) { std::thread t; return a; }"\n',
     [('threads', 6, 'starts threads or processes (std::thread)')]),
    (
        'SRC = "void launch(float* p) { k<<<1, 1>>>(p); std::thread t; }"\n',
     [('threads', 6, 'starts threads or processes (std::thread)')]),
    (
        'SRC = "PYBIND11_MODULE(m, mod) { std::thread t; mod.def(0); }"\n',
     [('threads', 6, 'starts threads or processes (std::thread)')]),
    (
        'SRC = "void k(float* p) { std::thread t(f); p[0] = 1; }"\n',
     []),
    (
        'SRC = "__global__ void k(){  fork(); }"\n',
     [('threads', 6, 'starts threads or processes (fork()')]),
    (
        'SRC = "__global__ void k(){ fork(); }"\n',
     []),
]


@pytest.mark.parametrize("src,expected", EMBEDDED_FINDINGS, ids=[f"embedded{i}" for i in range(len(EMBEDDED_FINDINGS))])
def test_every_finding_of_cpp_in_a_python_string(src, expected):
    found = py(src)
    assert [(f.rule, f.line, f.message) for f in found] == expected
    assert {f.file for f in found} <= {"model_new.py"}


def test_the_same_finding_in_two_files_is_kept_once_per_file_and_reads_as_file_line_rule(tmp_path):
    (tmp_path / "model_new.py").write_text(HEADER + model("return cuda_ext.f(x)"))
    (tmp_path / "kernels").mkdir()
    for name in ("a.cu", "b.cu"):
        (tmp_path / "kernels" / name).write_text("torch::Tensor f(torch::Tensor a) { return at::mm(a, a); }\n")
    found = check_solution(load_solution(tmp_path))
    assert [str(f) for f in found] == [
        f"kernels/{n}:1: [torch_compute] calls the torch operator at::mm() in C++; write the kernel instead"
        for n in ("a.cu", "b.cu")]
    assert found[0].to_dict() == {"rule": "torch_compute", "file": "kernels/a.cu", "line": 1, "severity": REJECT,
                                  "message": "calls the torch operator at::mm() in C++; write the kernel instead"}


def test_calibrate_mode_judges_the_reference_itself():
    """--calibrate times the task's own Model as the candidate: its name, torch ops and layers are not findings,
    but tampering still is."""
    src = HEADER + ("class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                    "        self.fc = nn.Linear(4, 4)\n\n    def forward(self, x):\n"
                    "        y = torch.ops.aten.relu(self.fc(x))\n        return F.gelu(y @ y.t()).float()\n\n"
                    "ModelNew = Model\nimport threading\n")
    assert rules(check_python(src, "model.py")) == {"torch_compute", "threads"}
    assert [(f.rule, f.line) for f in check_python(src, "model.py", calibrate=True)] == [("threads", 16)]


def test_a_syntax_error_names_the_parser_message():
    [f] = check_python("class ModelNew:\n    def forward(self, x)\n        return x\n", "model_new.py")
    assert (f.rule, f.file, f.line, f.severity) == ("syntax", "model_new.py", 2, REJECT)
    assert f.message.startswith("syntax error: ") and "expected ':'" in f.message


def test_import_torch_nn_alone_binds_torch():
    """``import torch.nn`` binds the name torch: torch.* calls resolve, torch.nn.Module is a module base, and the
    file's own class whose __init__ runs torch is seen when forward builds it."""
    src = ("import torch.nn\nimport cuda_ext\n\n\nclass Holder:\n    def __init__(self):\n"
           "        self.w = torch.randn(3)\n\n\nclass ModelNew(torch.nn.Module):\n    def __init__(self):\n"
           "        super().__init__()\n        self.w = torch.randn(3)\n\n    def forward(self, x):\n"
           "        return cuda_ext.f(torch.sigmoid(x), Holder().w)\n")
    found = [(f.rule, f.line, f.message.split(";")[0].split(",")[0]) for f in check_python(src, "model_new.py")]
    assert found == [("state_across_calls", 7, "stores self.w during a call"),
                     ("torch_compute", 7, "calls torch.randn in __init__()"),
                     ("torch_compute", 16, "calls torch.sigmoid in forward()"),
                     ("torch_compute", 16, "constructs Holder")]


def test_a_null_byte_is_a_syntax_finding_at_the_parsers_line_or_0():
    """Some SyntaxErrors carry no line (a null byte, on Python 3.11): the finding then reads line 0, never a real
    line it does not know."""
    import ast

    try:
        ast.parse("x = 1\x00")
    except SyntaxError as e:
        line = e.lineno or 0
    [f] = check_python("x = 1\x00", "model_new.py")
    assert (f.rule, f.line) == ("syntax", line) and f.message.startswith("syntax error: ")


def test_a_nested_module_class_whose_nn_comes_from_a_sibling_file_keeps_its_init_as_initialization_code():
    """``from .compat import nn`` resolves to compat.nn.Module, which ends in nn.Module: the nested class (outside
    reach's top-level analysis) is an nn.Module class, so torch in its __init__ is initialization code."""
    src = ("import torch\nimport cuda_ext\nfrom .compat import nn\n\n\nclass ModelNew(nn.Module):\n"
           "    class Inner(nn.Module):\n        def __init__(self):\n            super().__init__()\n"
           "            self.w = torch.randn(3)\n\n    def __init__(self):\n        super().__init__()\n"
           "        self.inner = ModelNew.Inner()\n\n    def forward(self, x):\n"
           "        return cuda_ext.f(x, self.inner.w)\n")
    assert check_python(src, "model_new.py") == []
    plain = src.replace("class Inner(nn.Module)", "class Inner")
    assert [(f.rule, f.line) for f in check_python(plain, "model_new.py")] == [("state_across_calls", 10),
                                                                                ("torch_compute", 10)]


def test_a_cpp_comment_between_a_call_and_its_parenthesis_hides_nothing():
    found = check_cpp("auto y = at::matmul /* fused */ (a, b);\nauto z = a./* act */relu();\n", "k.cu")
    assert [(f.line, f.message) for f in found] == [
        (1, "calls the torch operator at::matmul() in C++; write the kernel instead"),
        (2, "calls .relu() on a tensor in C++; write the kernel instead")]


def test_torch_compile_reached_through_an_attribute_is_rejected_even_in_init():
    src = model("return self.f(x)", init="self.f = torch.compile.__call__(cuda_ext.f)")
    assert [(f.rule, f.line, f.message) for f in py(src)] == [
        ("torch_compute", 9, "torch.compile.__call__: compiling with torch is not a CUDA solution")]


def test_a_module_level_getattr_is_no_module_override():
    """PEP 562: a helper module may define __getattr__ at module level; only a class overriding it is flagged."""
    src = "import torch\n\n\ndef __getattr__(name):\n    return getattr(torch, 'ones')\n"
    assert check_python(src, "helpers.py") == []


def test_only_forward_arguments_are_inputs():
    """A helper method filling a buffer passed to it, or __init__ scaling its own argument, mutates no input."""
    src = ("class ModelNew(nn.Module):\n    def __init__(self, w):\n        super().__init__()\n"
           "        w.mul_(2)\n        self.w = w\n\n    def fill(self, buf):\n        buf.zero_()\n"
           "        return buf\n\n    def forward(self, x):\n        return cuda_ext.f(x, self.fill(torch.empty_like(x)))\n")
    assert py(src) == []
    assert [(f.rule, f.message) for f in py(src.replace("(x, self.fill(", "(x.zero_(), self.fill("))] == [
        ("input_mutation", "calls x.zero_(): mutates an input in place")]


def test_calling_a_torch_module_itself_does_not_crash_the_check():
    """torch.cuda is a module, not a function: the check judges the call (nothing to find), it does not fail."""
    assert py(model("m = torch.cuda()\nreturn cuda_ext.f(x)")) == []


def test_parameters_and_containers_are_not_torch_layers():
    """Only nn layers stored on self make a call of self.<attr> torch compute; a Parameter, ParameterList,
    ParameterDict, ModuleList or ModuleDict does not (calling one raises at run time, not a static finding)."""
    kinds = ["Parameter(torch.ones(3))", "ParameterList()", "ParameterDict()", "ModuleList()", "ModuleDict()"]
    init = "\n".join(f"self.a{i} = nn.{k}" for i, k in enumerate(kinds))
    forward = "\n".join(f"y{i} = self.a{i}(x)" for i in range(len(kinds))) + "\nreturn cuda_ext.f(x)"
    assert py(model(forward, init=init)) == []
    assert at(py(model(forward, init=init.replace("ModuleDict()", "Linear(3, 3)"))), "torch_compute") == \
        [(20, "calls the torch layer self.a4 in forward()" + TAIL)]


def test_a_starred_forward_argument_is_an_input():
    src = "class ModelNew(nn.Module):\n    def forward(self, *xs):\n        xs[0] = 1\n        return cuda_ext.f(*xs)\n"
    assert [(f.rule, f.line, f.message) for f in py(src)] == [("input_mutation", 8, "writes into the input xs[...]")]


def test_cpp_names_that_only_begin_like_an_operator_or_like_c10_cuda_are_not_operators():
    """at::sumX is not at::sum (only a trailing _ is stripped); a namespace beginning c10::cuda is CUDA-side."""
    found = check_cpp("auto a = at::sumX(x);\nauto b = c10::cudaext::relu(x);\nauto c = c10::ext::relu(x);\n", "k.cu")
    assert [(f.line, f.message) for f in found] == [
        (3, "calls the torch operator c10::ext::relu() in C++; write the kernel instead")]


def test_a_warning_of_the_parser_names_the_candidates_file():
    """An invalid escape sequence warns while parsing (a SyntaxWarning on stderr from Python 3.12): the warning
    names the solution's file, not <unknown>."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_python('import re\nP = re.compile("\\d+")\n', "model_new.py")
    assert [(w.filename, w.lineno) for w in caught if "invalid escape sequence" in str(w.message)] == [
        ("model_new.py", 2)]
