"""The commands with a model of the user's own (MODULE:FUNCTION, --weights), --input-size HxW
and --dynamic-size: in-process with CliRunner, and the installed dcd-export once.

Oracles: the parity check of the real export (ONNX Runtime against float64 PyTorch);
the keywords the exporter receives (a stand-in exporter records them); click's usage
errors (status 2) for bad sizes, one ``Error:`` line and status 1 for the rest.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
import torch
from _cli import one_error_line
from _user_net import write_factory
from click.testing import CliRunner

import dcd_deploy.exporters
from dcd_deploy.cli._input_size import InputSize
from dcd_deploy.cli.export import main as export_main
from dcd_deploy.cli.validate import main as validate_main

SIZE = "32"


def run(cmd, args):
    return CliRunner().invoke(cmd, [str(a) for a in args])


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    """tiny.py and its trained-looking weights tiny.pt (other values than build() gives)."""
    d = tmp_path_factory.mktemp("user")
    path = write_factory(d)
    cwd = os.getcwd()
    os.chdir(d)
    try:
        from dcd_deploy._factory_spec import build_from_factory

        model = build_from_factory("tiny.py:build")
    finally:
        os.chdir(cwd)
    with torch.no_grad():
        g = torch.Generator().manual_seed(3)
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    torch.save(model.state_dict(), d / "tiny.pt")
    return d, path


@pytest.fixture
def in_user_dir(user_dir, monkeypatch):
    monkeypatch.chdir(user_dir[0])
    return user_dir[0]


@pytest.fixture(scope="module")
def exported(user_dir):
    d, _ = user_dir
    cwd = os.getcwd()
    os.chdir(d)
    try:
        result = run(export_main, ["tiny.py:build", "--weights", "tiny.pt", "--input-size", SIZE])
    finally:
        os.chdir(cwd)
    return result, d / "tiny.onnx"


def test_export_a_factory_with_weights(exported):
    result, out = exported
    assert result.exit_code == 0, result.output
    assert out.is_file() and f"wrote {out.name}" in result.stdout  # named after the file: tiny.onnx
    assert re.search(r"model +tiny:build \(TinyNet\): [\d.]+M params, input Nx3x32x32", result.stdout)
    assert re.search(r"parity +PASS", result.stdout)
    assert re.search(r"DCD +1 layers", result.stdout)


def test_validate_a_factory(exported, in_user_dir):
    _, out = exported
    result = run(validate_main, ["tiny.py:build", out, "--weights", "tiny.pt"])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stdout
    # the weights matter: without them the model computes something else
    result = run(validate_main, ["tiny.py:build", out])
    one_error_line(result, r"parity check failed: FAIL")


def test_weights_saved_by_training_code(exported, in_user_dir):
    # the same weights as tiny.pt, saved as a Lightning run and a torchvision reference
    # script save them: validate passes against the file exported from tiny.pt
    _, out = exported
    sd = torch.load("tiny.pt", weights_only=True)
    torch.save({"epoch": 9, "state_dict": {f"model.{k}": v for k, v in sd.items()}}, "lightning.ckpt")
    torch.save({"model": sd, "epoch": 9, "args": argparse.Namespace(lr=0.1)}, "reference.pth")
    for weights in ("lightning.ckpt", "reference.pth"):
        result = run(validate_main, ["tiny.py:build", out, "--weights", weights])
        assert result.exit_code == 0, (weights, result.output)
        assert "PASS" in result.stdout


#: A network of two image inputs (given without --inputs: refused, naming the way to give them).
TWO_INPUTS = """\
import torch
from dcd_deploy.layers import DCDConv2d


class Fuse(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = DCDConv2d(4, 8, 1)

    def forward(self, rgb, depth, scale=1.0):
        return self.conv(torch.cat([rgb, depth], 1)) * scale


def build():
    return Fuse()
"""


@pytest.mark.parametrize(
    "args, pattern",
    [
        (["nope.py:build"], r"nope\.py: no such file"),
        (["tiny.py:buidl"], r"tiny\.py has no function 'buidl'; did you mean build\?"),
        (["tiny.py"], r"tiny\.py is Python source.*tiny\.py:FUNCTION"),
        (["tiny.pt"], r"plain state dict .*MODULE:FUNCTION .*--weights tiny\.pt"),
        (["tiny.pt", "--arch", "TinyNet"], r"unknown model 'TinyNet'.*MODULE:FUNCTION"),
        (["tiny.py:build", "--arch", "mobilenetv2_035"], r"--arch names a zoo architecture"),
        (["tiny.py:build", "--weights", "missing.pt"], r"missing\.pt"),
        (["tiny.py:build", "--weights", "wrong.pt"], r"wrong\.pt does not fit tiny:build: 1 mis-shaped \(head\.bias"),
        (["broken.py:build"], r"importing broken\.py failed: SyntaxError in broken\.py, line 2"),
        (["raises.py:build"], r"raises\.py:build raised ValueError: no such width \(at raises\.py, line 2\)"),
        (["raises.py:make"], r"raises\.py:make returned a value of type str, not a torch\.nn\.Module"),
        (
            ["two.py:build"],
            r"two\.py:build: Fuse\.forward takes 2 inputs \(rgb, depth\); dcd-export, dcd-validate and dcd-bench "
            r"latency take one array per input with --inputs FILE \(a \.npz or a \.pt dict with keys rgb, depth, "
            r"axis 0 the batch\)",
        ),
    ],
)
def test_every_error_is_one_line(in_user_dir, args, pattern):
    d = in_user_dir
    (d / "broken.py").write_text("import torch\ndef build(:\n")
    (d / "raises.py").write_text("def build():\n    raise ValueError('no such width')\ndef make():\n    return 'x'\n")
    (d / "two.py").write_text(TWO_INPUTS)
    torch.save(
        {"head.bias": torch.zeros(3)} | {k: v for k, v in torch.load("tiny.pt").items() if k != "head.bias"},
        d / "wrong.pt",
    )
    result = run(export_main, args + ["--input-size", SIZE, "-o", "never.onnx"])
    one_error_line(result, pattern)
    assert not (d / "never.onnx").exists()


def test_output_must_not_be_the_factory_file(in_user_dir):
    result = run(export_main, ["tiny.py:build", "-o", "tiny.py"])
    one_error_line(result, r"same file as the input tiny\.py")


# -- --input-size HxW, --dynamic-size ------------------------------------------------------
@pytest.mark.parametrize(
    "text, size",
    [
        ("224", (224, 224)),
        ("256x320", (256, 320)),
        ("256X320", (256, 320)),
        ("64,48", (64, 48)),
        (" 32 x 16 ", (32, 16)),
    ],
)
def test_input_size_parses(text, size):
    assert InputSize(1, 1024).convert(text, None, None) == size


@pytest.mark.parametrize(
    "value, message",
    [
        ("0x5", "each side must be in the range 1<=x<=1024"),
        ("axb", "is not a size"),
        ("2000x5", "1<=x<=1024"),
        ("5x", "is not a size"),
        ("x5", "is not a size"),
        ("5x5x5", "is not a size"),
        ("-3", "is not a size"),
    ],
)
def test_bad_input_size_is_a_usage_error(value, message):
    result = run(export_main, ["tiny.py:build", "--input-size", value])
    assert result.exit_code == 2 and message in result.stderr, result.output


class _Recorded:
    """A stand-in exporter: records its keywords, returns what the command prints."""

    def __init__(self):
        self.kwargs = None

    def __call__(self, model, path, **kwargs):
        self.kwargs = kwargs
        Path(path).write_bytes(b"stand-in")
        return SimpleNamespace(
            path=str(path),
            size_bytes=8,
            op_histogram={"Conv": 1},
            strategies={},
            opset=17,
            simplified=False,
            parity=None,
            mode=kwargs["mode"],
            num_nodes=1,
            to_dict=lambda: {},
        )


@pytest.mark.parametrize(
    "args, input_size, dynamic, shown",
    [
        (["--input-size", "256x320"], (256, 320), None, "Nx3x256x320"),
        (["--input-size", "48"], 48, None, "Nx3x48x48"),
        (["--input-size", "48x48"], 48, None, "Nx3x48x48"),
        (["--input-size", "40x56", "--dynamic-size"], (40, 56), True, "Nx3xHxW"),
    ],
)
def test_size_options_reach_the_exporter(in_user_dir, monkeypatch, args, input_size, dynamic, shown):
    recorded = _Recorded()
    monkeypatch.setattr(dcd_deploy.exporters, "export_onnx", recorded)
    result = run(export_main, ["tiny.py:build", "--no-check", "-o", "s.onnx", *args])
    assert result.exit_code == 0, result.output
    assert recorded.kwargs["input_size"] == input_size
    assert recorded.kwargs.get("dynamic_size") is dynamic
    if dynamic:  # the example it traces, so the check knows the size of a file with symbolic sides
        assert tuple(recorded.kwargs["example_inputs"][0].shape) == (1, 3, *input_size)
    assert f"input {shown}," in result.stdout


# -- the installed script ------------------------------------------------------------------
def test_installed_dcd_export_with_a_factory(user_dir, tmp_path):
    script = shutil.which("dcd-export", path=str(Path(sys.executable).parent))
    assert script, "dcd-export is not installed beside this Python"
    write_factory(tmp_path, "mine")
    shutil.copy(user_dir[0] / "tiny.pt", tmp_path / "mine.pt")
    proc = subprocess.run(
        [script, "mine.py:build", "--weights", "mine.pt", "--input-size", SIZE, "-q"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("wrote mine.onnx")
    model = onnx.load(str(tmp_path / "mine.onnx"))
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim[1:]]
    assert dims == [3, 32, 32]


# -- end to end with the exporter that takes (H, W) and dynamic sizes (skipped before it) ---
def _exporter_takes_sizes() -> bool:
    import inspect

    return "dynamic_size" in inspect.signature(dcd_deploy.exporters.export_onnx).parameters


needs_size_exporter = pytest.mark.skipif(
    not _exporter_takes_sizes(), reason="this exporter takes square sizes only (export branch not merged)"
)


@needs_size_exporter
@pytest.mark.parametrize("extra, dims", [([], [3, 32, 48]), (["--dynamic-size"], [3, None, None])])
def test_non_square_and_dynamic_export_then_validate(in_user_dir, extra, dims):
    result = run(
        export_main, ["tiny.py:build", "--weights", "tiny.pt", "--input-size", "32x48", "-o", "ns.onnx", *extra]
    )
    assert result.exit_code == 0, result.output
    assert re.search(r"parity +PASS", result.stdout)
    shape = onnx.load("ns.onnx").graph.input[0].type.tensor_type.shape.dim[1:]
    assert [d.dim_value if d.HasField("dim_value") else None for d in shape] == dims
    result = run(validate_main, ["tiny.py:build", "ns.onnx", "--weights", "tiny.pt"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1].startswith("PASS")


CHANGES_ITS_INPUT = """\
import torch
from torch import nn
import torch.nn.functional as F
from dcd_deploy.layers import DCDConv2d


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.dcd = DCDConv2d(3, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        x.sub_(0.5).div_(0.25)  # normalised in place, as some training code does
        F.hardswish(x, inplace=True)
        return self.head(self.dcd(x).mean((2, 3)))


def build():
    torch.manual_seed(0)
    return Net().eval()
"""


def test_a_factory_whose_forward_changes_its_input_passes_end_to_end(tmp_path, monkeypatch):
    """The command's check (its float64 reference and fp32 runs computed in a forked
    process while the file is traced) runs every forward on a copy of the inputs."""
    (tmp_path / "inplace_net.py").write_text(CHANGES_ITS_INPUT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = run(export_main, ["inplace_net.py:build", "--input-size", "12", "-o", tmp_path / "m.onnx"])
    assert result.exit_code == 0, result.output
    (line,) = [ln for ln in result.stdout.splitlines() if ln.lstrip().startswith("parity")]
    assert line.split()[1] == "PASS:" and "top-1 agreement 100%" in line, line  # not decided layer by layer


WRAPPED = """\
import torch
from torch import nn

from tiny import build as tiny


def compiled():
    return torch.compile(tiny())  # as training code keeps it


def data_parallel():
    return nn.DataParallel(tiny())


def both():
    return torch.compile(nn.DataParallel(tiny()))
"""


@pytest.mark.parametrize("factory", ["compiled", "data_parallel", "both"])
def test_a_factory_returning_a_wrapped_model_exports_the_module_it_wraps(user_dir, tmp_path, monkeypatch, factory):
    """torch.compile's OptimizedModule and DataParallel hold the user's module; the export is
    of that module (torch.export cannot trace the compiled wrapper itself), with the
    weights a compiled model's training loop saved (keys prefixed `_orig_mod.`)."""
    d, _ = user_dir
    shutil.copy(d / "tiny.py", tmp_path / "tiny.py")
    (tmp_path / "wrapped.py").write_text(WRAPPED, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    weights = torch.load(d / "tiny.pt", weights_only=True)
    torch.save({f"_orig_mod.{k}": v for k, v in weights.items()}, tmp_path / "compiled.pt")
    out = tmp_path / "m.onnx"
    args = [f"wrapped.py:{factory}", "--weights", "compiled.pt", "--input-size", SIZE, "-o", out]
    result = run(export_main, args)
    assert result.exit_code == 0, result.output
    assert "parity   PASS" in result.stdout
    # the file holds the trained weights, not build()'s: it fails against the plain factory
    result = run(validate_main, ["tiny.py:build", out])
    assert result.exit_code == 1 and "FAIL" in result.stdout
    result = run(validate_main, [f"wrapped.py:{factory}", out, "--weights", "compiled.pt"])
    assert result.exit_code == 0, result.output


HALF_AND_DOUBLE = """\
from tiny import build


def half():
    return build().half()


def double():
    return build().double()
"""


@pytest.mark.parametrize("factory, dtype", [("half", "float16"), ("double", "float64")])
def test_a_factory_of_float16_or_float64_weights_exports_float32(user_dir, tmp_path, monkeypatch, factory, dtype):
    """A model of other weights than float32 (``model.half()`` for deployment, a float64
    research model) failed in its first forward on float32 images. The commands take it as
    float32, before --weights loads: the float32 weights of tiny.pt must arrive unrounded,
    so the file computes what the float32 factory's export computes, to float32 precision
    (a float16 round trip of the weights moves the logits by about 5e-4)."""
    import numpy as np
    import onnxruntime as ort

    d, _ = user_dir
    shutil.copy(d / "tiny.py", tmp_path / "tiny.py")
    (tmp_path / "precision.py").write_text(HALF_AND_DOUBLE, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    common = ["--weights", d / "tiny.pt", "--input-size", SIZE, "--no-simplify"]
    result = run(export_main, [f"precision.py:{factory}", *common, "-o", "other.onnx"])
    assert result.exit_code == 0, result.output
    # one line on stderr, not Python's warning with our file and line
    assert f"Warning: precision.py:{factory}: TinyNet holds {dtype} weights; taken as float32" in result.stderr
    assert "UserWarning" not in result.output
    assert "parity   PASS" in result.stdout
    result = run(export_main, ["tiny.py:build", *common, "-o", "fp32.onnx"])
    assert result.exit_code == 0, result.output
    x = np.random.default_rng(0).standard_normal((2, 3, int(SIZE), int(SIZE))).astype(np.float32)
    got, want = (
        ort.InferenceSession(name, providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
        for name in ("other.onnx", "fp32.onnx")
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_api_refuses_a_float16_model_with_the_way_out(tmp_path, user_dir, monkeypatch):
    """export_onnx and check_parity: one line naming model.float(), no file, and the
    caller's model left as it was (to_deploy, a PyTorch transform, lowers any dtype)."""
    d, _ = user_dir
    monkeypatch.syspath_prepend(str(d))
    from tiny import build

    model = build().half()
    match = r"^TinyNet holds float16 weights; the ONNX files are float32: pass model\.float\(\)"
    with pytest.raises(dcd_deploy.errors.ExportError, match=match):
        dcd_deploy.export_onnx(model, tmp_path / "m.onnx", input_size=int(SIZE))
    assert not (tmp_path / "m.onnx").exists()
    dcd_deploy.export_onnx(build(), tmp_path / "f.onnx", input_size=int(SIZE), check=False)
    with pytest.raises(dcd_deploy.errors.DCDDeployError, match=match):
        dcd_deploy.check_parity(model, tmp_path / "f.onnx")
    assert {p.dtype for p in model.parameters()} == {torch.float16}


LAZY_NET = """\
import torch
from torch import nn
from dcd_deploy.layers import DCDConv2d


class LazyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.LazyConv2d(8, 3, padding=1)  # in_channels from the first input
        self.dcd = DCDConv2d(8, 8, 1)
        self.fc = nn.LazyLinear(4)

    def forward(self, x):
        return self.fc(torch.relu(self.dcd(torch.relu(self.stem(x)))).mean((2, 3)))


def build():
    torch.manual_seed(0)
    return LazyNet().eval()
"""


def test_a_model_of_lazy_layers_loads_its_weights_and_is_refused_without(tmp_path, monkeypatch):
    """``nn.LazyConv2d`` makes its weights on its first call: every copy the export makes
    (deploy form, float64 reference) drew its own, and the check passed a file of other
    weights ("decided layer by layer ... 1 Conv layer within 1.2"). Loading a state dict
    makes them (the shape check took an uninitialized parameter's shape: a traceback)."""
    import numpy as np
    import onnxruntime as ort

    (tmp_path / "lazy_net.py").write_text(LAZY_NET, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    from lazy_net import build

    trained = build()
    trained(torch.zeros(1, 3, 16, 16))
    torch.save(trained.state_dict(), tmp_path / "lazy.pt")
    result = run(export_main, ["lazy_net.py:build", "--input-size", "16", "-o", "no.onnx"])
    assert result.exit_code == 1 and not (tmp_path / "no.onnx").exists()
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("Error")]
    assert line.startswith("Error: LazyNet has lazy parameters not yet initialized (stem.weight, "), line
    assert "Traceback" not in result.output
    result = run(export_main, ["lazy_net.py:build", "--weights", "lazy.pt", "--input-size", "16", "-o", "m.onnx"])
    assert result.exit_code == 0, result.output
    assert "parity   PASS:" in result.stdout
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        want = trained(x).numpy()
    got = ort.InferenceSession("m.onnx", providers=["CPUExecutionProvider"]).run(None, {"input": x.numpy()})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    lazy = build()
    for call in (
        lambda: dcd_deploy.export_onnx(lazy, tmp_path / "api.onnx", input_size=16),
        lambda: dcd_deploy.check_parity(lazy, tmp_path / "m.onnx"),
        lambda: dcd_deploy.to_deploy(lazy, input_size=16),
    ):
        with pytest.raises(dcd_deploy.errors.DCDDeployError, match="lazy parameters not yet initialized"):
            call()
    assert not (tmp_path / "api.onnx").exists()
    assert isinstance(lazy.stem.weight, torch.nn.parameter.UninitializedParameter)


NHWC_NET = """\
import torch
from torch import nn
from dcd_deploy.layers import DCDConv2d


class NHWCNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.dcd = DCDConv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x):  # (N, H, W, 3), as a camera pipeline hands it over
        return self.head(self.dcd(x.permute(0, 3, 1, 2)).mean((2, 3)))


def build():
    torch.manual_seed(0)
    return NHWCNet().eval()
"""


def test_a_model_of_nhwc_input_is_told_how_to_give_it_and_exports_with_it(tmp_path, monkeypatch):
    (tmp_path / "nhwc_net.py").write_text(NHWC_NET, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = run(export_main, ["nhwc_net.py:build", "--input-size", "12x16", "-o", tmp_path / "m.onnx"])
    one_error_line(result, r"does not run on its example inputs \(\(1, 3, 12, 16\)\).*--inputs FILE\.npz")
    assert not (tmp_path / "m.onnx").exists()
    np.savez(tmp_path / "x.npz", x=np.random.default_rng(0).standard_normal((4, 12, 16, 3)).astype(np.float32))
    result = run(export_main, ["nhwc_net.py:build", "--inputs", tmp_path / "x.npz", "-o", tmp_path / "m.onnx"])
    assert result.exit_code == 0, result.output
    assert [d.dim_value for d in onnx.load(str(tmp_path / "m.onnx")).graph.input[0].type.tensor_type.shape.dim][1:] == [
        12,
        16,
        3,
    ]


RANDOM_NET = """\
import torch.nn.functional as F
from torch import nn

from dcd_deploy.layers import DCDConv2d


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.dcd = DCDConv2d(8, 8, 1)
        self.head = nn.Conv2d(8, 2, 1)

    def forward(self, x):
        return self.head(F.silu(self.dcd(F.relu(self.stem(x)))))


def build():
    return Net()  # no weights loaded: nn.init's random values
"""


def test_a_factory_left_at_its_random_initialisation_is_one_model_in_every_command(tmp_path, monkeypatch):
    # a user trying the tool before training: export, then validate the file against the
    # same MODULE:FUNCTION; the factory draws its weights from torch's generator each time
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rnd.py").write_text(RANDOM_NET)
    exported = run(export_main, ["rnd.py:build", "--input-size", "24x32", "-o", "rnd.onnx"])
    assert exported.exit_code == 0, exported.output
    torch.rand(7)  # whatever the process draws between two commands
    validated = run(validate_main, ["rnd.py:build", "rnd.onnx"])
    assert validated.exit_code == 0 and "PASS" in validated.output, validated.output
    # another seed builds another model, which the file does not compute
    other = run(validate_main, ["rnd.py:build", "rnd.onnx", "--seed", "1"])
    assert other.exit_code == 1 and "FAIL" in other.output and "other weights than this model's" in other.output


def test_building_a_factory_leaves_torchs_generator_as_it_was(tmp_path, monkeypatch):
    from dcd_deploy.checkpoint import resolve_model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "rnd.py").write_text(RANDOM_NET)
    state = torch.get_rng_state()
    a = resolve_model("rnd.py:build", input_size=(24, 32))
    assert torch.equal(torch.get_rng_state(), state)
    b = resolve_model("rnd.py:build", input_size=(24, 32), seed=0)
    c = resolve_model("rnd.py:build", input_size=(24, 32), seed=5)
    assert torch.equal(a.stem.weight, b.stem.weight) and not torch.equal(a.stem.weight, c.stem.weight)


NUMPY_RANDOM_NET = """\
import random

import numpy as np
import torch
from torch import nn

from dcd_deploy.layers import DCDConv2d


def build():
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), DCDConv2d(8, 8, 1), nn.Conv2d(8, 2, 1))
    with torch.no_grad():  # an initialisation of the user's own, from numpy and random
        w = net[0].weight
        w.copy_(torch.from_numpy(np.random.randn(*w.shape).astype("float32") * 0.3))
        net[3].bias.copy_(torch.tensor([random.gauss(0, 1) for _ in range(2)]))
    return net
"""


def test_a_factory_drawing_from_numpy_and_random_is_one_model_in_every_command(tmp_path, monkeypatch):
    import random

    from dcd_deploy.checkpoint import resolve_model

    monkeypatch.chdir(tmp_path)
    (tmp_path / "nprnd.py").write_text(NUMPY_RANDOM_NET)
    np_state, py_state = np.random.get_state(), random.getstate()
    a = resolve_model("nprnd.py:build", input_size=(24, 32), seed=0)
    # the caller's draws are as they were
    assert np.array_equal(np.random.get_state()[1], np_state[1]) and random.getstate() == py_state
    np.random.rand(5), random.random()  # whatever the process draws between two commands
    b = resolve_model("nprnd.py:build", input_size=(24, 32), seed=0)
    c = resolve_model("nprnd.py:build", input_size=(24, 32), seed=3)
    assert torch.equal(a[0].weight, b[0].weight) and torch.equal(a[3].bias, b[3].bias)
    assert not torch.equal(a[0].weight, c[0].weight) and not torch.equal(a[3].bias, c[3].bias)
    exported = run(export_main, ["nprnd.py:build", "--input-size", "24x32", "-o", "nprnd.onnx"])
    assert exported.exit_code == 0, exported.output
    validated = run(validate_main, ["nprnd.py:build", "nprnd.onnx"])
    assert validated.exit_code == 0 and "PASS" in validated.output, validated.output


def test_the_ema_weights_of_a_training_checkpoint_are_chosen_by_key(tmp_path, monkeypatch):
    # timm's train.py saves the weights and their EMA side by side; people deploy the EMA
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rnd.py").write_text(RANDOM_NET)
    from dcd_deploy.checkpoint import resolve_model

    torch.manual_seed(4)
    net = resolve_model("rnd.py:build", input_size=(24, 32))
    sd = {k: (torch.randn_like(v) * 0.3).abs() + ("running_var" in k) for k, v in net.state_dict().items()}
    ema = {k: v * 0.9 for k, v in sd.items()}
    torch.save({"epoch": 30, "state_dict": sd, "state_dict_ema": ema}, "train.pth")
    plain = run(export_main, ["rnd.py:build", "--weights", "train.pth", "--input-size", "24x32", "-o", "a.onnx"])
    assert plain.exit_code == 0, plain.output
    # said once, as one line, with the way to the other weights
    assert (
        plain.output.count("Warning: train.pth: loaded the weights under 'state_dict'; it also holds state_dict_ema")
        == 1
        and "UserWarning" not in plain.output
    )
    args = ["rnd.py:build", "--weights", "train.pth", "--weights-key", "state_dict_ema"]
    ema_file = run(export_main, [*args, "--input-size", "24x32", "-o", "ema.onnx"])
    assert ema_file.exit_code == 0 and "Warning" not in ema_file.output, ema_file.output
    assert run(validate_main, [*args, "ema.onnx"]).exit_code == 0
    other = run(validate_main, [*args, "a.onnx"])  # the EMA is another model than the weights
    assert other.exit_code == 1 and "other weights than this model's" in other.output
    one_error_line(
        run(export_main, ["rnd.py:build", "--weights-key", "state_dict_ema"]), r"reads none \(add --weights FILE\)"
    )
    one_error_line(
        run(export_main, ["rnd.py:build", "--weights", "train.pth", "--weights-key", "ema"]),
        r"train\.pth has no 'ema' \(its weights are under state_dict, state_dict_ema\)",
    )


ARGS_NET = """\
import torch.nn.functional as F
from torch import nn

from dcd_deploy.layers import DCDConv2d


def build(num_classes, width=1.0, act="relu"):
    c = int(16 * width)
    net = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), DCDConv2d(c, c, 1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(c, num_classes))
    net.act = act
    return net
"""


def test_a_factory_of_arguments_is_called_with_the_literals_the_model_spells(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "argnet.py").write_text(ARGS_NET)
    spec = "argnet.py:build(num_classes=7, width=0.5)"
    exported = run(export_main, [spec, "--input-size", "24x32"])
    assert exported.exit_code == 0, exported.output
    assert "argnet:build(num_classes=7, width=0.5) (Sequential)" in exported.stdout
    outputs = onnx.load("argnet.onnx").graph.output[0].type.tensor_type.shape.dim  # named after the file
    assert outputs[1].dim_value == 7
    assert run(validate_main, [spec, "argnet.onnx"]).exit_code == 0
    other = run(validate_main, ["argnet.py:build(num_classes=7, width=1.0)", "argnet.onnx"])
    assert other.exit_code == 1  # another model than the file's
    one_error_line(run(export_main, ["argnet.py:build", "-o", "x.onnx"]), r"takes required arguments \(num_classes\)")
    one_error_line(run(export_main, ["argnet.py:build(num_classes=n)", "-o", "x.onnx"]), r"must be Python literals")
    assert not (tmp_path / "x.onnx").exists()
