"""MODULE:FUNCTION models (dcd_deploy._factory_spec) and resolve_model with --weights.

Oracles: the user's network built directly from its source (importlib on the same file)
and its own forward; a mismatch listed by key; every failure of the user's code is one
ModelSpecError line naming the file or module and the function.
"""

from __future__ import annotations

import importlib.util
import pickle
import sys

import pytest
import torch
from _user_net import write_factory
from torch import nn

from dcd_deploy._factory_spec import build_from_factory, parse_factory_spec
from dcd_deploy.checkpoint import resolve_model
from dcd_deploy.errors import (
    CheckpointError,
    ModelSpecError,
    StateDictMismatchError,
    UnknownModelError,
    UnsafeCheckpointError,
)
from dcd_deploy.layers import DCDConv2d


def direct(path):
    """The file's build() imported by hand: the oracle for what the factory returns."""
    spec = importlib.util.spec_from_file_location("oracle_tiny", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build().eval()


@pytest.fixture
def factory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return write_factory(tmp_path)


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("mynet.py:build", ("mynet.py", "build", True)),
        ("path/to/net.py:nets.build", ("path/to/net.py", "nets.build", True)),
        ("pkg.nets:build", ("pkg.nets", "build", False)),
        ("mobilenetv2_100_dcd", None),
        ("ckpt.pt", None),
        ("mynet.py:1build", None),
        ("mynet.py:", None),
        (":build", None),
        ("mynet.py:build()", ("mynet.py", "build", True)),
        ("pkg.nets:make.build(10, w=0.5)", ("pkg.nets", "make.build", False)),
    ],
)
def test_parse(spec, expected):
    parsed = parse_factory_spec(spec)
    assert (None if parsed is None else (parsed.module, parsed.function, parsed.is_file)) == expected


def test_literal_arguments_in_the_spec_as_gunicorn_takes_them():
    parsed = parse_factory_spec("net.py:build(10, width=0.5, act='silu', cfg={'k': (1, None)}, on=True)")
    assert parsed.args == (10,) and dict(parsed.kwargs) == {
        "width": 0.5,
        "act": "silu",
        "cfg": {"k": (1, None)},
        "on": True,
    }
    assert parsed.name == "net:build(10, width=0.5, act='silu', cfg={'k': (1, None)}, on=True)"
    assert parse_factory_spec("net.py:build").args == () and parse_factory_spec("net.py:build").name == "net:build"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("net.py:build(n=__import__('os').system('true'))", "must be Python literals"),
        ("net.py:build(n=x)", "must be Python literals"),
        ("net.py:build(*[1])", "must be Python literals"),
        ("net.py:build(**{'n': 1})", r"\*\*kwargs cannot be given"),
        ("net.py:build(n=1", "the parentheses closed at the end"),
        ("net.py:build(n=1) ", "the parentheses closed at the end"),
    ],
)
def test_arguments_that_are_no_literals_are_refused_without_running(spec, message):
    with pytest.raises(ModelSpecError, match=message):
        parse_factory_spec(spec)


def test_the_factory_is_called_with_the_specs_arguments(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "wide.py").write_text(
        "from torch import nn\n"
        "def build(num_classes, width=1, names=()):\n"
        "    net = nn.Linear(4 * width, num_classes)\n"
        "    net.names = names\n"
        "    return net\n"
    )
    net = build_from_factory("wide.py:build(3, width=2, names=['a', 'b'])")
    assert (net.in_features, net.out_features, net.names) == (8, 3, ["a", "b"])
    with pytest.raises(
        ModelSpecError,
        match=r"wide\.py:build\(num_classes, width=1, names=\(\)\) cannot take \(3, depth=2\): got an unexpected keyword argument .depth.",
    ):
        build_from_factory("wide.py:build(3, depth=2)")
    with pytest.raises(ModelSpecError, match=r"takes required arguments \(num_classes\); give them in MODEL"):
        build_from_factory("wide.py:build")


def test_an_existing_file_with_a_colon_is_not_a_factory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.pt:build").write_bytes(b"x")
    assert parse_factory_spec("a.pt:build") is None


def test_file_factory_builds_the_users_model(factory):
    model = build_from_factory("tiny.py:build")
    assert type(model).__name__ == "TinyNet" and not model.training
    assert sum(isinstance(m, DCDConv2d) for m in model.modules()) == 1
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model(x), direct(factory)(x), rtol=0, atol=0)  # build() seeds itself


def test_attribute_path_and_path_with_directories(factory, tmp_path):
    sub = tmp_path / "sub"
    sub.mkdir()
    write_factory(sub, "net")
    assert type(build_from_factory("sub/net.py:nets.build")).__name__ == "TinyNet"
    assert type(build_from_factory(f"{factory}:TinyNet")).__name__ == "TinyNet"  # a class is a factory too


def test_dotted_module(tmp_path, monkeypatch):
    pkg = tmp_path / "userpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    write_factory(pkg, "nets")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "userpkg", raising=False)
    monkeypatch.delitem(sys.modules, "userpkg.nets", raising=False)
    assert type(build_from_factory("userpkg.nets:build")).__name__ == "TinyNet"


BROKEN = {
    "syntax.py": ("def build(:\n", "build", r"importing syntax\.py failed: SyntaxError in syntax\.py, line 1"),
    "raises.py": (
        "def build():\n    x = 1\n    return x / 0\n",
        "build",
        r"raises\.py:build raised ZeroDivisionError: division by zero \(at raises\.py, line 3\)",
    ),
    "returns.py": (
        "def build():\n    return (1, 2)\n",
        "build",
        r"returns\.py:build returned a value of type tuple, not a torch\.nn\.Module",
    ),
    "typo.py": ("def build():\n    pass\n", "buidl", r"typo\.py has no function 'buidl'; did you mean build\?"),
    "none.py": ("def make():\n    pass\n", "build", r"none\.py has no function 'build' \(it defines make\)"),
    "args.py": ("def build(width):\n    pass\n", "build", r"args\.py:build takes required arguments \(width\)"),
    "notfn.py": ("build = 3\n", "build", r"notfn\.py:build is a value of type int, not a function"),
    "dep.py": (
        "import no_such_dependency_xyz\n",
        "build",
        r"importing dep\.py failed: ModuleNotFoundError: No module named 'no_such_dependency_xyz' "
        r"\(at dep\.py, line 1\)",
    ),
    "exits.py": ("import sys\nsys.exit(3)\n", "build", r"importing exits\.py failed: SystemExit\(3\)"),
    "toplevel.py": (
        "raise RuntimeError('bad config')\n",
        "build",
        r"importing toplevel\.py failed: RuntimeError: bad config \(at toplevel\.py, line 1\)",
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_every_failure_is_one_line_naming_file_and_function(tmp_path, monkeypatch, name):
    monkeypatch.chdir(tmp_path)
    source, function, message = BROKEN[name]
    (tmp_path / name).write_text(source)
    with pytest.raises(ModelSpecError, match=message) as info:
        build_from_factory(f"{name}:{function}")
    assert "\n" not in str(info.value)


def test_missing_file_and_module(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelSpecError, match=r"nope\.py: no such file"):
        build_from_factory("nope.py:build")
    with pytest.raises(ModelSpecError, match=r"no_such_pkg\.nets: no such module"):
        build_from_factory("no_such_pkg.nets:build")


# -- resolve_model: weights, errors that say what to do -------------------------------------
def test_weights_load_strictly_and_drop_module_prefix(factory, tmp_path):
    trained = direct(factory)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p))  # other weights than build() gives
    torch.save({"module." + k: v for k, v in trained.state_dict().items()}, tmp_path / "w.pt")
    model = resolve_model("tiny.py:build", weights=tmp_path / "w.pt", input_size=32)
    x = torch.randn(2, 3, 32, 32)
    torch.testing.assert_close(model(x), trained(x), rtol=0, atol=0)


def test_weights_that_do_not_fit(factory, tmp_path):
    sd = direct(factory).state_dict()
    wrong_key = dict(sd)
    wrong_key["extra.weight"] = wrong_key.pop("head.weight")
    torch.save(wrong_key, tmp_path / "keys.pt")
    with pytest.raises(
        StateDictMismatchError,
        match=r"keys\.pt does not fit tiny:build: 1 missing \(head\.weight\), 1 unexpected \(extra\.weight\)",
    ):
        resolve_model("tiny.py:build", weights=tmp_path / "keys.pt")
    wrong_shape = dict(sd, **{"head.weight": torch.zeros(7, 16)})
    torch.save(wrong_shape, tmp_path / "shape.pt")
    with pytest.raises(
        StateDictMismatchError, match=r"1 mis-shaped \(head\.weight: checkpoint \(7, 16\) vs model \(5, 16\)\)"
    ):
        resolve_model("tiny.py:build", weights=tmp_path / "shape.pt")


class _Payload:
    def __reduce__(self):
        return (print, ("ran",))


def test_weights_file_is_read_safely(factory, tmp_path):
    (tmp_path / "evil.pt").write_bytes(pickle.dumps({"state_dict": {}, "x": _Payload()}))
    with pytest.raises(UnsafeCheckpointError, match="--trust-checkpoint"):
        resolve_model("tiny.py:build", weights=tmp_path / "evil.pt")


def test_errors_say_what_to_do(factory, tmp_path):
    torch.save(direct(factory).state_dict(), tmp_path / "sd.pt")
    with pytest.raises(
        CheckpointError,
        match=r"pass --arch NAME .*or give your own model as MODULE:FUNCTION "
        r"\(e\.g\. mynet\.py:build\) with --weights .*sd\.pt",
    ):
        resolve_model(str(tmp_path / "sd.pt"))
    with pytest.raises(UnknownModelError, match=r"unknown model 'TinyNet'.*MODULE:FUNCTION"):
        resolve_model(str(tmp_path / "sd.pt"), arch="TinyNet")
    with pytest.raises(CheckpointError, match=r"tiny\.py is Python source.*tiny\.py:FUNCTION"):
        resolve_model("tiny.py")
    with pytest.raises(CheckpointError, match=r"--arch names a zoo architecture"):
        resolve_model("tiny.py:build", arch="mobilenetv2_035")
    with pytest.raises(CheckpointError, match=r"a model of your own: MODULE:FUNCTION"):
        resolve_model("tinynet")


def test_trusted_pickled_module_is_the_model(factory, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))  # the class must be importable to unpickle it
    import tiny  # noqa: F401  (torch.save pickles the class by its module name)

    model = sys.modules["tiny"].build().eval()
    torch.save(model, tmp_path / "whole.pt")
    with pytest.raises(UnsafeCheckpointError, match=r"tiny\.TinyNet.*--trust-checkpoint"):
        resolve_model(str(tmp_path / "whole.pt"))
    with pytest.warns(UserWarning, match="runs any code"):
        loaded = resolve_model(str(tmp_path / "whole.pt"), trust_checkpoint=True, input_size=32)
    assert type(loaded).__name__ == "TinyNet" and isinstance(loaded, nn.Module)
    x = torch.randn(1, 3, 32, 32)
    torch.testing.assert_close(loaded(x), model(x), rtol=0, atol=0)
    monkeypatch.delitem(sys.modules, "tiny")


def test_zoo_name_with_weights(tmp_path):
    from dcd_deploy import create_model

    src = create_model("mobilenetv2_035")
    torch.save(src.state_dict(), tmp_path / "z.pt")
    model = resolve_model("mobilenetv2_035", weights=tmp_path / "z.pt", input_size=32)
    x = torch.randn(1, 3, 32, 32)
    torch.testing.assert_close(model(x), src(x), rtol=0, atol=0)
