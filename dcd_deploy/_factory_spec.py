"""``MODULE:FUNCTION``: a model of the user's own, built by a function they name.

The commands take, wherever they take a MODEL, ``MODULE:FUNCTION`` as uvicorn and
gunicorn spell an application: ``MODULE`` is a Python file (``mynet.py``,
``path/to/net.py``) or an importable dotted module (``pkg.nets``; the current directory
is on the import path, as for uvicorn), and ``FUNCTION`` (an attribute path such as
``nets.build`` is allowed) is called and must return the :class:`torch.nn.Module`: with
no arguments, or with those the spec spells as gunicorn does, Python literals in a call
(``'mynet.py:build(num_classes=10, width=0.5)'``; read with :func:`ast.literal_eval`, so
no code in them runs). Weights come apart, from a checkpoint read with the safe loader
(``--weights FILE``, :func:`dcd_deploy.checkpoint.resolve_model`).

Importing the module and calling the function run the user's own code, because they
named it; a checkpoint never runs code. Whatever that code does wrong (a missing file, a
syntax error, an exception, a missing function, a result that is not a module) is one
:class:`~dcd_deploy.errors.ModelSpecError` naming the file or module and the function,
with the line of the user's file where it happened, not a traceback.
"""

from __future__ import annotations

import ast
import difflib
import functools
import importlib
import importlib.util
import inspect
import os
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ModelSpecError

if TYPE_CHECKING:
    from torch import nn

_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
#: ``FUNCTION`` or ``FUNCTION(ARGUMENTS)``.
_CALL = re.compile(r"(?P<function>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)(?:\((?P<arguments>.*)\))?", re.DOTALL)
#: Longest part of a message quoted from the user's exception.
_MAX_QUOTED = 300


@dataclass(frozen=True)
class FactorySpec:
    """A parsed ``MODULE:FUNCTION``.

    Attributes:
        spec: as given.
        module: the file path or dotted module name.
        function: the attribute path of the factory inside the module.
        is_file: ``module`` is a file path (it ends in ``.py`` or contains a separator).
        args: the literal positional arguments the spec gives the function.
        kwargs: its literal keyword arguments, as ``(name, value)`` pairs.
        arguments: the arguments as spelled (``""`` without any).
    """

    spec: str
    module: str
    function: str
    is_file: bool
    args: tuple = ()
    kwargs: tuple = ()
    arguments: str = ""

    @property
    def name(self) -> str:
        """A short name for tables: ``mynet:build`` for ``path/to/mynet.py:build``."""
        base = Path(self.module).stem if self.is_file else self.module
        return f"{base}:{self.function}" + (f"({self.arguments})" if self.arguments else "")


def parse_factory_spec(spec: str) -> FactorySpec | None:
    """``spec`` as ``MODULE:FUNCTION``, or None when it is not spelled so.

    An existing file is never a factory spec (a checkpoint may have ``:`` in its name).
    """
    if ":" not in spec or os.path.exists(spec):
        return None
    head = spec.partition("(")[0]  # the arguments may hold ":" (a dict)
    module, _, function = head.rpartition(":")
    spelled = spec[len(module) + 1 :]  # FUNCTION and its arguments, if any
    call = _CALL.fullmatch(spelled)
    if module and call is None and re.match(r"[A-Za-z_][\w.]*\(", spelled):
        raise ModelSpecError(f"{spec}: expected MODULE:FUNCTION(ARGUMENTS), the parentheses closed at the end")
    if not module or call is None:
        return None
    is_file = module.endswith(".py") or "/" in module or os.sep in module
    if not is_file and not _DOTTED.fullmatch(module):
        return None
    arguments = call["arguments"]
    args, kwargs = _literal_arguments(spec, arguments) if arguments is not None else ((), ())
    return FactorySpec(spec, module, call["function"], is_file, args, kwargs, (arguments or "").strip())


def _literal_arguments(spec: str, arguments: str) -> tuple[tuple, tuple]:
    """``(args, kwargs pairs)`` of ``FUNCTION(ARGUMENTS)``, each a Python literal.

    Raises:
        ModelSpecError: not a call's arguments, or one that is no literal.
    """
    try:
        call = ast.parse(f"f({arguments})", mode="eval").body
    except SyntaxError:
        call = None
    if not isinstance(call, ast.Call) or any(isinstance(a, ast.Starred) for a in call.args):
        raise ModelSpecError(f"{spec}: the factory's arguments must be Python literals, e.g. build(num_classes=10)")
    if any(k.arg is None for k in call.keywords):
        raise ModelSpecError(f"{spec}: **kwargs cannot be given; name each argument")
    try:
        args = tuple(ast.literal_eval(a) for a in call.args)
        kwargs = tuple((k.arg, ast.literal_eval(k.value)) for k in call.keywords)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ModelSpecError(
            f"{spec}: the factory's arguments must be Python literals (numbers, strings, True/False/None, "
            "tuples, lists, dicts), e.g. build(num_classes=10); no names or calls"
        ) from None
    return args, kwargs


def build_from_factory(spec: str | FactorySpec) -> nn.Module:
    """Import ``MODULE``, call ``FUNCTION()`` and return the module it builds, in eval mode.

    Raises:
        ModelSpecError: not spelled ``MODULE:FUNCTION``, a missing file or module, a
            syntax error or exception while importing, no such function, a function that
            needs arguments, raises, or returns something other than an ``nn.Module``.
    """
    parsed = spec if isinstance(spec, FactorySpec) else parse_factory_spec(spec)
    if parsed is None:
        raise ModelSpecError(
            f"{spec}: expected MODULE:FUNCTION (a Python file or module, and the function "
            "that returns the model, e.g. mynet.py:build)"
        )
    module = _import(parsed)
    factory = _attribute(module, parsed)
    where = f"{parsed.module}:{parsed.function}"
    if not callable(factory):
        raise ModelSpecError(
            f"{where} is a value of type {type(factory).__name__}, not a function that returns the model"
        )
    _check_arguments(factory, where, parsed)
    try:
        model = _run_user_code(functools.partial(factory, *parsed.args, **dict(parsed.kwargs)), parsed)
    except _UserCodeFailed as exc:
        raise ModelSpecError(f"{where} raised {exc.text}") from None
    from torch import nn

    if not isinstance(model, nn.Module):
        raise ModelSpecError(f"{where} returned a value of type {type(model).__name__}, not a torch.nn.Module")
    from .state_dict import unwrap

    return unwrap(model).eval()  # a torch.compile'd or DataParallel model: the module it runs


def _import(parsed: FactorySpec):
    if parsed.is_file:
        return _import_file(parsed)
    return _import_module(parsed)


def _import_file(parsed: FactorySpec):
    path = Path(parsed.module)
    if not path.exists():
        raise ModelSpecError(f"{parsed.module}: no such file (MODEL {parsed.spec} names a Python file and a function)")
    if not path.is_file():
        raise ModelSpecError(f"{parsed.module} is not a regular file")
    name = f"_dcd_deploy_user.{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelSpecError(f"{parsed.module} cannot be imported as Python source (name it .py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses, pickling and typing look modules up by name
    try:
        _run_user_code(spec.loader.exec_module, parsed, module)
    except _UserCodeFailed as exc:
        del sys.modules[name]
        raise ModelSpecError(f"importing {parsed.module} failed: {exc.text}") from None
    return module


def _import_module(parsed: FactorySpec):
    try:
        return _run_user_code(importlib.import_module, parsed, parsed.module)
    except _UserCodeFailed as exc:
        wanted = parsed.module.split(".")
        if exc.missing is not None and exc.missing.split(".") == wanted[: len(exc.missing.split("."))]:
            raise ModelSpecError(
                f"{parsed.module}: no such module (nor a file: a file path ends in .py); MODEL "
                f"{parsed.spec} names a Python file or an importable module, and a function"
            ) from None
        raise ModelSpecError(f"importing {parsed.module} failed: {exc.text}") from None


def _attribute(module, parsed: FactorySpec):
    obj = module
    parts = parsed.function.split(".")
    for i, part in enumerate(parts):
        if not hasattr(obj, part):
            owner = parsed.module if i == 0 else f"{parsed.module}:{'.'.join(parts[:i])}"
            names = [n for n in dir(obj) if not n.startswith("_") and callable(getattr(obj, n, None))]
            own = [n for n in names if getattr(getattr(obj, n), "__module__", None) == getattr(module, "__name__", "")]
            close = difflib.get_close_matches(part, names, n=3, cutoff=0.5)
            hint = (
                f"; did you mean {', '.join(close)}?" if close else f" (it defines {', '.join(own[:8])})" if own else ""
            )
            raise ModelSpecError(f"{owner} has no function {part!r}{hint}")
        obj = getattr(obj, part)
    return obj


def _check_arguments(factory, where: str, parsed: FactorySpec) -> None:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # builtins and some C callables: just call them
        return
    if parsed.args or parsed.kwargs:
        try:
            signature.bind(*parsed.args, **dict(parsed.kwargs))
        except TypeError as exc:
            raise ModelSpecError(f"{where}{signature} cannot take ({parsed.arguments}): {exc}") from None
        return
    required = [
        p.name
        for p in signature.parameters.values()
        if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    if required:
        raise ModelSpecError(
            f"{where} takes required arguments ({', '.join(required)}); give them in MODEL as Python "
            f"literals, e.g. '{parsed.module}:{parsed.function}({required[0]}=...)' (quoted for the shell), "
            "or give them defaults"
        )


class _UserCodeFailed(Exception):
    """The user's code failed; ``missing``: the module a ModuleNotFoundError names."""

    def __init__(self, text: str, missing: str | None = None):
        super().__init__(text)
        self.text, self.missing = text, missing


def _run_user_code(fn, parsed: FactorySpec, *args):
    """``fn(*args)`` with the user's module directory importable; any failure (even
    ``sys.exit``) becomes :class:`_UserCodeFailed` carrying one line."""
    added = None
    home = str(Path(parsed.module).resolve().parent) if parsed.is_file else os.getcwd()
    if home not in sys.path:
        sys.path.insert(0, home)
        added = home
    try:
        return fn(*args)
    except SyntaxError as exc:
        name = _short(exc.filename) if exc.filename else parsed.module
        where = f"{name}, line {exc.lineno}" if exc.lineno else name
        raise _UserCodeFailed(f"{type(exc).__name__} in {where}: {exc.msg}") from None
    except SystemExit as exc:
        raise _UserCodeFailed(f"SystemExit({exc.code!r}) (the code called sys.exit)") from None
    except Exception as exc:
        missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
        raise _UserCodeFailed(_describe(exc, parsed), missing) from None
    finally:
        if added is not None and added in sys.path:
            sys.path.remove(added)


def _describe(exc: BaseException, parsed: FactorySpec) -> str:
    """``Type: message (at file, line N)``: the deepest frame in the user's own code."""
    text = " ".join(str(exc).split())
    if len(text) > _MAX_QUOTED:
        text = text[: _MAX_QUOTED - 3] + "..."
    line = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    package = str(Path(__file__).resolve().parent)
    frames = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith(package) and "importlib" not in f.filename
    ]
    if parsed.is_file:
        target = str(Path(parsed.module).resolve())
        mine = [f for f in frames if os.path.abspath(f.filename) == target]
        frames = mine or frames
    if frames:
        f = frames[-1]
        line += f" (at {_short(f.filename)}, line {f.lineno})"
    return line


def _short(filename: str) -> str:
    try:
        return os.path.relpath(filename)
    except ValueError:
        return filename
