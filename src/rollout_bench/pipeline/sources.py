"""A job's source files: the import closure of its entry modules (the rules' `code` inputs).

Hand-kept lists drifted from the imports, and an edit to an unlisted module left stale results that
looked current. Modules are named relative to the package ("generation", "backends.flex"); an entry
"module:function" is that module plus the imports inside that one function (a CLI handler, whose
module's other handlers import other jobs' code). Every `import`, `from ... import` and
`importlib.import_module("literal")` counts, inside functions too: the lazy imports are the ones
the job's code path runs. Package `__init__` files on the way are part of the closure, since importing
a submodule runs them.
"""
import ast
from functools import cache
from pathlib import Path

from .. import ROOT

PACKAGE = __name__.partition(".")[0]
PKG_DIR = Path(__file__).resolve().parents[1]
# Files a module reads at run time; a job whose closure holds the module depends on them too.
DATA = {f"{PACKAGE}.core.stats": ("workflow/schemas/stats.schema.json",)}


def _full(name: str) -> str:
    return name if name == PACKAGE or name.startswith(PACKAGE + ".") else f"{PACKAGE}.{name}"


def _file(module: str) -> Path | None:
    rel = Path(*module.split(".")[1:])
    for p in (PKG_DIR / rel / "__init__.py", (PKG_DIR / rel).with_suffix(".py")):
        if p.is_file():
            return p
    return None


def _is_package(module: str) -> bool:
    f = _file(module)
    return f is not None and f.name == "__init__.py"


@cache
def _tree(module: str) -> ast.Module:
    f = _file(module)
    if f is None:
        raise ModuleNotFoundError(f"{module}: no such module under {PKG_DIR}")
    return ast.parse(f.read_text(), filename=str(f))


def _resolve(module: str, node: ast.ImportFrom) -> list[str]:
    base = module if _is_package(module) else module.rpartition(".")[0]
    if node.level:
        for _ in range(node.level - 1):
            base = base.rpartition(".")[0]
        prefix = f"{base}.{node.module}" if node.module else base
    else:
        prefix = node.module or ""
    # `from pkg import name`: name is a submodule, or an attribute of pkg (then pkg is what runs)
    return [f"{prefix}.{a.name}" if _file(f"{prefix}.{a.name}") else prefix for a in node.names]


def _names(module: str, node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return _resolve(module, node)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "import_module"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return [node.args[0].value]
    return []


def imports(module: str, body: list[ast.stmt] | None = None, lazy: bool = False) -> list[tuple[str, bool]]:
    """(module, lazy) for each in-package import in `body` (default: the module's), lazy when inside a function."""
    module = _full(module)
    out = []

    def visit(node, in_function):
        for name in _names(module, node):
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                out.append((name, in_function))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    for stmt in _tree(module).body if body is None else body:
        visit(stmt, lazy)
    return out


def _function(module: str, name: str) -> ast.FunctionDef:
    for stmt in _tree(module).body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
            return stmt
    raise LookupError(f"{module} has no function {name!r}")


def closure(entries, skip_lazy=()) -> list[str]:
    """Repo-relative paths of the files `entries` run, sorted.

    `skip_lazy`: modules (and their submodules) not followed where only a function imports them, e.g.
    another backend's code, which the trainer imports inside its `if backend == ...` branch.
    """
    skip = tuple(_full(s) for s in skip_lazy)
    seen: set[str] = set()
    todo: list[tuple[str, bool]] = []

    def skipped(name, lazy):
        return lazy and any(name == s or name.startswith(s + ".") for s in skip)

    for entry in entries:
        module, _, func = entry.partition(":")
        module = _full(module)
        if func:
            top = [s for s in _tree(module).body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))]
            seen.add(module)
            todo += [(module.rpartition(".")[0], False)]
            todo += imports(module, top) + [(n, False) for n, _ in imports(module, _function(module, func).body)]
        else:
            todo.append((module, False))
    while todo:
        name, lazy = todo.pop()
        while _file(name) is None and "." in name:  # `import pkg.mod.attr`-style names: the module part runs
            name = name.rpartition(".")[0]
        if name in seen or skipped(name, lazy):
            continue
        seen.add(name)
        todo += imports(name)
        if "." in name:
            todo.append((name.rpartition(".")[0], False))
    files = {str(_file(m).relative_to(ROOT)) for m in seen}
    files.update(f for m in seen for f in DATA.get(m, ()))
    return sorted(files)


def other_backends(backend: str, names) -> list[str]:
    """Code only other backends run: their `backends.<name>` module, and the engine and its diagnostics
    (the autotune pass and the decode profile, diagnostics/) unless `backend` is flex."""
    own = {name: [f"backends.{name}"] for name in names}
    own.setdefault("flex", []).extend(["engine", "diagnostics"])
    return [m for name, mods in own.items() if name != backend for m in mods]
