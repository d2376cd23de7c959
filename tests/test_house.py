"""The house rules that a reader can check with grep, checked here (docs/design.md#layout).

* no function or method in ``dcd_deploy/`` with a body longer than
  :data:`MAX_FUNCTION_LINES` lines (its signature and docstring not counted: an API's
  parameter list and their documentation are declaration, not logic);
* no module imports another subpackage's underscore names (a subpackage's private
  modules are its own business; what others need is public in its ``__init__``);
* one place builds an ONNX Runtime session and one place compiles an OpenVINO model.

The C++ side has its own limit (80 lines), checked by ``make lint-cpp``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "dcd_deploy"
MAX_FUNCTION_LINES = 60


def _modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _code_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of the body: from its first statement after the docstring to the end (the
    signature, one parameter a line once the formatter splits it, is declaration)."""
    body = fn.body
    if (
        len(body) > 1
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
        and isinstance(body[0].value.value, str)
    ):
        body = body[1:]
    return fn.end_lineno - body[0].lineno + 1


def test_the_checks_see_the_package():
    assert len(_modules()) > 50
    source = "def f(\n    a,\n    b,\n):\n    '''doc\n    more'''\n    x = a\n    return x + b\n"
    assert _code_lines(ast.parse(source).body[0]) == 2


def test_no_function_is_longer_than_the_limit():
    long = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(node) > MAX_FUNCTION_LINES:
                long.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({_code_lines(node)} lines)")
    assert not long, "\n".join(long)


def _subpackage(path: Path) -> str:
    rel = path.relative_to(PACKAGE).parts
    return rel[0] if len(rel) > 1 else ""


def _resolve(path: Path, node: ast.ImportFrom) -> list[str]:
    """The dotted module path an import reads from, relative to ``dcd_deploy``."""
    if node.level == 0:
        parts = (node.module or "").split(".")
        return parts[1:] if parts[0] == "dcd_deploy" else []
    here = list(path.relative_to(PACKAGE).parts[:-1])
    base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
    return base + (node.module.split(".") if node.module else [])


def test_no_module_imports_another_subpackages_private_names():
    crossing = []
    for path in _modules():
        mine = _subpackage(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            target = _resolve(path, node)
            if not target and node.level == 0:
                continue  # a third-party import
            theirs = target[0] if len(target) > 1 or (target and (PACKAGE / target[0]).is_dir()) else ""
            if theirs == mine:
                continue
            private = [p for p in target if p.startswith("_") and not p.startswith("__")]
            private += [a.name for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
            if private and theirs:
                crossing.append(
                    f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {'.'.join(target)}: {', '.join(private)}"
                )
    assert not crossing, "\n".join(crossing)


def _calls(name: str) -> list[str]:
    """Where ``name(...)`` or ``x.name(...)`` is called in the package's code."""
    places = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                if (isinstance(f, ast.Attribute) and f.attr == name) or (isinstance(f, ast.Name) and f.id == name):
                    places.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return places


@pytest.mark.parametrize(
    "name, what", [("InferenceSession", "an ONNX Runtime session"), ("compile_model", "an OpenVINO compiled model")]
)
def test_one_place_builds_each_runtime(name, what):
    places = _calls(name)
    assert len(places) == 1, f"{what} is built in {len(places)} places: {places}"
