"""dcd-export and dcd-validate: in-process with CliRunner, and the installed scripts once."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner

from dcd_deploy import create_model, pseudo_train
from dcd_deploy.cli.export import main as export_main
from dcd_deploy.cli.validate import main as validate_main

MODEL = "mobilenetv2_035_dcd"
SIZE = "64"


def run(cmd, args):
    return CliRunner().invoke(cmd, [str(a) for a in args])


def dcd_layers(name: str) -> int:
    from dcd_deploy.layers import DCDConv2d, DCDLinear

    return sum(isinstance(m, (DCDConv2d, DCDLinear)) for m in create_model(name).modules())


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One default export (dynamic batch, standard mode, auto strategy) with --json."""
    d = tmp_path_factory.mktemp("export")
    out, report = d / "x.onnx", d / "x.json"
    result = run(export_main, [MODEL, "--input-size", SIZE, "-o", out, "--json", report])
    return result, out, report


def test_export_zoo_name(exported):
    result, out, _ = exported
    assert result.exit_code == 0, result.output
    assert out.is_file() and out.stat().st_size > 0
    text = result.stdout
    assert f"wrote {out}" in text
    nodes = int(re.search(r"graph +(\d+) nodes: (.*)", text).group(1))
    assert nodes == len(onnx.load(str(out)).graph.node)
    ops = re.search(r"graph +\d+ nodes: (.*)", text).group(1)
    assert "Conv" in ops and "MatMul" in ops
    assert re.search(r"parity +PASS: max abs", text)
    assert f"input Nx3x{SIZE}x{SIZE}" in text
    n = dcd_layers(MODEL)
    assert re.search(rf"DCD +{n} layers: \d+ weight form, \d+ latent form \(strategy auto\)", text)
    assert sorted(p.name for p in out.parent.iterdir()) == ["x.json", "x.onnx"]  # no temp files


def test_export_json_report(exported):
    result, out, report = exported
    assert result.exit_code == 0, result.output
    data = json.loads(report.read_text(encoding="utf-8"))
    assert {"path", "num_nodes", "op_histogram", "parity"} <= data.keys()
    assert data["path"] == str(out)
    assert data["num_nodes"] == len(onnx.load(str(out)).graph.node) == sum(data["op_histogram"].values())
    assert data["parity"]["passed"] is True
    assert {r["batch_size"] for r in data["parity"]["rows"]} == {1, 2}
    assert data["arch"] == MODEL and data["input_size"] == int(SIZE) and data["batch"] is None
    assert len(data["strategies"]) == dcd_layers(MODEL)


def test_validate_the_written_file(exported, tmp_path):
    _, out, _ = exported
    report = tmp_path / "v.json"
    result = run(validate_main, [MODEL, out, "--json", report])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["ORT", "opt", "batch"]
    rows = [line.split() for line in lines[1:-1]]
    assert [(r[0], r[1], r[-1]) for r in rows] == [
        ("disabled", "1", "yes"),
        ("all", "1", "yes"),
        ("disabled", "2", "yes"),
        ("all", "2", "yes"),
    ]
    assert lines[-1].startswith("PASS: ")
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["passed"] is True and data["input_size"] == int(SIZE)
    assert data["other_weights_likely"] is False


def test_validate_batch_sizes_and_inputs(exported):
    _, out, _ = exported
    result = run(validate_main, [MODEL, out, "--batch-sizes", "1,3", "--num-inputs", "3"])
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()[1:-1]]
    assert [(r[1], r[2]) for r in rows] == [("1", "3"), ("1", "3"), ("3", "3"), ("3", "3")]


def test_validate_catches_a_different_model(exported, tmp_path):
    _, out, _ = exported
    report = tmp_path / "other.json"
    result = run(validate_main, [MODEL, out, "--seed", "1", "--json", report])  # other pseudo-trained weights
    assert result.exit_code == 1
    # other weights everywhere: the very first layer is already out of bound
    assert "NO" in result.stdout and "FAIL at features.0.0 (Conv): " in result.stdout
    assert "every layer is off, the first included: most likely the file holds other weights" in result.output
    assert json.loads(report.read_text(encoding="utf-8"))["other_weights_likely"] is True


def test_validate_missing_file(tmp_path):
    result = run(validate_main, [MODEL, tmp_path / "none.onnx"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [f"Error: {tmp_path / 'none.onnx'}: no such ONNX file"]


@pytest.fixture(scope="module")
def function_export(tmp_path_factory):
    """One function-mode export (checked), for the tests that read such a file."""
    out = tmp_path_factory.mktemp("function") / "f.onnx"
    return run(export_main, [MODEL, "--input-size", SIZE, "-o", out, "--mode", "function"]), out


@pytest.fixture(scope="module")
def fused_export(tmp_path_factory):
    """One fused-mode export (checked in ONNX Runtime and OpenVINO), for the tests that
    read such a file or break one of its nodes."""
    pytest.importorskip("openvino")
    out = tmp_path_factory.mktemp("fused") / "f.onnx"
    return run(export_main, [MODEL, "--input-size", SIZE, "-o", out, "--mode", "fused"]), out


def test_export_function_mode(function_export):
    result, out = function_export
    assert result.exit_code == 0, result.output
    assert "mode function" in result.stdout and "parity   PASS" in result.stdout
    proto = onnx.load(str(out))
    assert sum(n.domain == "dcd_deploy" for n in proto.graph.node) == dcd_layers(MODEL)
    assert "dcd_deploy.DCD" in result.stdout  # the histogram names the domain


def test_export_fused_mode_checks_in_openvino_and_validates_there(fused_export, tmp_path):
    result, out = fused_export
    report = tmp_path / "v.json"
    assert result.exit_code == 0, result.output
    assert "mode fused" in result.stdout and "dcd_deploy.DCDPointwise" in result.stdout
    assert "parity   PASS" in result.stdout
    assert "checked  in onnxruntime, openvino (the fused kernels)" in result.stdout
    result = run(validate_main, [MODEL, out, "--backend", "openvino", "--batch-sizes", "1,3", "--json", report])
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert lines[0].split()[0] == "runtime" and [ln.split()[:2] for ln in lines[1:-1]] == [
        ["openvino", "1"],
        ["openvino", "3"],
    ]
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["passed"] is True and {r["backend"] for r in data["rows"]} == {"openvino"}


def test_validate_parses_the_file_once(fused_export, monkeypatch):
    """A big file takes seconds to parse (740 MB for ResNet-50 CondConv): the command reads
    it once for its input, the check's signature and layers, and OpenVINO's look for fused
    nodes, in both runtimes."""
    _, out = fused_export
    parsed = []
    load = onnx.load_model

    def counting(f, *args, **kwargs):
        parsed.append(Path(str(f)).resolve())
        return load(f, *args, **kwargs)

    monkeypatch.setattr(onnx, "load", counting)
    monkeypatch.setattr(onnx, "load_model", counting)
    result = run(validate_main, [MODEL, out, "--backend", "onnxruntime", "--backend", "openvino"])
    assert result.exit_code == 0, result.output
    assert {"disabled", "all", "openvino"} <= {line.split()[0] for line in result.stdout.splitlines()[1:-1]}
    assert parsed.count(out.resolve()) == 1


def test_a_function_mode_file_in_openvino_is_one_error_line(function_export):
    pytest.importorskip("openvino")
    export, out = function_export
    assert export.exit_code == 0, export.output
    result = run(validate_main, [MODEL, out, "--backend", "openvino"])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"Error: {out} has dcd_deploy.DCD") and "export with --mode fused" in line


def test_validate_in_openvino_without_openvino_is_one_error_line(exported, monkeypatch):
    import importlib.util

    _, out, _ = exported
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "openvino" else real(name, *a))
    result = run(validate_main, [MODEL, out, "--backend", "openvino"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [
        "Error: openvino is not installed: pip install 'dcd-deploy[openvino]'"
    ]


def test_fused_export_without_a_compiler_is_one_error_line_and_writes_nothing(tmp_path, monkeypatch):
    pytest.importorskip("openvino")
    import dcd_deploy.openvino._build as build

    monkeypatch.setenv("CXX", "/nonexistent/c++")
    monkeypatch.setattr(build, "_default_out_dir", lambda: tmp_path / "ext")  # nothing built there yet
    out = tmp_path / "f.onnx"
    result = run(export_main, [MODEL, "--input-size", SIZE, "-o", out, "--mode", "fused"])
    assert result.exit_code == 1
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("Error: no C++ compiler found") and "install g++" in line
    assert not out.exists() and list(tmp_path.iterdir()) == []  # the compiler is looked for first
    # the standard-op path needs no compiler (its parity: the `exported` tests)
    result = run(export_main, [MODEL, "--input-size", SIZE, "-o", out, "--no-check"])
    assert result.exit_code == 0, result.output
    assert out.is_file()


def _tamper_pool(node):
    next(a for a in node.attribute if a.name == "pool").i = 5


def _tamper_activation(node):
    next(a for a in node.attribute if a.name == "activation").s = b"elu"


def _tamper_slope(node):
    node.attribute.append(onnx.helper.make_attribute("activation_alpha", 0.1))  # a slope on a relu6


def _tamper_swap(node):
    node.input[3], node.input[4] = node.input[4], node.input[3]


def _tamper_drop(node):
    del node.input[-1]


@pytest.mark.parametrize(
    "tamper, reason",
    [
        (_tamper_pool, "pool must be 1 or 2, got 5"),
        (
            _tamper_activation,
            "activation must be none, relu, relu6, silu, hardswish, gelu, leaky_relu, mish or prelu, got 'elu'",
        ),
        (_tamper_slope, "activation_alpha is leaky_relu's negative slope; activation 'relu6' takes none"),
        (_tamper_swap, "has shape"),
        (_tamper_drop, "inputs"),
    ],
)
def test_a_tampered_fused_node_is_one_error_line_in_openvino(fused_export, tmp_path, tamper, reason):
    export, good = fused_export
    assert export.exit_code == 0, export.output
    proto = onnx.load(str(good))
    tamper(next(n for n in proto.graph.node if n.domain == "dcd_deploy"))
    bad = tmp_path / "bad.onnx"
    onnx.save(proto, str(bad))
    result = run(validate_main, [MODEL, bad, "--backend", "openvino"])
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"Error: OpenVINO cannot compile {bad}: ") and reason in line, line
    assert "(node features." in line


def test_export_at_opset_11_for_older_toolchains_and_validate_it(tmp_path):
    out = tmp_path / "o11.onnx"
    result = run(export_main, [MODEL, "--input-size", SIZE, "-o", out, "--opset", "11"])
    assert result.exit_code == 0, result.output
    assert "opset 11, mode standard" in result.stdout and "PASS" in result.stdout
    proto = onnx.load(str(out))
    assert [i.version for i in proto.opset_import if i.domain in ("", "ai.onnx")] == [11]
    result = run(validate_main, [MODEL, out])
    assert result.exit_code == 0 and "PASS" in result.stdout, result.output
    result = run(export_main, [MODEL, "--input-size", SIZE, "-o", tmp_path / "o10.onnx", "--opset", "10"])
    assert result.exit_code == 1 and result.stderr.startswith("Error: opset 10 is not supported; use 11-")
    assert not (tmp_path / "o10.onnx").exists()


def test_export_fixed_batch(tmp_path):
    out = tmp_path / "b.onnx"
    result = run(export_main, [MODEL, "--input-size", SIZE, "-o", out, "--batch", "2"])
    assert result.exit_code == 0, result.output
    assert f"input 2x3x{SIZE}x{SIZE}" in result.stdout
    dims = onnx.load(str(out)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [2, 3, int(SIZE), int(SIZE)]
    # validate takes the file's batch: by default, and when asked
    result = run(validate_main, [MODEL, out])
    assert result.exit_code == 0, result.output
    assert {r.split()[1] for r in result.stdout.splitlines() if r.startswith(("all ", "disabled "))} == {"2"}
    result = run(validate_main, [MODEL, out, "--batch-sizes", "2"])
    assert result.exit_code == 0, result.output
    result = run(validate_main, [MODEL, out, "--batch-sizes", "1,2"])
    assert result.exit_code == 1 and "has a fixed batch of 2; cannot check batch 1" in result.stderr


@pytest.mark.parametrize("strategy", ["latent", "weight"])
def test_export_strategies(tmp_path, strategy):
    out, report = tmp_path / "s.onnx", tmp_path / "s.json"
    result = run(export_main, [MODEL, "--input-size", SIZE, "-o", out, "--strategy", strategy, "-v", "--json", report])
    assert result.exit_code == 0, result.output
    assert "parity   PASS" in result.stdout
    n = dcd_layers(MODEL)
    weight = n - 1 if strategy == "weight" else 0  # every 1x1 DCD conv; never the classifier
    assert f"DCD      {n} layers: {weight} weight form, {n - weight} latent form (strategy {strategy})" in result.stdout
    assert "features.2.conv.0: " + strategy in result.stdout  # -v lists every layer
    assert "classifier.1: latent" in result.stdout
    assert set(json.loads(report.read_text())["strategies"].values()) == ({strategy} | {"latent"})


@pytest.mark.parametrize("value", ["0", "x", "-3", "1.5"])
def test_bad_batch_is_a_usage_error(tmp_path, value):
    result = run(export_main, [MODEL, "--input-size", SIZE, "-o", tmp_path / "x.onnx", "--batch", value])
    assert result.exit_code == 2
    assert "positive integer or 'dynamic'" in result.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["0", "a,b", ""])
def test_bad_batch_sizes_is_a_usage_error(exported, value):
    _, out, _ = exported
    result = run(validate_main, [MODEL, out, "--batch-sizes", value])
    assert result.exit_code == 2
    assert "comma-separated positive integers" in result.output


def test_unknown_model_name(tmp_path):
    result = run(export_main, ["mobilenetv2_035_dcx", "--input-size", SIZE, "-o", tmp_path / "x.onnx"])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:")
    assert "mobilenetv2_035_dcd" in lines[0] and "did you mean" in lines[0]
    assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_unsupported_input_size_is_a_user_error(tmp_path):
    result = run(export_main, ["resnet18_dcd", "--input-size", "64", "-o", tmp_path / "x.onnx"])
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: ") and "fixed 7x7" in result.stderr


def test_export_of_a_checkpoint_file(tmp_path):
    from dcd_deploy import save_checkpoint

    model = pseudo_train(create_model("resnet10_dyconv"), seed=2, input_size=64)
    ckpt = save_checkpoint(model, tmp_path / "net.pt")
    out = tmp_path / "net.onnx"
    result = run(export_main, [ckpt, "--input-size", "64", "-o", out])
    assert result.exit_code == 0, result.output
    assert "resnet10_dyconv" in result.stdout
    result = run(validate_main, [ckpt, out])
    assert result.exit_code == 0, result.output


def script(name: str) -> str:
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    assert found, f"{name} is not installed next to {sys.executable} nor on PATH"
    return found


def test_installed_scripts_end_to_end(tmp_path):
    # One intra-op thread, as in-process (tests/conftest.py): on a loaded 2-core machine
    # OpenMP barriers with 2 threads made one run take 3 s or 80 s.
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"}
    exp = subprocess.run(
        [script("dcd-export"), "mobilenetv2_035_dcd", "--input-size", SIZE, "-o", "e2e.onnx"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert exp.returncode == 0, exp.stderr
    assert "parity   PASS" in exp.stdout
    assert (tmp_path / "e2e.onnx").is_file()
    val = subprocess.run(
        [script("dcd-validate"), "mobilenetv2_035_dcd", "e2e.onnx", "--batch-sizes", "1,4"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert val.returncode == 0, val.stderr
    assert val.stdout.strip().splitlines()[-1].startswith("PASS: ")
    bad = subprocess.run(
        [script("dcd-export"), "resnet18_dcx"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert bad.returncode == 1
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:") and "resnet18_dcd" in lines[0]


# ------------------------------------------------------------------------ the user's own inputs
def test_export_and_validate_on_the_users_inputs(tmp_path):
    import numpy as np
    import torch

    from dcd_deploy.models import synthetic_images

    images = synthetic_images(5, 48, seed=4)
    np.save(tmp_path / "x.npy", images.numpy())
    torch.save(images.double(), tmp_path / "x.pt")
    out = tmp_path / "m.onnx"
    # the input size comes from the file when --input-size is not given
    result = run(export_main, [MODEL, "--inputs", tmp_path / "x.npy", "-o", out, "--json", tmp_path / "e.json"])
    assert result.exit_code == 0, result.output
    assert "input Nx3x48x48" in result.stdout and "parity   PASS" in result.stdout
    parity = json.loads((tmp_path / "e.json").read_text())["parity"]
    assert parity["synthetic_inputs"] is False and parity["onnx_path"] == str(out)
    assert {r["n_inputs"] for r in parity["rows"]} == {5, 4}  # all 5 at batch 1, 2 whole batches of 2
    result = run(validate_main, [MODEL, out, "--inputs", tmp_path / "x.pt", "--batch-sizes", "1"])
    assert result.exit_code == 0, result.output
    assert [line.split()[2] for line in result.stdout.splitlines()[1:-1]] == ["5", "5"]
    # one image as cv2.imread gives it (H x W x 3 pixels, no batch axis): checked at batch 1
    pixels = np.random.default_rng(3).integers(0, 256, (48, 48, 3), dtype=np.uint8)
    np.save(tmp_path / "cat.npy", pixels)
    result = run(validate_main, [MODEL, out, "--inputs", tmp_path / "cat.npy"])
    assert result.exit_code == 0, result.output
    assert [line.split()[1:3] for line in result.stdout.splitlines()[1:-1]] == [["1", "1"], ["1", "1"]]
    result = run(export_main, [MODEL, "--inputs", tmp_path / "cat.npy", "-o", tmp_path / "cat.onnx"])
    assert result.exit_code == 0 and "parity   PASS" in result.stdout, result.output


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: d / "missing.npy", "no such file"),
        (lambda d: (d / "t.npy").write_text("not numpy") and d / "t.npy", "is not a NumPy .npy file"),
        (
            lambda d: (
                __import__("numpy").save(d / "r.npy", __import__("numpy").zeros((2, 64, 64), "float32")) or d / "r.npy"
            ),
            "expected N x 3 x H x W",
        ),
        (
            lambda d: (
                __import__("numpy").save(d / "s.npy", __import__("numpy").zeros((2, 3, 32, 32), "float32"))
                or d / "s.npy"
            ),
            "holds 32x32 images, but the model takes 64x64",
        ),
        (
            lambda d: (
                __import__("numpy").save(d / "i.npy", __import__("numpy").zeros((2, 3, 64, 64), "int64")) or d / "i.npy"
            ),
            "expected floating-point images",
        ),
    ],
)
def test_bad_inputs_file_is_one_error_line(exported, tmp_path, make, message):
    _, out, _ = exported
    path = make(tmp_path)
    result = run(validate_main, [MODEL, out, "--inputs", path])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: inputs file") and message in lines[0], lines
    result = run(export_main, [MODEL, "--input-size", SIZE, "--inputs", path, "-o", tmp_path / "o.onnx"])
    assert result.exit_code == 1 and message in result.stderr
    assert not (tmp_path / "o.onnx").exists()


def test_a_checkpoint_that_outputs_nan_is_refused(tmp_path):
    import torch

    from dcd_deploy import save_checkpoint

    model = pseudo_train(create_model(MODEL), seed=0, input_size=int(SIZE))
    with torch.no_grad():
        model.classifier[-1].cls.weight[3, 7] = float("nan")
    ckpt = save_checkpoint(model, tmp_path / "nan.pt")
    result = run(export_main, [ckpt, "--input-size", SIZE, "-o", tmp_path / "nan.onnx"])
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert "Error: the PyTorch model outputs NaN on finite inputs: check the checkpoint" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nan.pt"]


def test_failure_on_ill_conditioned_synthetic_inputs_suggests_inputs():
    from dcd_deploy.cli._parity_options import parity_failure
    from dcd_deploy.parity import ParityReport, ParityRow

    def report(synthetic, ill):
        row = ParityRow("all", 1, 8, 0.5, 0.05, 0.1, 0.2 if ill else 1e-6, 10.0, 0.01, ill, 1.0, 0, 0, True, False)
        return ParityReport("m.onnx", 224, 1e-5, 1e-3, [row], synthetic_inputs=synthetic)

    hint = "check on your own images with --inputs FILE"
    assert hint in str(parity_failure(report(True, True)))
    assert "fp32 itself is ill-conditioned" in str(parity_failure(report(True, True)))
    assert hint not in str(parity_failure(report(False, True)))  # they were the user's inputs already
    assert hint not in str(parity_failure(report(True, False)))  # a real mismatch: inputs are not to blame


def test_validate_refuses_every_tampered_file_of_a_release_checkpoint(tmp_path, monkeypatch):
    import numpy as np
    from _memo import memoize_reference, memoize_resolved_model
    from _tamper import TAMPERS

    from dcd_deploy.cli import validate as validate_command
    from dcd_deploy.models import synthetic_images
    from dcd_deploy.models.authors import save_release_checkpoint

    # every file is checked against the same checkpoint on the same inputs: it is loaded,
    # and its float64 reference computed, once (_memo); each file is loaded, run and judged
    memoize_reference(monkeypatch)
    memoize_resolved_model(monkeypatch, validate_command)

    model = pseudo_train(create_model("mobilenetv2_050_dcd"), seed=1, input_size=int(SIZE))
    ckpt = tmp_path / "mbv2.pth.tar"
    save_release_checkpoint(model, ckpt)
    good = tmp_path / "good.onnx"
    assert run(export_main, [ckpt, "--input-size", SIZE, "-o", good]).exit_code == 0
    np.save(tmp_path / "x.npy", synthetic_images(4, int(SIZE), seed=21).numpy())
    inputs = [[], ["--inputs", tmp_path / "x.npy"]]
    for extra in inputs:
        result = run(validate_main, [ckpt, good, "--batch-sizes", "2", *extra])
        assert result.exit_code == 0, result.output
    for name, tamper in TAMPERS.items():
        proto = onnx.load(str(good))
        tamper(proto)
        bad = tmp_path / f"{name}.onnx"
        onnx.save(proto, str(bad))
        for extra in inputs:
            result = run(validate_main, [ckpt, bad, "--batch-sizes", "2", *extra])
            assert result.exit_code == 1, (name, extra, result.output)
            assert result.stderr.startswith("Error: parity check failed: FAIL"), result.stderr


def test_json_documents_carry_schema_version_and_inputs(exported, tmp_path):
    import dcd_deploy

    _, out, report = exported
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["schema"] == "dcd-export.report/1" and data["version"] == dcd_deploy.__version__
    assert data["onnx_path"] == str(out) and data["model"] == MODEL and data["parity_inputs"] is None
    assert data["parity"]["schema"] == "dcd-validate.parity/1"
    result = run(validate_main, [MODEL, out, "--batch-sizes", "1", "--json", tmp_path / "v.json"])
    assert result.exit_code == 0, result.output
    val = json.loads((tmp_path / "v.json").read_text(encoding="utf-8"))
    assert val["schema"] == "dcd-validate.parity/1" and val["version"] == dcd_deploy.__version__
    assert val["onnx_path"] == str(out) and val["model"] == MODEL and val["inputs"] is None


def test_export_reports_each_stage_unless_quiet(exported, tmp_path):
    result, _, _ = exported  # the default export (its --json changes nothing on stdout)
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if line.startswith("[")]
    assert [line.split()[0] for line in lines] == ["[load]", "[lower]", "[emit]", "[simplify]", "[write]", "[check]"]
    assert all(re.fullmatch(r"\[\w+\] \d+\.\d s", line) for line in lines)
    assert result.stderr == ""
    quiet = run(export_main, [MODEL, "--input-size", SIZE, "-o", tmp_path / "q.onnx", "-q"])
    assert quiet.exit_code == 0 and not any(line.startswith("[") for line in quiet.stdout.splitlines())
