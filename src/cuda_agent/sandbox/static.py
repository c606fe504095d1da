"""Static honesty rules: an AST pass over the Python and a scan of the C++/CUDA.

A static rule alone is easy to dodge, so every class of cheat here also has a dynamic
defense in the worker (see ``worker.py``). The rules aim at *fallbacks to torch compute*
and at tampering, not at Python keywords: ``try/except ImportError`` while finding build
flags, a ``pass`` in an unrelated branch, or a generic fallback CUDA kernel are honest.

Only what evaluation executes is judged (``reach.py``): module-level code, ``ModelNew`` and
what it refers to. A copy of ``get_inputs`` the harness never calls is not forward compute.
Torch compute, private torch helpers included, is allowed in initialization code:
``__init__`` and ``prepare`` (the hook the harness calls once after ``load_state_dict``, with
no inputs, outside timing), what only they call directly, and module level. Under the
``cuda-agent`` rule set it is not allowed in ``forward`` or in any other function, lambda or
nested function, since those can run with inputs; the ``kernelbench`` rule set allows it.

Every rule is one row of :data:`RULES`. ``findings`` with severity ``reject`` reject the
solution; ``warn`` ones are advice.
"""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import asdict, dataclass

from .config import RULE_SETS
from .reach import INIT_METHODS, Reach, binds_model_new, reach
from .solution import REFERENCE, WORKSPACE, Solution, SolutionError

REJECT = "reject"
WARN = "warn"
SANCTIONED_METHODS = INIT_METHODS

CUDA_AGENT, KERNELBENCH = RULE_SETS
"""The rule sets (SandboxConfig.rules). ``cuda-agent`` (the default, the paper's): forward is the candidate's own CUDA, torch may only
allocate and reshape. ``kernelbench``: torch ops and layers may run in forward beside the
candidate's kernels (KernelBench's own rules); every rule against cheating still applies."""


@dataclass(frozen=True)
class Rule:
    """One static rule: its id (a finding's ``rule`` and a verdict flag), what it forbids, why,
    and the rule sets it belongs to."""

    id: str
    severity: str
    forbids: str
    why: str
    rule_sets: tuple[str, ...] = RULE_SETS

    def applies(self, rule_set: str) -> bool:
        return rule_set in self.rule_sets


SYNTAX = Rule("syntax", REJECT, "a Python file that does not parse", "nothing can be judged or run")
LAYOUT = Rule("layout", REJECT, "a workspace without model_new.py, an unreadable source file",
              "the harness has nothing to import")
NO_MODEL_NEW = Rule("no_model_new", REJECT, "a model file that binds no ModelNew (class ModelNew, "
                    "ModelNew = SomeClass or an import of it)", "the harness instantiates ModelNew")
TORCH_COMPUTE = Rule("torch_compute", REJECT, "torch operators, nn layers, @, .cpu()/.numpy() or torch.compile in "
                     "forward and the code it calls; at::/torch:: compute and the dispatcher in C++",
                     "the work must be the candidate's own CUDA; torch may compute in initialization code", (CUDA_AGENT,))
FALLBACK = Rule("fallback", REJECT, "torch compute in an except branch",
                "a kernel that fails over to torch hides its failures behind a correct answer")
PRIVATE_TORCH = Rule("private_torch", REJECT, "torch internals (`torch._*`, torch.library, torch.fx, the profiler) "
                     "outside initialization code", "they reach the dispatcher and the harness's guards")
THREADS = Rule("threads", REJECT, "threads and processes (threading, multiprocessing, subprocess, os.fork, "
               "std::thread, pthread_create, OpenMP)", "work outside the timed stream escapes the clocks")
FORBIDDEN_IMPORT = Rule("forbidden_import", REJECT, "ctypes, gc, inspect, signal, socket, pickle, importlib, "
                        "builtins; dlopen/dlsym and calling Python from C++", "reaching other objects, frames or code")
OTHER_FRAMEWORK = Rule("other_framework", REJECT, "other kernel frameworks and kernel libraries (triton, cupy, "
                       "numba, flash_attn, ...)", "solutions are CUDA C++")
DELEGATES = Rule("delegates_to_reference", REJECT, "importing, subclassing or calling the reference Model",
                 "the reference's own code would be timed as the solution")
HARNESS_ACCESS = Rule("harness_access", REJECT, "importing cuda_agent", "the harness judges the candidate")
LAZY_TENSOR = Rule("lazy_tensor", REJECT, "torch.Tensor subclasses, `__torch_function__`/`__torch_dispatch__`",
                   "tensor subclasses can defer or fake work")
MONKEY_PATCH = Rule("monkey_patch", REJECT, "assigning to module attributes, setattr, exec/eval, dunder access "
                    "(`__dict__`, `__globals__`, frames), sys.modules/settrace, writing files",
                    "patching torch, the timers or the checker")
MODULE_OVERRIDE = Rule("module_override", WARN, "overriding `__getattribute__`/`__setattr__`/`__getattr__`/`__call__` on "
                       "a module", "ModelNew is called through nn.Module.__call__ -> forward")
SIDE_STREAM = Rule("side_stream", REJECT, "torch.cuda.Stream, cudaStreamCreate*, host callbacks",
                   "work on another stream escapes the timed stream")
INPUT_MUTATION = Rule("input_mutation", REJECT, "in-place methods or item assignment on forward's arguments",
                      "zeroing or rewriting the inputs changes what the reference is compared against")
OUTPUT_CACHE = Rule("output_cache", REJECT, "functools.cache/lru_cache, tensors in C++ static variables",
                    "results carried across calls")
STATE_ACROSS_CALLS = Rule("state_across_calls", WARN, "self.x = ... or global state written during a call, "
                          "static maps keyed by pointers in C++", "often a result cache (checked at run time)")
PRECISION = Rule("precision", WARN, "TF32/half math modes and conversions",
                 "in strict fp32 mode the result must still match at fp32 accuracy")

RULES: tuple[Rule, ...] = (SYNTAX, LAYOUT, NO_MODEL_NEW, TORCH_COMPUTE, FALLBACK, PRIVATE_TORCH, THREADS,
                           FORBIDDEN_IMPORT, OTHER_FRAMEWORK, DELEGATES, HARNESS_ACCESS, LAZY_TENSOR, MONKEY_PATCH,
                           MODULE_OVERRIDE, SIDE_STREAM, INPUT_MUTATION, OUTPUT_CACHE, STATE_ACROSS_CALLS, PRECISION)
"""Every static rule. ``cuda-agent check --list-rules``, docs/sandbox.md and the tests read this table."""
RULES_BY_ID = {r.id: r for r in RULES}
BROKEN = (SYNTAX, LAYOUT)
"""Findings that make a solution a compile_error rather than a rejection."""


def check_rule_set(rule_set: str) -> str:
    if rule_set not in RULE_SETS:
        raise ValueError(f"rules must be one of {RULE_SETS}, got {rule_set!r}")
    return rule_set


def rules_table(markdown: bool = False) -> str:
    """The RULES table as text (``check --list-rules``) or as a markdown table (docs)."""
    if markdown:
        lines = ["| rule | severity | forbids | why | rule sets |", "| --- | --- | --- | --- | --- |"]
        lines += [f"| `{r.id}` | {r.severity} | {r.forbids} | {r.why} | {', '.join(r.rule_sets)} |" for r in RULES]
    else:
        lines = [f"{r.id:<24}{r.severity:<8}{','.join(r.rule_sets):<24}{r.forbids} ({r.why})" for r in RULES]
    return "\n".join(lines)


@dataclass(frozen=True)
class Finding:
    rule: str
    file: str
    line: int
    message: str
    severity: str = REJECT

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: [{self.rule}] {self.message}"

    def to_dict(self) -> dict:
        return asdict(self)


def finding(rule: Rule, file: str, line: int, message: str) -> Finding:
    return Finding(rule.id, file, line, message, rule.severity)


# ----------------------------------------------------------------------------- name sets

ALLOWED_TORCH_FUNCS = frozenset("""
empty empty_like empty_strided zeros zeros_like ones ones_like full full_like tensor as_tensor
as_strided reshape flatten unflatten squeeze unsqueeze permute transpose t narrow chunk split
tensor_split unbind select movedim moveaxis swapaxes swapdims is_tensor is_floating_point numel
device dtype Size no_grad inference_mode enable_grad set_grad_enabled get_default_dtype
promote_types result_type finfo iinfo is_grad_enabled Generator
""".split())

ALLOWED_TORCH_CUDA_FUNCS = frozenset("""
current_stream current_device device get_device_properties get_device_capability is_available
device_count synchronize default_stream get_device_name mem_get_info
""".split())

STREAM_NAMES = frozenset({"Stream", "stream", "set_stream", "StreamContext", "ExternalStream"})

ALLOWED_METHODS = frozenset("""
size stride dim ndimension numel nelement contiguous view view_as reshape reshape_as flatten
unflatten permute transpose t unsqueeze squeeze expand expand_as narrow select split chunk
unbind movedim moveaxis swapaxes swapdims as_strided data_ptr is_contiguous element_size
new_empty new_zeros new_ones new_full new_empty_strided to cuda detach clone zero_ fill_
copy_ storage_offset get_device is_cuda
""".split())

# Moving tensors to the host inside forward: computing there is a fallback too.
HOST_METHODS = frozenset({"cpu", "numpy"})

# Method names that Python containers or strings share with Tensor: a call on them proves nothing.
AMBIGUOUS_METHODS = frozenset("""
add index count sort values type repeat item pop remove append extend insert get update keys
items join format replace strip find lower upper copy
""".split())

# A curated, high-confidence list for C++ (``.name(`` on a tensor) where the AST cannot help.
CPP_COMPUTE_METHODS = frozenset("""
matmul mm bmm addmm baddbmm addmv mv dot linear conv1d conv2d conv3d conv_transpose1d
conv_transpose2d conv_transpose3d convolution relu relu_ gelu silu sigmoid tanh softmax log_softmax
exp exp_ log log_ sum mean var std norm layer_norm batch_norm group_norm instance_norm cumsum
cumprod einsum mul mul_ div div_ sub sub_ pow sqrt rsqrt clamp clamp_ clamp_min clamp_max softplus
hardtanh leaky_relu elu max_pool1d max_pool2d max_pool3d avg_pool1d avg_pool2d avg_pool3d
adaptive_avg_pool2d adaptive_max_pool2d amax amin argmax argmin logsumexp topk gather scatter
index_select masked_fill where cat stack abs neg reciprocal erf tril triu cross cdist
""".split())

ALLOWED_CPP_NAMES = frozenset("""
Tensor empty empty_like empty_strided zeros zeros_like ones ones_like full new_empty new_zeros
zero_ fill_ from_blob view reshape transpose narrow select squeeze unsqueeze flatten contiguous
clone copy_ TensorOptions Device DeviceType Scalar ScalarType IntArrayRef ArrayRef Half BFloat16
MemoryFormat Layout optional nullopt getCurrentCUDAStream getCurrentCUDABlasHandle
getCurrentCUDABlasLtHandle getCurrentDeviceProperties getDeviceProperties CUDAGuard
OptionalCUDAGuard DeviceGuard CUDAStream get_device get_device_index data_ptr
""".split())

FORBIDDEN_IMPORTS = {
    "threading": "starts threads", "_thread": "starts threads", "multiprocessing": "starts processes",
    "concurrent": "starts threads", "subprocess": "starts processes", "asyncio": "runs tasks concurrently",
    "ctypes": "native calls outside the build", "cffi": "native calls outside the build",
    "gc": "reaching other objects", "inspect": "reaching other frames", "signal": "signals",
    "socket": "network", "pickle": "serialization hooks", "marshal": "code objects",
    "builtins": "patching builtins", "importlib": "dynamic imports", "copyreg": "serialization hooks",
    "sys.monitoring": "tracing",
}
OTHER_FRAMEWORKS = frozenset({"triton", "cupy", "numba", "jax", "tvm", "tilelang", "pycuda",
                              "cuda", "warp", "taichi", "tensorrt", "cutlass", "apex", "xformers",
                              "flash_attn", "transformer_engine", "thunder", "liger_kernel"})
REFERENCE_MODULES = frozenset({"model", "reference", "ref", "task"})
DANGEROUS_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "globals", "locals",
                                "vars", "breakpoint", "delattr"})
DANGEROUS_DUNDERS = frozenset({"__dict__", "__class__", "__bases__", "__mro__", "__subclasses__",
                               "__globals__", "__code__", "__closure__", "__builtins__",
                               "__getattribute__", "__torch_function__", "__torch_dispatch__",
                               "__reduce__", "__reduce_ex__", "__self__", "__func__", "__wrapped__",
                               "_make_subclass", "as_subclass", "_make_wrapper_subclass", "f_back",
                               "f_globals", "f_locals", "gi_frame", "tb_frame"})
SYS_FORBIDDEN = frozenset({"modules", "settrace", "setprofile", "_getframe", "addaudithook",
                           "meta_path", "path_hooks", "monitoring", "setswitchinterval"})
OS_FORBIDDEN = frozenset({"system", "fork", "forkpty", "popen", "spawnl", "spawnv", "execv",
                          "execve", "execl", "execvp", "kill", "killpg", "_exit", "putenv",
                          "environ", "register_at_fork"})


@functools.cache
def torch_compute_names() -> frozenset[str]:
    """Every public ATen-backed function name torch exposes, minus the allowed ones."""
    import torch

    names = {n for n in dir(torch._C._VariableFunctions) if not n.startswith("_")}
    names |= {n for n in dir(torch.nn.functional) if not n.startswith("_")}
    names |= {"einsum", "cdist", "norm", "matmul", "tensordot", "stft", "istft", "cartesian_prod",
              "chain_matmul", "lu", "unique", "split", "meshgrid"}
    return frozenset(names - ALLOWED_TORCH_FUNCS)


@functools.cache
def tensor_compute_methods() -> frozenset[str]:
    import torch

    methods = {n for n in dir(torch.Tensor) if not n.startswith("_")}
    compute = {m for m in methods if m in torch_compute_names() or m.rstrip("_") in torch_compute_names()}
    compute |= {"float", "half", "bfloat16", "double", "int", "long", "short", "bool", "byte",
                "char", "type_as", "__matmul__", "masked_fill_", "index_put_", "scatter_", "put_",
                "addmm_", "baddbmm_", "mul_", "add_", "sub_", "div_", "pow_", "exp_", "relu_",
                "clamp_", "sigmoid_", "tanh_", "apply_", "map_"}
    return frozenset(compute - ALLOWED_METHODS - AMBIGUOUS_METHODS)


# ----------------------------------------------------------------------------- Python rules

class _PyChecker(ast.NodeVisitor):
    """One pass over one Python file. Tracks import aliases and the current context."""

    def __init__(self, filename: str, calibrate: bool = False, reached: Reach | None = None):
        self.filename = filename
        self.calibrate = calibrate
        self.reach = reached or Reach()
        self.findings: list[Finding] = []
        self.aliases: dict[str, str] = {}  # local name -> dotted module/function path
        self.local_classes: set[str] = set()
        self.module_classes: set[str] = set()  # local classes deriving from nn.Module
        self.compute_init_classes: set[str] = set()  # local classes whose __init__/prepare call torch
        self.layers: set[str] = set()  # self.<attr> assigned an nn layer in __init__
        self.torch_attrs: dict[str, str] = {}  # self.<attr> assigned a torch function
        self.func_stack: list[tuple[str, bool]] = []  # (name, sanctioned)
        self.class_stack: list[str] = []
        self.forward_args: list[set[str]] = []

    # -- helpers
    def add(self, node: ast.AST, rule: Rule, message: str) -> None:
        self.findings.append(finding(rule, self.filename, getattr(node, "lineno", 0), message))

    @property
    def sanctioned(self) -> bool:
        """Module level, or directly inside __init__/prepare (not in a nested function or lambda)."""
        return not self.func_stack or self.func_stack[-1][1]

    @property
    def in_init_function(self) -> bool:
        """Inside initialization code proper (not module level, where patching happens)."""
        return bool(self.func_stack) and self.func_stack[-1][1]

    def dotted(self, node: ast.AST) -> str | None:
        """Resolve ``F.relu`` to ``torch.nn.functional.relu`` through import aliases."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        root = self.aliases.get(node.id)
        if root is None:
            return None
        return ".".join([root, *reversed(parts)])

    def root_is_module(self, node: ast.AST) -> bool:
        while isinstance(node, ast.Attribute):
            node = node.value
        return isinstance(node, ast.Name) and node.id in self.aliases

    # -- imports
    def _check_import(self, node: ast.AST, module: str) -> None:
        top = module.split(".")[0]
        if module in FORBIDDEN_IMPORTS or top in FORBIDDEN_IMPORTS:
            why = FORBIDDEN_IMPORTS.get(module) or FORBIDDEN_IMPORTS[top]
            rule = THREADS if why.startswith(("starts", "runs")) else FORBIDDEN_IMPORT
            self.add(node, rule, f"imports {module} ({why}); not allowed in a solution")
        elif top in OTHER_FRAMEWORKS:
            self.add(node, OTHER_FRAMEWORK, f"imports {module}: solutions are CUDA C++; other kernel "
                                              "frameworks or kernel libraries are not allowed")
        elif top in REFERENCE_MODULES:
            self.add(node, DELEGATES, f"imports the reference module {module!r}")
        elif top == "cuda_agent":
            self.add(node, HARNESS_ACCESS, "imports the evaluation harness")
        elif self.in_init_function:
            return  # initialization code may use any torch API
        elif module.startswith("torch._") or module.startswith("torch.utils._") or module in (
                "torch.testing", "torch.library", "torch.compiler", "torch.jit", "torch.fx",
                "torch.autograd.profiler", "torch.profiler"):
            self.add(node, PRIVATE_TORCH, f"imports {module}: torch internals and compilers are off limits")

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self._check_import(node, a.name)
            if a.asname:
                self.aliases[a.asname] = a.name
            else:
                self.aliases[a.name.split(".")[0]] = a.name.split(".")[0]
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:  # relative import of a sibling file: fine unless it is the reference
            if module.split(".")[0] in REFERENCE_MODULES or any(a.name in REFERENCE_MODULES for a in node.names):
                self.add(node, DELEGATES, "imports the reference module")
            return
        self._check_import(node, module)
        for a in node.names:
            full = f"{module}.{a.name}"
            if module.split(".")[0] == "torch":  # from torch import fx, from torch.utils import _pytree
                self._check_import(node, full)
            if a.name == "Model" and module.split(".")[0] in REFERENCE_MODULES:
                self.add(node, DELEGATES, "imports the reference Model")
            self.aliases[a.asname or a.name] = full
        self.generic_visit(node)

    # -- definitions and contexts
    def visit_If(self, node: ast.If) -> None:
        if id(node) not in self.reach.skipped:  # an ``if __name__ == "__main__":`` block never runs
            self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if id(node) in self.reach.skipped:  # never executed by evaluation (see reach.py)
            return
        self.local_classes.add(node.name)
        for base in node.bases:
            name = self.dotted(base) or (base.id if isinstance(base, ast.Name) else "")
            if name in ("Model",) or name.endswith(".Model"):
                self.add(node, DELEGATES, f"class {node.name} subclasses the reference Model")
            if name in ("torch.Tensor", "Tensor") or name.endswith(".Tensor"):
                self.add(node, LAZY_TENSOR, f"class {node.name} subclasses torch.Tensor "
                                              "(tensor subclasses can defer or fake work)")
        for deco in node.decorator_list:
            self._check_decorator(deco)
        self.class_stack.append(node.name)
        self.generic_visit(node)
        self.class_stack.pop()

    def _check_decorator(self, deco: ast.AST) -> None:
        target = deco.func if isinstance(deco, ast.Call) else deco
        name = self.dotted(target) or (target.id if isinstance(target, ast.Name) else "")
        if name.split(".")[-1] in ("lru_cache", "cache", "cached_property") and name.startswith("functools"):
            self.add(deco, OUTPUT_CACHE, f"@{name} caches results across calls")
        if name.startswith("torch.") and not self.calibrate:
            self.add(deco, TORCH_COMPUTE, f"@{name}: torch compilers and decorators are not allowed")

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if id(node) in self.reach.skipped:  # e.g. a copy of get_inputs(): the harness never calls it
            return
        in_class = bool(self.class_stack) and (not self.func_stack)
        # initialization code (see reach.py): __init__/prepare and what only they call, directly
        sanctioned = (not self.func_stack and len(self.class_stack) <= 1 and id(node) in self.reach.init_code) or (
            in_class and node.name in SANCTIONED_METHODS and self.class_stack[-1] in self.module_classes)
        if node.name in ("__torch_function__", "__torch_dispatch__"):
            self.add(node, LAZY_TENSOR, f"defines {node.name}: intercepting torch dispatch is not allowed")
        if in_class and node.name in ("__getattribute__", "__setattr__", "__getattr__", "__call__"):
            self.add(node, MODULE_OVERRIDE, f"overrides {node.name} on a module; ModelNew is called "
                                           "through nn.Module.__call__ -> forward")
        for deco in node.decorator_list:
            self._check_decorator(deco)
        args = {a.arg for a in node.args.args[1:] + node.args.kwonlyargs}
        if node.args.vararg:
            args.add(node.args.vararg.arg)
        self.func_stack.append((node.name, sanctioned))
        self.forward_args.append(args if in_class and node.name == "forward" else set())
        self.generic_visit(node)
        self.forward_args.pop()
        self.func_stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.func_stack.append(("<lambda>", False))
        self.forward_args.append(set())
        self.generic_visit(node)
        self.forward_args.pop()
        self.func_stack.pop()

    def visit_Global(self, node: ast.Global) -> None:
        if self.func_stack:
            self.add(node, STATE_ACROSS_CALLS, f"global {', '.join(node.names)}: module state written from a "
                                           "function can carry results across calls")

    visit_Nonlocal = visit_Global

    # -- the rules
    def visit_Name(self, node: ast.Name) -> None:
        if node.id == "Model" and not self.calibrate and self.reach.model_new != "Model":
            self.add(node, DELEGATES, "refers to the reference Model")
        if node.id in ("__builtins__",):
            self.add(node, MONKEY_PATCH, "touches __builtins__")
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in DANGEROUS_DUNDERS:
            self.add(node, MONKEY_PATCH, f"touches .{node.attr} (reaching into objects or frames)")
        path = self.dotted(node)
        if path:
            if path.startswith("sys.") and path.split(".")[1] in SYS_FORBIDDEN:
                self.add(node, MONKEY_PATCH, f"uses {path}")
            elif path.startswith("os.") and path.split(".")[1] in OS_FORBIDDEN:
                self.add(node, THREADS if "fork" in path or "spawn" in path else FORBIDDEN_IMPORT,
                         f"uses {path}")
            elif path.startswith("torch.") and not self.in_init_function and any(
                    p.startswith("_") and p != "__version__" for p in path.split(".")[1:]):
                self.add(node, PRIVATE_TORCH, f"uses torch internals ({path})")
            elif path.startswith("torch.cuda.") and path.split(".")[2] in STREAM_NAMES:
                self.add(node, SIDE_STREAM, f"uses {path}: all work must run on the current stream")
            elif path.startswith("torch.ops.") and len(path.split(".")) > 2 and \
                    path.split(".")[2] in ("aten", "prims", "quantized", "_c10d_functional", "inductor"):
                if not self.calibrate and not self.sanctioned:
                    self.add(node, TORCH_COMPUTE, f"calls torch operators through {path}")
            elif path.startswith("torch.backends.") and isinstance(node.ctx, ast.Load) and (
                    "allow_tf32" in path or "allow_fp16" in path or "allow_bf16" in path or "flags" in path):
                self.add(node, PRECISION, f"reads or changes {path}; precision is set by the harness")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else None
        if name in DANGEROUS_BUILTINS:
            self.add(node, MONKEY_PATCH, f"calls {name}(): dynamic code is not allowed")
        elif name == "setattr" and node.args and not (isinstance(node.args[0], ast.Name) and node.args[0].id == "self"):
            self.add(node, MONKEY_PATCH, "setattr on something other than self")
        elif name == "getattr" and node.args and self.root_is_module(node.args[0]) and not (
                len(node.args) > 1 and isinstance(node.args[1], ast.Constant)):
            self.add(node, MONKEY_PATCH, "getattr on a module with a computed name")
        elif name == "open" and self._open_writes(node):
            self.add(node, MONKEY_PATCH, "opens a file for writing")
        if isinstance(func, ast.Name) and func.id in self.compute_init_classes and not self.sanctioned \
                and not self.calibrate:
            self._report_compute(node, f"constructs {func.id}, whose __init__/prepare runs torch operators,")
        path = self.dotted(func)
        if path is None and isinstance(func, ast.Name) and func.id in self.aliases:
            path = self.aliases[func.id]
        if path is None and isinstance(func, ast.Call) and isinstance(func.func, ast.Name) \
                and func.func.id == "getattr" and len(func.args) == 2 and isinstance(func.args[1], ast.Constant) \
                and isinstance(func.args[1].value, str):
            base = self.dotted(func.args[0])  # getattr(torch, "sigmoid")(x)
            path = f"{base}.{func.args[1].value}" if base else None
        if path:
            self._check_torch_call(node, path)
        elif isinstance(func, ast.Attribute):
            self._check_method_call(node, func)
        self.generic_visit(node)

    @staticmethod
    def _open_writes(node: ast.Call) -> bool:
        mode = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "mode"), None)
        return isinstance(mode, ast.Constant) and isinstance(mode.value, str) and any(c in mode.value for c in "wax+")

    def _check_torch_call(self, node: ast.Call, path: str) -> None:
        parts = path.split(".")
        if parts[0] != "torch":
            return
        if path in ("torch.compile", "torch.jit.script", "torch.jit.trace") or parts[1:2] == ["compile"]:
            if not self.calibrate:
                self.add(node, TORCH_COMPUTE, f"{path}: compiling with torch is not a CUDA solution")
            return
        if len(parts) >= 3 and parts[1] == "cuda":
            if parts[2] in STREAM_NAMES:
                return  # reported by visit_Attribute
            if parts[2] in ("graph", "CUDAGraph", "graphs", "make_graphed_callables") or parts[2] in ALLOWED_TORCH_CUDA_FUNCS:
                return
        if len(parts) >= 3 and parts[1] in ("utils", "ops", "backends", "nn", "cuda") and parts[2] in (
                "cpp_extension", "cuda_ext", "Parameter", "ParameterList", "ParameterDict", "Module",
                "ModuleList", "ModuleDict", "Identity", "init", "parameter"):
            return
        if self.calibrate or self.sanctioned:
            return
        compute = False
        if len(parts) >= 3 and parts[1] in ("nn",) and parts[2] == "functional":
            compute = True
        elif len(parts) >= 2 and parts[1] in ("linalg", "fft", "special", "sparse", "nested", "distributions", "signal"):
            compute = True
        elif len(parts) == 2 and parts[1] in torch_compute_names():
            compute = True
        elif len(parts) >= 3 and parts[1] == "nn" and parts[2][:1].isupper():
            self.add(node, TORCH_COMPUTE, f"builds a torch layer {path} outside __init__/prepare")
            return
        if compute:
            self._report_compute(node, f"calls {path}")

    def _check_method_call(self, node: ast.Call, func: ast.Attribute) -> None:
        if self.calibrate or self.sanctioned:
            return
        attr = func.attr
        base = func.value
        # self.<layer>(...) or self.<layer>.forward(...): a torch layer doing the work
        if isinstance(base, ast.Name) and base.id == "self" and attr in self.layers:
            self._report_compute(node, f"calls the torch layer self.{attr}")
            return
        if isinstance(base, ast.Name) and base.id == "self" and attr in self.torch_attrs:
            self._check_torch_call(node, self.torch_attrs[attr])
            return
        if attr == "forward" and isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) \
                and base.value.id == "self" and base.attr in self.layers:
            self._report_compute(node, f"calls the torch layer self.{base.attr}.forward")
            return
        if attr in tensor_compute_methods():
            self._report_compute(node, f"calls the tensor method .{attr}()")
        elif attr in HOST_METHODS:
            self.add(node, TORCH_COMPUTE, f"calls .{attr}() in {self.func_stack[-1][0] if self.func_stack else '<module>'}(): "
                                            "moving data to the host to compute there is not a CUDA solution")
        if self.forward_args and attr.endswith("_") and not attr.endswith("__") and \
                isinstance(base, ast.Name) and base.id in self.forward_args[-1] and attr not in ("data_ptr",):
            self.add(node, INPUT_MUTATION, f"calls {base.id}.{attr}(): mutates an input in place")

    def _report_compute(self, node: ast.AST, what: str) -> None:
        in_handler = any(isinstance(p, ast.ExceptHandler) for p in self._parents(node))
        if in_handler:
            self.add(node, FALLBACK, f"{what} in an except branch: falling back to torch compute")
        else:
            fn = self.func_stack[-1][0] if self.func_stack else "<module>"
            self.add(node, TORCH_COMPUTE, f"{what} in {fn}(); the work must be done by your CUDA kernels "
                                            "(under the cuda-agent rules torch compute is allowed only in initialization code: "
                                              "__init__, prepare and what only they call)")

    def _parents(self, node: ast.AST):
        p = getattr(node, "_parent", None)
        while p is not None:
            yield p
            p = getattr(p, "_parent", None)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if isinstance(node.op, ast.MatMult) and not self.calibrate and not self.sanctioned:
            self._report_compute(node, "uses the @ operator")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign | ast.AugAssign | ast.AnnAssign) -> None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        value = node.value
        value_path = self.dotted(value) if isinstance(value, (ast.Attribute, ast.Name)) else None
        for t in targets:
            self._check_store(node, t)
            if value_path and value_path.startswith("torch."):
                if isinstance(t, ast.Name):
                    self.aliases[t.id] = value_path  # act = torch.sigmoid; act(x)
                elif isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    self.torch_attrs[t.attr] = value_path  # self.act = F.relu; self.act(x)
            # remember self.<attr> = nn.<Layer>(...) so calling it later is seen as torch compute
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" \
                    and isinstance(value, ast.Call):
                path = self.dotted(value.func) or ""
                parts = path.split(".")
                if len(parts) >= 3 and parts[0] == "torch" and parts[1] == "nn" and parts[2][:1].isupper() \
                        and parts[2] not in ("Parameter", "ParameterList", "ParameterDict", "ModuleList",
                                             "ModuleDict", "Identity"):
                    self.layers.add(t.attr)
        self.generic_visit(node)

    visit_AugAssign = visit_Assign
    visit_AnnAssign = visit_Assign

    def _check_store(self, node: ast.AST, target: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._check_store(node, elt)
            return
        if isinstance(target, ast.Attribute):
            root = target
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and (root.id in self.aliases or
                                               (root.id not in self.local_classes and root.id[:1].isupper()
                                                and root.id not in ("ModelNew",))):
                if root.id in self.aliases:
                    self.add(node, MONKEY_PATCH, f"assigns to {ast.unparse(target)}: patching a module is not allowed")
            elif isinstance(root, ast.Name) and root.id == "self" and self.func_stack and not self.sanctioned:
                self.add(node, STATE_ACROSS_CALLS, f"stores self.{target.attr} during a call; results must not be "
                                               "carried across calls (the harness checks this at run time)")
        elif isinstance(target, ast.Subscript):
            base = target.value
            if isinstance(base, ast.Name) and self.forward_args and base.id in self.forward_args[-1]:
                self.add(node, INPUT_MUTATION, f"writes into the input {base.id}[...]")
            elif isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) and base.value.id == "self" \
                    and self.func_stack and not self.sanctioned:
                self.add(node, STATE_ACROSS_CALLS, f"writes into self.{base.attr}[...] during a call (a cache)")


def _link_parents(tree: ast.AST) -> None:
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            child._parent = parent  # type: ignore[attr-defined]


def check_python(source: str, filename: str, calibrate: bool = False, rules: str = CUDA_AGENT) -> list[Finding]:
    """Findings of the rules in the rule set ``rules`` for one Python file. Only what evaluation
    executes is judged (see reach.py); the C++/CUDA in its string literals is scanned whole."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as e:
        return [finding(SYNTAX, filename, e.lineno or 0, f"syntax error: {e.msg}")]
    _link_parents(tree)
    checker = _PyChecker(filename, calibrate=calibrate, reached=reach(tree))
    _prepass(tree, checker)
    checker.visit(tree)
    findings = checker.findings
    for s, line in _embedded_cpp(tree):
        findings.extend(check_cpp(s, filename, line_offset=line - 1, rules=rules))
    return in_rule_set(_dedupe(findings), rules)


def in_rule_set(findings: list[Finding], rules: str) -> list[Finding]:
    """The findings whose rule belongs to the rule set ``rules``."""
    check_rule_set(rules)
    return [f for f in findings if RULES_BY_ID[f.rule].applies(rules)]


def _prepass(tree: ast.Module, checker: _PyChecker) -> None:
    """Learn the file's classes before the main pass: which derive from nn.Module (their
    __init__/prepare are sanctioned), which run torch calls in __init__/prepare, and which
    ``self.<attr>`` hold nn layers (so calling them later counts as torch compute)."""
    for node in tree.body:  # imports first, so base classes resolve
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                name = a.asname or a.name.split(".")[0]
                checker.aliases.setdefault(name, (f"{node.module}.{a.name}" if isinstance(node, ast.ImportFrom)
                                                  and node.module else a.name if a.asname else name))
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    changed = True
    while changed:  # nn.Module subclasses, transitively through local classes
        changed = False
        for c in classes:
            if c.name in checker.module_classes:
                continue
            for b in c.bases:
                name = checker.dotted(b) or (b.id if isinstance(b, ast.Name) else "")
                if name in ("torch.nn.Module", "torch.nn.modules.module.Module") or name in checker.module_classes \
                        or name.endswith("nn.Module"):
                    checker.module_classes.add(c.name)
                    changed = True
    for c in classes:
        checker.local_classes.add(c.name)
        for fn in c.body:
            if isinstance(fn, ast.FunctionDef) and fn.name in SANCTIONED_METHODS:
                for call in ast.walk(fn):
                    if isinstance(call, ast.Call) and (checker.dotted(call.func) or "").startswith("torch.") \
                            and (checker.dotted(call.func) or "").split(".")[1:2] != ["nn"]:
                        checker.compute_init_classes.add(c.name)
    checker.aliases.clear()  # the main pass records imports itself, in order


def _embedded_cpp(tree: ast.AST) -> list[tuple[str, int]]:
    """C++/CUDA held in Python string literals (``load_inline`` sources)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and len(node.value) > 30:
            s = node.value
            if any(tok in s for tok in ("__global__", "#include", "torch::", "at::", "<<<", "PYBIND11")):
                out.append((s, node.lineno))
    return out


# ----------------------------------------------------------------------------- C++/CUDA rules

_COMMENT_OR_STRING = re.compile(r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
_NS_CALL = re.compile(r"\b((?:at|torch|c10|aten)(?:::\w+)+)\s*(?:<[^<>;]*>)?\s*\(")
_METHOD_CALL = re.compile(r"(?:\.|->)\s*(\w+)\s*\(")

CPP_RULES: list[tuple[Rule, re.Pattern, str]] = [
    (SIDE_STREAM, re.compile(r"\bcudaStreamCreate\w*\s*\(|\bcudaStreamPerThread\b|\bcudaLaunchHostFunc\b|"
                               r"\bcudaStreamAddCallback\b|\bgetStreamFromPool\b|\bcuStreamCreate\w*\b"),
     "creates or uses a side stream or a host callback; launch on the current stream"),
    (THREADS, re.compile(r"\bstd::thread\b|\bstd::async\b|\bstd::jthread\b|\bpthread_create\b|\bfork\s*\(|"
                           r"\bpopen\s*\(|(?<![\w:])system\s*\(|\bstd::system\b|#\s*include\s*<thread>|"
                           r"#\s*include\s*<future>|\bomp\s+parallel\b"),
     "starts threads or processes"),
    (TORCH_COMPUTE, re.compile(r"\baoti_torch_call_dispatcher\b|\baoti_torch_aten_\w+|\baoti_torch_cuda_\w+\(|"
                                 r"\bc10::Dispatcher\b|\bfindSchema\b|\bcallBoxed\b|\bat::_ops::|\bat::native::"),
     "calls torch operators from C++"),
    (FORBIDDEN_IMPORT, re.compile(r"\bdlopen\s*\(|\bdlsym\s*\(|\bPyRun_\w+|\bPyImport_\w+|"
                                    r"\b(?:py|pybind11)::module_?::import\b|\bPyObject_Call\w*"),
     "loads code or calls Python at run time"),
    (OUTPUT_CACHE, re.compile(r"\bstatic\s+(?:const\s+)?(?:(?:at|torch|torch::stable)::)?Tensor\b|"
                                r"\bstatic\s+std::(?:vector|unordered_map|map)\s*<\s*(?:(?:at|torch)::)?Tensor"),
     "keeps a tensor in a static variable across calls (an output cache)"),
    (STATE_ACROSS_CALLS, re.compile(r"\bstatic\s+(?:std::)?(?:unordered_)?map\s*<\s*(?:const\s+)?(?:void|float|"
                                r"uintptr_t|int64_t|size_t|long)\s*\*?"),
     "a static map keyed by pointers or sizes; results must not be cached across calls"),
    (PRECISION, re.compile(r"\bCUBLAS_COMPUTE_32F_FAST_\w+|\bCUBLAS_TF32_TENSOR_OP_MATH\b|"
                             r"\bwmma::precision::tf32\b|\bCUDNN_TENSOR_OP_MATH\w*\b|\bCUDNN_DEFAULT_MATH\b|"
                             r"\.tf32\b|\b__float2half\w*|\b__float2bfloat16\w*"),
     "lower-precision arithmetic: in strict fp32 mode the result must still match at fp32 accuracy"),
]


def _strip_cpp(src: str) -> str:
    """Blank out comments and string literals in one left-to-right pass, keeping line numbers
    (so a "//" inside a string cannot hide the code after it)."""
    def blank(m: re.Match) -> str:
        return re.sub(r"[^\n]", " ", m.group(0))
    return _COMMENT_OR_STRING.sub(blank, src)


def check_cpp(source: str, filename: str, line_offset: int = 0, rules: str = CUDA_AGENT) -> list[Finding]:
    src = _strip_cpp(source)
    findings: list[Finding] = []

    def line_of(pos: int) -> int:
        return src.count("\n", 0, pos) + 1 + line_offset

    for rule, pattern, message in CPP_RULES:
        for m in pattern.finditer(src):
            findings.append(finding(rule, filename, line_of(m.start()), f"{message} ({m.group(0).strip()})"))
    compute = torch_compute_names()
    for m in _NS_CALL.finditer(src):
        path = m.group(1)
        last = path.split("::")[-1]
        if "::cuda::" in path or path.startswith("c10::cuda") or last in ALLOWED_CPP_NAMES:
            continue
        if last in compute or last.rstrip("_") in compute:
            findings.append(finding(TORCH_COMPUTE, filename, line_of(m.start()),
                                    f"calls the torch operator {path}() in C++; write the kernel instead"))
    for m in _METHOD_CALL.finditer(src):
        name = m.group(1)
        if name in CPP_COMPUTE_METHODS:
            findings.append(finding(TORCH_COMPUTE, filename, line_of(m.start()),
                                    f"calls .{name}() on a tensor in C++; write the kernel instead"))
    return in_rule_set(findings, rules)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen, out = set(), []
    for f in findings:
        key = (f.rule, f.file, f.line, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


# ----------------------------------------------------------------------------- entry point

def check_solution(solution: Solution, calibrate: bool = False, rules: str = CUDA_AGENT) -> list[Finding]:
    """All static findings of the rule set ``rules`` for a solution (empty list: nothing to object to)."""
    check_rule_set(rules)
    if solution.kind == REFERENCE:
        return []
    findings: list[Finding] = []
    if solution.kind == WORKSPACE and not solution.model_file.is_file():
        findings.append(finding(LAYOUT, solution.display(solution.model_file), 0,
                                "no model_new.py: a workspace solution needs model_new.py defining ModelNew"))
    for path in solution.source_files():
        name = solution.display(path)
        try:
            text = solution.read(path)
        except (OSError, SolutionError) as e:
            findings.append(finding(LAYOUT, name, 0, f"cannot read: {e}"))
            continue
        if path.suffix == ".py":
            findings.extend(check_python(text, name, calibrate=calibrate, rules=rules))
        else:
            findings.extend(check_cpp(text, name, rules=rules))
    model_file = solution.model_file
    if model_file.is_file() and not any(f.rule == SYNTAX.id for f in findings):
        if not binds_model_new(ast.parse(solution.read(model_file)))[0]:
            # no ModelNew, no forward: nothing in the file runs with inputs, so only this is worth saying
            # (and the other rules against tampering)
            shown = solution.display(model_file)
            findings = [f for f in findings if not (f.file == shown and f.rule in (TORCH_COMPUTE.id, FALLBACK.id))]
            findings.append(finding(NO_MODEL_NEW, solution.display(model_file), 0,
                                    "defines no ModelNew: the harness instantiates ModelNew, so the file needs "
                                    "class ModelNew(nn.Module) (or ModelNew = YourClass)"))
    return _dedupe(findings)


def rejecting(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == REJECT]
