"""dcd-bench with a model of the user's own (paired with its static counterpart) and with
ONNX files (paired with --baseline), in the quickest configuration: a few runs, no
minimum time, no warm-up. No test asserts a timing, only what is paired with what,
where each record comes from and the one-line errors.
"""

from __future__ import annotations

import importlib.util
import json
import re

import pytest
from _cli import one_error_line
from _user_net import install_to_static, to_static, write_factory
from click.testing import CliRunner

from dcd_deploy import export_onnx
from dcd_deploy._factory_spec import build_from_factory
from dcd_deploy.bench.complexity import count_complexity
from dcd_deploy.cli.bench import main
from dcd_deploy.layers import DCDConv2d
from dcd_deploy.runtimes import read_onnx_input as onnx_input

FAST = ["--quick", "--runs", "2", "--warmup", "0", "--min-time", "0"]
HAS_OPENVINO = importlib.util.find_spec("openvino") is not None


def table_rows(stdout: str) -> list[list[str]]:
    """(model, variant) of each table row (not the summary's ``a + b = r`` lines)."""
    return [f[:2] for f in map(str.split, stdout.splitlines()) if f and f[0] == "tiny:build" and "+" not in f]


def run(args):
    return CliRunner().invoke(main, ["latency", *map(str, args)])


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    install_to_static(monkeypatch)
    write_factory(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """tiny.onnx (DCD) and tiny_static.onnx (its static counterpart), exported at 32x32."""
    d = tmp_path_factory.mktemp("files")
    write_factory(d)
    import os

    cwd = os.getcwd()
    os.chdir(d)
    try:
        model = build_from_factory("tiny.py:build")
    finally:
        os.chdir(cwd)
    export_onnx(model, d / "tiny.onnx", input_size=32, check=False)
    export_onnx(to_static(model), d / "tiny_static.onnx", input_size=32, check=False)
    return d


def test_factory_is_paired_with_its_static_counterpart(user_dir):
    result = run(
        [
            "--models",
            "tiny.py:build",
            "--input-size",
            "32",
            "--backends",
            "torch-deploy,onnxruntime",
            "--json",
            "r.json",
            *FAST,
        ]
    )
    assert result.exit_code == 0, result.output
    assert table_rows(result.stdout) == [["tiny:build", "static"], ["tiny:build", "dcd"]] * 2
    assert re.search(r"tiny:build dcd .* = [\d.]+ .* = [\d.]+", result.stdout)  # the summary line, both steps
    data = json.loads((user_dir / "r.json").read_text())
    recs = {(r["backend"], r["variant"]): r for r in data["records"]}
    for backend in ("torch-deploy", "onnxruntime"):
        static, dcd = recs[backend, "static"], recs[backend, "dcd"]
        assert (static["source"], static["name"]) == ("static counterpart", "tiny:build.static")
        assert (dcd["source"], dcd["name"], dcd["model"]) == ("factory", "tiny:build", "tiny:build")
        assert dcd["ratio_to_static"] > 0 and static["ratio_to_static"] is None
        # the counterpart has the network's parameters without the dynamic branch's
        assert static["params_m"] < dcd["params_m"]
    assert "[build] tiny:build.static: to_static() of it" in result.stderr


def test_static_counterpart_has_no_dynamic_layer(user_dir):
    model = build_from_factory("tiny.py:build")
    static = to_static(model)
    assert not any(isinstance(m, DCDConv2d) for m in static.modules())
    assert any(isinstance(m, DCDConv2d) for m in model.modules())  # the original is left as it was


def test_factory_with_a_baseline_factory(user_dir):
    (user_dir / "flat.py").write_text(
        "import torch\nfrom _user_net import to_static\nimport tiny\n\ndef build():\n"
        "    return to_static(tiny.build())\n"
    )
    result = run(
        ["--models", "tiny.py:build", "--baseline", "flat.py:build", "--input-size", "32", "--backends", "torch", *FAST]
    )
    assert result.exit_code == 0, result.output
    assert table_rows(result.stdout) == [["tiny:build", "static"], ["tiny:build", "dcd"]]
    assert "[build] flat:build" in result.stderr and "to_static() of it" not in result.stderr


def test_non_square_input(user_dir):
    result = run(
        ["--models", "tiny.py:build", "--input-size", "32x48", "--backends", "torch", "--json", "r.json", *FAST]
    )
    assert result.exit_code == 0, result.output
    assert "input 32x48" in result.stdout
    # the MAdds column counts the 32x48 input (it was left empty for non-square inputs)
    model = build_from_factory("tiny.py:build")
    madds = {r["variant"]: r["madds_m"] for r in json.loads((user_dir / "r.json").read_text())["records"]}
    assert madds["dcd"] == pytest.approx(count_complexity(model, input_size=(32, 48)).madds_min / 1e6)
    assert madds["static"] == pytest.approx(count_complexity(to_static(model), input_size=(32, 48)).madds_min / 1e6)
    assert madds["dcd"] > madds["static"] > count_complexity(to_static(model), input_size=32).madds_min / 1e6


def test_onnx_files_with_a_baseline(files, tmp_path):
    args = [
        "--models",
        files / "tiny.onnx",
        "--baseline",
        files / "tiny_static.onnx",
        "--json",
        tmp_path / "r.json",
        *FAST,
    ]
    result = run(args + ["--backends", "onnxruntime"])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert [(r["backend"], r["variant"], r["name"], r["source"]) for r in data["records"]] == [
        ("onnxruntime", "static", "tiny_static", "onnx"),
        ("onnxruntime", "dcd", "tiny", "onnx"),
    ]
    assert data["machine"]["input_size"] == 32  # from the files
    assert data["records"][1]["ratio_to_static"] > 0


@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_onnx_files_default_to_the_runtimes(files):
    result = run(["--models", files / "tiny.onnx", "--baseline", files / "tiny_static.onnx", *FAST])
    assert result.exit_code == 0, result.output
    assert "1. onnxruntime:" in result.stdout and "2. openvino:" in result.stdout
    assert "torch" not in result.stdout.split("Summary")[0].split("1. onnxruntime")[1]


@pytest.mark.skipif(not HAS_OPENVINO, reason="openvino is not installed")
def test_fused_file_runs_openvino_fused(files, tmp_path):
    model = build_from_factory(str(files / "tiny.py") + ":build")
    export_onnx(model, tmp_path / "tiny.fused.onnx", input_size=32, check=False, mode="fused")
    assert onnx_input(tmp_path / "tiny.fused.onnx").fused and not onnx_input(files / "tiny.onnx").fused
    result = run(["--models", tmp_path / "tiny.fused.onnx", "--baseline", files / "tiny_static.onnx", *FAST])
    assert result.exit_code == 0, result.output
    assert "2. openvino-fused:" in result.stdout


@pytest.mark.parametrize(
    "extra, pattern",
    [
        (["--backends", "torch-deploy"], r"torch-deploy times a PyTorch model, and .*tiny\.onnx is an ONNX file"),
        (
            ["--backends", "onnxruntime,openvino-fused"],
            r"openvino-fused times a file with fused .*has none: use openvino",
        ),
    ],
)
def test_file_errors(files, extra, pattern):
    if "openvino-fused" in extra[-1] and not HAS_OPENVINO:
        pytest.skip("openvino is not installed")
    result = run(["--models", files / "tiny.onnx", "--baseline", files / "tiny_static.onnx", *extra, *FAST])
    one_error_line(result, pattern, notes=True)


def test_files_and_models_are_separate_runs(files, user_dir):
    result = run(["--models", f"{files / 'tiny.onnx'},tiny.py:build", *FAST])
    one_error_line(result, r"tiny\.onnx is an ONNX file and tiny\.py:build a PyTorch model", notes=True)
    result = run(["--models", "tiny.py:build,mobilenetv2_035", "--baseline", "mobilenetv2_035_dcd", *FAST])
    one_error_line(result, r"--baseline is the static partner of one model; 2 models given", notes=True)


def test_onnx_input_resolves_dynamic_axes(files):
    spec = onnx_input(files / "tiny.onnx")
    assert spec.shape == (None, 3, 32, 32) and not spec.fused
    assert spec.resolve(batch=4, input_size=(64, 64)) == (4, 3, 32, 32)  # fixed axes win
    # the DCD file holds the static one's weights and its dynamic branch's
    assert spec.params > onnx_input(files / "tiny_static.onnx").params > 0


def test_a_zoo_checkpoint_keeps_zoo_pairing(tmp_path, monkeypatch):
    """A checkpoint of a zoo DCD model is not a model of one's own: no to_static partner."""
    from dcd_deploy import create_model, save_checkpoint

    monkeypatch.chdir(tmp_path)
    save_checkpoint(create_model("mobilenetv2_035_dcd"), tmp_path / "mobilenetv2_035.pt")
    result = run(["--models", "mobilenetv2_035.pt", "--input-size", "32", "--backends", "torch", *FAST])
    assert result.exit_code == 0, result.output
    assert "to_static" not in result.stderr
    assert "no static partner mobilenetv2_035 given" in result.stdout
