"""Static checks of a reward source (ast only: the user's code is never executed here)."""
from __future__ import annotations

import ast
from dataclasses import dataclass

PASSED = ("data_source", "solution_str", "ground_truth", "extra_info")
CALL = "{name}(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **kwargs)"


@dataclass(frozen=True)
class Problem:
    lineno: int | None  # 1-based line in the source, None when it is about the file as a whole
    message: str
    severity: str = "error"  # "error": it will not work; "warning": it works but is fragile


def check_source(source: str, name: str = "compute_score") -> list[Problem]:
    """Return the problems of `source` as a VERL reward module defining `name` (empty list: fine)."""
    if not isinstance(source, str):
        return [Problem(None, f"the source must be text, not {type(source).__name__}")]
    try:
        tree = ast.parse(source, filename="reward.py")
    except SyntaxError as exc:
        return [Problem(exc.lineno, f"SyntaxError: {exc.msg}")]
    except ValueError as exc:  # e.g. NUL bytes
        return [Problem(None, f"the source cannot be parsed: {exc}")]
    binding = _last_binding(tree.body, name)
    if binding is None:
        return [Problem(None, f"no top-level function named {name!r}; VERL calls {CALL.format(name=name)}")]
    if isinstance(binding, ast.ClassDef):
        return [Problem(binding.lineno, f"{name!r} is a class; it must be a function returning a number or a dict")]
    if not isinstance(binding, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []  # an import or an assignment (e.g. VERL's default_compute_score): checked when it runs
    if binding.decorator_list:
        return []  # a decorator may change the signature
    return _check_signature(binding, name) + _check_body(binding, name)


def _last_binding(body: list[ast.stmt], name: str) -> ast.AST | None:
    """The last top-level statement binding `name` (looking into if/try/with blocks, not functions)."""
    found: ast.AST | None = None
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            found = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names):
                found = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(n, ast.Name) and n.id == name for t in targets for n in ast.walk(t)):
                found = node
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            blocks = [node.body, getattr(node, "orelse", []), getattr(node, "finalbody", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])]
            for block in blocks:
                inner = _last_binding(block, name)
                if inner is not None:
                    found = inner
    return found


def _check_signature(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> list[Problem]:
    a, line, call = fn.args, fn.lineno, CALL.format(name=name)
    problems: list[Problem] = []
    posonly = [p.arg for p in a.posonlyargs]
    keywordable = [p.arg for p in a.args] + [p.arg for p in a.kwonlyargs]
    for p in PASSED:
        if p in posonly:
            problems.append(Problem(line, f"{p!r} is positional-only (before '/'), but VERL passes it by keyword: "
                                          f"{call}"))
        elif p not in keywordable and a.kwarg is None:
            how = "only takes *args" if a.vararg is not None and not keywordable else "has no parameter"
            problems.append(Problem(line, f"{name}() {how} {p!r} and no **kwargs, but VERL calls it by keyword: "
                                          f"{call}"))
    # parameters VERL never passes must have defaults
    positional = a.posonlyargs + a.args
    no_default = positional[: len(positional) - len(a.defaults)]
    no_default += [p for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=False) if d is None]
    for p in no_default:
        if p.arg == "extra_info":
            problems.append(Problem(line, "extra_info has no default; VERL's main_eval calls "
                                          f"{name}(data_source, solution_str, ground_truth) without it: "
                                          "use extra_info=None", "warning"))
        elif p.arg not in PASSED:
            problems.append(Problem(line, f"parameter {p.arg!r} has no default, but VERL only passes "
                                          f"{', '.join(PASSED)} (and reward_kwargs)"))
    if a.kwarg is None and not any(pr.severity == "error" for pr in problems):
        problems.append(Problem(line, "no **kwargs: VERL passes extra keyword arguments to rewards in some setups "
                                      "(reward_kwargs, reward_router_address); add **kwargs", "warning"))
    return problems


def _own_nodes(fn: ast.AST) -> list[ast.AST]:
    """The nodes of a function body, not descending into nested functions, lambdas or classes."""
    out: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        out.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return out


def _check_body(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> list[Problem]:
    nodes = _own_nodes(fn)
    for node in nodes:
        if isinstance(node, (ast.Yield, ast.YieldFrom)):
            return [Problem(node.lineno, f"{name}() contains `yield`, so it returns a generator, not a score")]
    returns = any(isinstance(n, ast.Return) and n.value is not None for n in nodes)
    if not returns and not any(isinstance(n, ast.Raise) for n in nodes):
        return [Problem(fn.lineno, f"{name}() never returns a value (it would return None)")]
    return []
