"""The commands with a model of several inputs, fed by ``--inputs`` holding one array per
``forward`` argument (.npz, .pt dict or list): an RGB-D network (``torch.cat`` of two
stems, SiLU, a dict output, a non-square 24x20 input) and an image + integer id network.

Oracles: ONNX Runtime running the written file against the factory's model evaluated in
float64 by the test itself; a file with one weight scaled by 5% must fail validation;
one ``Error:`` line (status 1, or click's usage error, status 2) for what does not fit.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from _cli import one_error_line, run, run_in

from dcd_deploy.cli.export import main as export_main
from dcd_deploy.cli.validate import main as validate_main

SOURCE = """\
import torch
import torch.nn.functional as F
from torch import nn

from dcd_deploy.layers import DCDConv2d, DCDLinear


class RGBD(nn.Module):
    def __init__(self):
        super().__init__()
        self.rgb = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.depth = nn.Conv2d(1, 8, 3, stride=2, padding=1)
        self.mix = DCDConv2d(16, 16, 1)
        self.head = nn.Linear(16, 5)

    def forward(self, rgb, depth):
        x = torch.cat([F.relu(self.rgb(rgb)), F.relu(self.depth(depth))], 1)
        x = F.silu(self.mix(x))
        return {"logits": self.head(x.mean((2, 3)))}


class Tagged(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.embed = nn.Embedding(4, 8)
        self.mix = DCDConv2d(8, 8, 1)
        self.head = nn.Linear(8, 3)

    def forward(self, image, ids):
        x = F.relu(self.stem(image)) + self.embed(ids)[:, :, None, None]
        return self.head(F.hardswish(self.mix(x)).mean((2, 3)))


class Features(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.cls = DCDLinear(32, 10)

    def forward(self, x):
        return self.cls(torch.relu(self.fc(x)))


def build():
    torch.manual_seed(0)
    return RGBD()


def features():
    torch.manual_seed(2)
    return Features()


def tagged():
    torch.manual_seed(1)
    return Tagged()
"""

H, W = 24, 20


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("sets")
    (d / "rgbd.py").write_text(SOURCE)
    g = np.random.default_rng(0)
    rgb = g.standard_normal((4, 3, H, W)).astype(np.float32)
    depth = g.random((4, 1, H, W)).astype(np.float32)
    np.savez(d / "val.npz", rgb=rgb, depth=depth)
    np.savez(d / "swapped.npz", depth=depth, rgb=rgb)
    torch.save([torch.from_numpy(rgb), torch.from_numpy(depth)], d / "val_list.pt")
    np.savez(d / "bad.npz", rgb=rgb, dept=depth)
    np.savez(d / "three.npz", rgb, depth, depth)
    np.savez(d / "feats.npz", feats=g.standard_normal((5, 16)).astype(np.float32))
    np.savez(d / "tagged.npz", image=g.standard_normal((3, 3, 8, 8)).astype(np.float32), ids=np.array([0, 3, 2]))
    return d, run_in(d, export_main, ["rgbd.py:build", "--inputs", "val.npz", "-o", "rgbd.onnx"])


@pytest.fixture
def in_dir(user_dir, monkeypatch):
    monkeypatch.chdir(user_dir[0])
    return user_dir[0]


def _model(name: str):
    from dcd_deploy._factory_spec import build_from_factory

    return build_from_factory(f"rgbd.py:{name}").eval()


def test_export_takes_each_input_from_the_set(user_dir):
    d, result = user_dir
    assert result.exit_code == 0, result.output
    assert "input rgb Nx3x24x20, depth Nx1x24x20" in result.stdout
    assert "parity   PASS" in result.stdout
    graph = onnx.load(str(d / "rgbd.onnx")).graph
    assert [i.name for i in graph.input] == ["rgb", "depth"]
    assert [o.name for o in graph.output] == ["logits"]


def test_the_file_computes_the_model_in_float64(in_dir):
    import onnxruntime as ort

    data = np.load("val.npz")
    sess = ort.InferenceSession("rgbd.onnx", providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"rgb": data["rgb"], "depth": data["depth"]})
    with torch.no_grad():
        want = _model("build").double()(*(torch.from_numpy(data[k]).double() for k in ("rgb", "depth")))["logits"]
    assert np.abs(got - want.numpy()).max() < 1e-5 * max(1.0, float(want.abs().max()))


@pytest.mark.parametrize("inputs", [["--inputs", "swapped.npz"], ["--inputs", "val_list.pt"], []])
def test_validate_by_name_by_position_and_without_a_file(in_dir, inputs):
    result = run(validate_main, ["rgbd.py:build", "rgbd.onnx", *inputs, "--json", "v.json"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1].startswith("PASS")


def test_validate_fails_a_tampered_file(in_dir):
    proto = onnx.load("rgbd.onnx")
    biggest = max(proto.graph.initializer, key=lambda t: np.prod(t.dims))
    values = onnx.numpy_helper.to_array(biggest) * 1.05
    biggest.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.float32), biggest.name))
    onnx.save(proto, "tampered.onnx")
    result = run(validate_main, ["rgbd.py:build", "tampered.onnx", "--inputs", "val.npz"])
    one_error_line(result, r"^Error: parity check failed: FAIL")


def test_an_integer_input_is_taken_as_stored(in_dir):
    result = run(export_main, ["rgbd.py:tagged", "--inputs", "tagged.npz", "-o", "tagged.onnx", "--batch", "3"])
    assert result.exit_code == 0, result.output
    assert "input image 3x3x8x8, ids 3" in result.stdout
    graph = onnx.load("tagged.onnx").graph
    assert graph.input[1].type.tensor_type.elem_type == onnx.TensorProto.INT64


def test_one_input_that_is_no_image(in_dir):
    """A feature vector per sample, its one array named otherwise than the argument: taken
    by position, and the file's input named after the argument."""
    result = run(export_main, ["rgbd.py:features", "--inputs", "feats.npz", "-o", "feats.onnx"])
    assert result.exit_code == 0, result.output
    assert "input x Nx16" in result.stdout
    assert [i.name for i in onnx.load("feats.onnx").graph.input] == ["x"]
    for inputs in (["--inputs", "feats.npz"], []):
        result = run(validate_main, ["rgbd.py:features", "feats.onnx", *inputs])
        assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    "cmd, args, pattern, status",
    [
        (
            export_main,
            ["rgbd.py:build"],
            r"RGBD\.forward takes 2 inputs \(rgb, depth\); dcd-export, dcd-validate and dcd-bench latency take one",
            1,
        ),
        (export_main, ["rgbd.py:build", "--inputs", "bad.npz"], r"holds rgb, dept; RGBD\.forward takes rgb, depth", 1),
        (export_main, ["rgbd.py:build", "--inputs", "three.npz"], r"holds 3 arrays; RGBD\.forward takes 2", 1),
        (  # two named arrays for one argument: its dict, which this forward does not read
            export_main,
            ["rgbd.py:features", "--inputs", "val.npz"],
            r"Features does not run .* it was given rgb, depth as the keys of a dict, since its forward takes fewer",
            1,
        ),
        (export_main, ["rgbd.py:build", "--inputs", "val.npz", "--input-size", "32"], r"--input-size describes", 2),
        (export_main, ["rgbd.py:build", "--inputs", "val.npz", "--preprocess", "unit"], r"--preprocess describes", 2),
        (validate_main, ["rgbd.py:build", "rgbd.onnx", "--inputs", "bad.npz"], r"rgbd\.onnx takes rgb, depth", 1),
    ],
)
def test_what_does_not_fit_is_one_line(in_dir, cmd, args, pattern, status):
    result = run(cmd, args + (["-o", "never.onnx"] if cmd is export_main else []))
    if status == 2:
        assert result.exit_code == 2 and pattern.replace("\\", "") in result.output
    else:
        one_error_line(result, pattern)
    assert not (in_dir / "never.onnx").exists()


def test_fused_file_of_two_inputs_compiles_at_the_shapes_the_note_gives(in_dir):
    pytest.importorskip("openvino")
    from dcd_deploy.openvino import compile_onnx

    result = run(export_main, ["rgbd.py:build", "--inputs", "val.npz", "--mode", "fused", "-o", "fused.onnx"])
    assert result.exit_code == 0, result.output
    assert "model.reshape({'rgb': [1, 3, 24, 20], 'depth': [1, 1, 24, 20]})" in result.stdout
    assert "checked  in onnxruntime, openvino (the fused kernels)" in result.stdout
    data = np.load("val.npz")
    compiled = compile_onnx("fused.onnx", input_shape={"rgb": [1, 3, H, W], "depth": [1, 1, H, W]})
    got = compiled({"rgb": data["rgb"][:1], "depth": data["depth"][:1]})[0]
    with torch.no_grad():
        want = _model("build").double()(*(torch.from_numpy(data[k][:1]).double() for k in ("rgb", "depth")))["logits"]
    assert np.abs(got - want.numpy()).max() < 1e-5 * max(1.0, float(want.abs().max()))


def test_bench_times_the_pair_on_the_given_inputs(in_dir):
    """dcd-bench latency on a model of two inputs: it and its to_static() counterpart are
    exported, run and timed on the set's first --batch samples of each input."""
    import json

    from dcd_deploy.cli.bench import main as bench_main

    args = ["latency", "--models", "rgbd.py:build", "--inputs", "val.npz", "--batch", "2", "--quick"]
    result = run(bench_main, args + ["--backends", "torch,onnxruntime,openvino", "--json", "bench.json"])
    assert result.exit_code == 0, result.output
    doc = json.loads((in_dir / "bench.json").read_text())
    assert doc["machine"]["inputs"] == "rgb 2x3x24x20, depth 2x1x24x20"
    timed = {(r["backend"], r["variant"]) for r in doc["records"] if r["p50_ms"] > 0}
    assert timed == {(b, v) for b in ("torch", "onnxruntime", "openvino") for v in ("static", "dcd")}


@pytest.mark.parametrize(
    "extra, pattern, status",
    [
        (["--input-size", "64"], "--input-size describes synthetic images", 2),
        (["--batch", "5"], r"input rgb has 4 samples; --batch 5 times 5", 1),
    ],
)
def test_bench_refuses_what_the_inputs_exclude(in_dir, extra, pattern, status):
    from dcd_deploy.cli.bench import main as bench_main

    result = run(bench_main, ["latency", "--models", "rgbd.py:build", "--inputs", "val.npz", "--quick", *extra])
    if status == 2:
        assert result.exit_code == 2 and pattern in result.output
    else:
        one_error_line(result, pattern)


def test_bench_profiles_the_pair_on_the_given_inputs(in_dir):
    """--profile beside --inputs: every runtime's breakdown runs the model on the set (the
    DCD model's has a dynamic branch, its static counterpart's none)."""
    import json

    from dcd_deploy.cli.bench import main as bench_main

    args = ["latency", "--models", "rgbd.py:build", "--inputs", "val.npz", "--quick", "--profile", "--json", "p.json"]
    result = run(bench_main, args + ["--backends", "onnxruntime,openvino-fused", "--profile-runs", "3"])
    assert result.exit_code == 0, result.output
    profiles = json.loads((in_dir / "p.json").read_text())["profiles"]
    got = {(p["backend"], p["variant"]): p["groups"]["dynamic_branch"]["ms"] for p in profiles}
    assert set(got) == {(b, v) for b in ("onnxruntime", "openvino-fused") for v in ("static", "dcd")}
    assert all((ms > 0) == (variant == "dcd") for (_, variant), ms in got.items())


def test_bench_times_an_exported_file_of_two_inputs_on_them(in_dir):
    """dcd-bench latency on the written file (and a twin as its baseline): each array goes
    to the file's input of its name (swapped.npz holds depth first: by position the 1-channel
    array would meet the 3-channel input and be refused), on both runtimes."""
    import json
    import shutil

    from dcd_deploy.cli.bench import main as bench_main

    shutil.copy("rgbd.onnx", "rgbd_twin.onnx")
    args = ["latency", "--models", "rgbd.onnx", "--baseline", "rgbd_twin.onnx", "--inputs", "swapped.npz"]
    result = run(
        bench_main, args + ["--batch", "2", "--quick", "--backends", "onnxruntime,openvino", "--json", "f.json"]
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((in_dir / "f.json").read_text())
    assert doc["machine"]["inputs"] == "depth 2x1x24x20, rgb 2x3x24x20"
    timed = {(r["backend"], r["variant"]) for r in doc["records"] if r["p50_ms"] > 0}
    assert timed == {(b, v) for b in ("onnxruntime", "openvino") for v in ("static", "dcd")}
    assert all(r["ratio_to_static"] > 0 for r in doc["records"] if r["variant"] == "dcd")


def _renamed_input(src: str, dst: str, old: str, new: str) -> None:
    proto = onnx.load(src)
    for value in proto.graph.input:
        value.name = new if value.name == old else value.name
    for node in proto.graph.node:
        node.input[:] = [new if i == old else i for i in node.input]
    onnx.save(proto, dst)


@pytest.mark.parametrize(
    "args, pattern",
    [
        ([], r"rgbd.onnx takes 2 inputs \(rgb, depth\); time it on yours with --inputs FILE"),
        (["--inputs", "bad.npz"], r"holds rgb, dept; rgbd.onnx takes rgb, depth \(missing: depth\)"),
        (["--inputs", "three.npz"], r"rgbd.onnx takes 2 inputs \(rgb, depth\); --inputs gives 3"),
        (["--inputs", "int_rgb.npz"], r"--inputs: rgb is int64 1x3x24x20; rgbd.onnx takes float32"),
        (
            ["--inputs", "wide.npz"],
            r"--inputs: rgb is 1x3x20x24 \(the first --batch samples\); rgbd.onnx takes \?x3x24x20",
        ),
        (
            ["--inputs", "val.npz", "--baseline", "renamed.onnx"],
            r"renamed.onnx takes rgb, d and rgbd.onnx rgb, depth; a pair takes one",
        ),
    ],
)
def test_bench_refuses_inputs_that_do_not_fit_the_file(in_dir, args, pattern):
    from dcd_deploy.cli.bench import main as bench_main

    data = np.load("val.npz")
    np.savez("int_rgb.npz", rgb=data["rgb"].astype(np.int64), depth=data["depth"])
    np.savez("wide.npz", rgb=data["rgb"].transpose(0, 1, 3, 2).copy(), depth=data["depth"])
    _renamed_input("rgbd.onnx", "renamed.onnx", "depth", "d")
    one_error_line(
        run(bench_main, ["latency", "-q", "--models", "rgbd.onnx", "--quick", "--backends", "onnxruntime", *args]),
        pattern,
    )
