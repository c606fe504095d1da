"""What evaluation executes in a solution file, found from its AST (used by the static rules).

The harness imports the file (module-level code runs), constructs ``ModelNew``, calls
``prepare`` once and then ``forward``. It never calls the file's own ``get_inputs`` or
``get_init_inputs``, nor anything else nobody refers to, so the static rules judge only:

* module-level code, except an ``if __name__ == "__main__":`` block (the file is imported,
  never run as a script);
* the class ``ModelNew`` is bound to (``class ModelNew`` or ``ModelNew = SomeClass``), every
  method of it, and, transitively, every top-level function or class that judged code
  refers to (by name, as an attribute name, or as a string equal to its name);
* top-level functions with decorators (a decorator runs at import and may register them).

Within that, *initialization code* may use any torch API: ``__init__`` and ``prepare`` of
``nn.Module`` classes, class bodies, module-level code, and the functions and methods that
only ever get called directly (``f(...)``, ``self.f(...)``) from initialization code. A
function that is passed around as a value, called from a lambda or a nested function, or not
called by name at all (``forward``, hooks) is *run code*: it may run with inputs.

A file that binds no ``ModelNew`` (a helper module of a workspace) is judged whole, as run code
outside ``__init__``/``prepare``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

MODEL_NEW = "ModelNew"
INIT_METHODS = ("__init__", "prepare")

_Def = (ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass
class Reach:
    skipped: set[int] = field(default_factory=set)
    """ids of top-level defs, classes and ``__main__`` blocks evaluation never executes."""
    init_code: set[int] = field(default_factory=set)
    """ids of function nodes (top-level functions, methods of top-level classes) that are
    initialization code."""
    model_new: str | None = None
    """The local class ModelNew is bound to (its own name for ``class ModelNew``), if any."""
    binds_model_new: bool = False


def binds_model_new(tree: ast.Module) -> tuple[bool, str | None]:
    """Does module-level code bind ``ModelNew`` (a class, an assignment, an import), and to which
    local class (None when it is not a plain local class name)?"""
    found, target = False, None
    for node in _module_level(tree):
        if isinstance(node, ast.ClassDef) and node.name == MODEL_NEW:
            found, target = True, MODEL_NEW
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == MODEL_NEW for t in targets):
                found = True
                target = node.value.id if isinstance(node.value, ast.Name) else None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == MODEL_NEW for a in node.names):
                found, target = True, None
    return found, target


def reach(tree: ast.Module) -> Reach:
    funcs = {n.name: n for n in tree.body if isinstance(n, _Def)}
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    mains = [n for n in tree.body if _is_main_block(n)]
    found, target = binds_model_new(tree)
    r = Reach(model_new=target if target in classes else None, binds_model_new=found)

    # units: module-level code, each top-level function, each class body, each method
    methods: dict[str, list[ast.FunctionDef]] = {}
    for c in classes.values():
        for m in c.body:
            if isinstance(m, _Def):
                methods.setdefault(m.name, []).append(m)
    refs: dict[int, list[tuple[str, bool]]] = {}  # unit id -> [(name, direct call)]
    module_refs = [ref for n in tree.body if not isinstance(n, (*_Def, ast.ClassDef)) and n not in mains
                   for ref in _refs(n)]
    for f in funcs.values():
        refs[id(f)] = _refs(f, body_only=True)
    for c in classes.values():
        refs[id(c)] = [ref for n in (*c.bases, *c.keywords, *c.decorator_list,
                                     *(s for s in c.body if not isinstance(s, _Def))) for ref in _refs(n)]
        for m in c.body:
            if isinstance(m, _Def):
                refs[id(m)] = _refs(m, body_only=True)

    # which top-level defs are executed at all
    roots = {r.model_new} if r.model_new else set(funcs) | set(classes)
    roots |= {name for name, f in funcs.items() if f.decorator_list}
    live: set[str] = set()
    todo = list(roots) + [name for name, _ in module_refs]
    while todo:
        name = todo.pop()
        if name in live or (name not in funcs and name not in classes):
            continue
        live.add(name)
        if name in funcs:
            todo.extend(n for n, _ in refs[id(funcs[name])])
        else:
            c = classes[name]
            todo.extend(n for n, _ in refs[id(c)])
            for m in c.body:
                if isinstance(m, _Def):
                    todo.extend(n for n, _ in refs[id(m)])
    r.skipped = {id(n) for name, n in (*funcs.items(), *classes.items()) if name not in live}
    r.skipped |= {id(n) for n in mains}

    # initialization code: a greatest fixed point over "only ever called directly from init code"
    module_classes = _module_classes(classes)
    init_roots = {id(m) for c in classes.values() if c.name in live and c.name in module_classes
                  for m in c.body if isinstance(m, _Def) and m.name in INIT_METHODS}
    init_roots |= {id(c) for c in classes.values() if c.name in live}
    units = [f for name, f in funcs.items() if name in live] + \
            [m for c in classes.values() if c.name in live for m in c.body
             if isinstance(m, _Def) and id(m) not in init_roots]
    callers: dict[int, list[tuple[int | None, bool]]] = {id(u): [] for u in units}  # None: module level
    live_units = [(None, module_refs)] + [(id(u), refs[id(u)]) for u in units] + \
                 [(uid, refs[uid]) for uid in init_roots]
    by_name: dict[str, list[ast.FunctionDef]] = {}
    for u in units:
        by_name.setdefault(u.name, []).append(u)
    for uid, unit_refs in live_units:
        for name, direct in unit_refs:
            for target_def in by_name.get(name, ()):
                callers[id(target_def)].append((uid, direct))
    init = {id(u) for u in units if callers[id(u)] and not u.decorator_list
            and all(direct for _, direct in callers[id(u)])}
    changed = True
    while changed:
        changed = False
        for u in units:
            if id(u) in init and any(c is not None and c not in init and c not in init_roots
                                     for c, _ in callers[id(u)]):
                init.discard(id(u))
                changed = True
    # a cycle of direct calls that nothing initializing enters (forward calling self.forward) is not init code
    entered: set[int | None] = {None, *init_roots}
    changed = True
    while changed:
        changed = False
        for u in units:
            if id(u) in init and id(u) not in entered and any(c in entered for c, _ in callers[id(u)]):
                entered.add(id(u))
                changed = True
    init &= entered
    r.init_code = init | (init_roots & {id(m) for ms in methods.values() for m in ms})
    return r


def _module_level(tree: ast.Module):
    """Module-level statements, including those nested in if/try/with blocks (not in defs)."""
    todo = list(tree.body)
    while todo:
        node = todo.pop(0)
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)) and not _is_main_block(node):
            for name in ("body", "orelse", "finalbody"):
                todo.extend(getattr(node, name, []))
            for h in getattr(node, "handlers", []):
                todo.extend(h.body)


def _is_main_block(node: ast.AST) -> bool:
    """``if __name__ == "__main__":`` (``==`` only: the body of ``if __name__ != "__main__":`` runs at import)"""
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    t = node.test
    sides = [t.left, *t.comparators]
    return (len(sides) == 2 and isinstance(t.ops[0], ast.Eq) and any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
            and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides))


def _refs(node: ast.AST, body_only: bool = False) -> list[tuple[str, bool]]:
    """Names a piece of code refers to, each with whether the reference is a direct call made
    by this code itself (``f(...)``, ``self.f(...)``; not from a nested function or lambda)."""
    out: list[tuple[str, bool]] = []
    roots = node.body if body_only and isinstance(node, _Def) else [node]
    if body_only and isinstance(node, _Def):  # decorators and defaults run where it is defined
        roots = [*node.body, *node.decorator_list, *node.args.defaults,
                 *(d for d in node.args.kw_defaults if d is not None)]  # None: a keyword-only argument without one
    direct_calls: set[int] = set()

    def walk(n: ast.AST, nested: bool) -> None:
        if isinstance(n, ast.Call) and not nested:
            f = n.func
            if isinstance(f, ast.Name) or (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                                           and f.value.id == "self"):
                direct_calls.add(id(f))
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            out.append((n.id, id(n) in direct_calls))
        elif isinstance(n, ast.Attribute):
            out.append((n.attr, id(n) in direct_calls))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier():
            out.append((n.value, False))
        inner = nested or isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        for child in ast.iter_child_nodes(n):
            walk(child, inner)

    for r in roots:
        walk(r, False)
    return out


def _module_classes(classes: dict[str, ast.ClassDef]) -> set[str]:
    """Local classes deriving from nn.Module (by base name), transitively."""
    out: set[str] = set()
    changed = True
    while changed:
        changed = False
        for c in classes.values():
            if c.name in out:
                continue
            for b in c.bases:
                name = ast.unparse(b)
                if name.endswith("Module") or name in out:
                    out.add(c.name)
                    changed = True
                    break
    return out
