"""The commands with a model whose ``forward`` takes one dict (``batch["image"]``,
``batch["mask"]``), fed by an ``--inputs`` file of one array per key, or by nothing.

Oracles: ONNX Runtime running the written file against the factory's model evaluated in
float64 by the test itself on the dict; a file with a Conv weight scaled by 5% must fail
validation; one ``Error:`` line naming ``--inputs`` and the keys without a file.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
import torch
from _cli import one_error_line, run, run_in
from _tamper import scale_weight

from dcd_deploy.cli.bench import main as bench_main
from dcd_deploy.cli.export import main as export_main
from dcd_deploy.cli.validate import main as validate_main

SOURCE = """\
from _dict_net import build, one_key, two_views  # noqa: F401 (the factories the commands name)
"""

H, W = 48, 64


@pytest.fixture(scope="module")
def user_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("dicts")
    (d / "masked.py").write_text(SOURCE)
    g = np.random.default_rng(0)
    image = g.standard_normal((4, 3, H, W)).astype(np.float32)
    mask = (g.random((4, 1, H, W)) > 0.5).astype(np.float32)
    np.savez(d / "val.npz", image=image, mask=mask)
    return d, run_in(d, export_main, ["masked.py:build", "--inputs", "val.npz", "-o", "masked.onnx"])


@pytest.fixture
def in_dir(user_dir, monkeypatch):
    monkeypatch.chdir(user_dir[0])
    return user_dir[0]


def test_export_makes_the_dict_of_the_sets_arrays(user_dir):
    d, result = user_dir
    assert result.exit_code == 0, result.output
    assert "input image Nx3x48x64, mask Nx1x48x64" in result.stdout
    assert "parity   PASS" in result.stdout
    proto = onnx.load(str(d / "masked.onnx"))
    assert [i.name for i in proto.graph.input] == ["image", "mask"]
    props = {p.key: p.value for p in proto.metadata_props}
    assert json.loads(props["dcd_deploy.input_tree"])["args"] == [{"dict": {"image": 0, "mask": 1}}]
    assert "val.npz" in props["dcd_deploy.parity_inputs"]  # checked on the file's samples


def test_the_file_computes_the_model_in_float64(in_dir):
    import onnxruntime as ort

    from dcd_deploy._factory_spec import build_from_factory

    data = np.load("val.npz")
    sess = ort.InferenceSession("masked.onnx", providers=["CPUExecutionProvider"])
    (got,) = sess.run(None, {"image": data["image"], "mask": data["mask"]})
    model = build_from_factory("masked.py:build").eval().double()
    with torch.no_grad():
        want = model({k: torch.from_numpy(data[k]).double() for k in ("image", "mask")})
    assert np.abs(got - want.numpy()).max() < 1e-5 * max(1.0, float(want.abs().max()))


@pytest.mark.parametrize("inputs", [["--inputs", "val.npz"], []])
def test_validate_with_the_set_and_without(in_dir, inputs):
    result = run(validate_main, ["masked.py:build", "masked.onnx", *inputs, "--json", "v.json", "--layers"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().splitlines()[-1].startswith("PASS")
    layers = {row["path"] for row in json.loads((in_dir / "v.json").read_text())["layers"]}
    assert {"body.0", "body.3", "head"} <= layers, layers


def test_validate_fails_a_tampered_file(in_dir):
    proto = onnx.load("masked.onnx")
    layer = scale_weight(proto)
    onnx.save(proto, "tampered.onnx")
    result = run(validate_main, ["masked.py:build", "tampered.onnx", "--inputs", "val.npz"])
    assert result.exit_code == 1
    assert "FAIL" in result.stdout and layer in result.stdout


def test_export_without_inputs_points_at_them(in_dir):
    result = run(export_main, ["masked.py:build", "-o", "none.onnx"])
    one_error_line(
        result, r"MaskedNet\.forward takes batch as a dict .*--inputs FILE\.npz holding the arrays image, mask"
    )
    assert not (in_dir / "none.onnx").exists()


def test_bench_without_inputs_points_at_them(in_dir):
    args = ["latency", "--models", "masked.py:build", "--threads", "1", "--quick", "--backends", "torch"]
    result = run(bench_main, args + ["--json", "none.json"])
    one_error_line(result, r"takes batch as a dict .*--inputs FILE\.npz holding the arrays image, mask", notes=True)
    assert not (in_dir / "none.json").exists()


def test_bench_times_the_dict_model_on_the_set(in_dir):
    args = ["latency", "--models", "masked.py:build", "--inputs", "val.npz", "--threads", "1", "--quick"]
    result = run(bench_main, args + ["--backends", "torch,onnxruntime", "--json", "bench.json"])
    assert result.exit_code == 0, result.output
    doc = json.loads((in_dir / "bench.json").read_text())
    assert doc["machine"]["inputs"] == "image 1x3x48x64, mask 1x1x48x64"
    timed = {(r["backend"], r["variant"]) for r in doc["records"] if r["p50_ms"] > 0}
    assert timed == {(b, v) for b in ("torch", "onnxruntime") for v in ("static", "dcd")}


def test_a_dict_of_one_key_takes_the_sets_one_array_by_its_name(in_dir):
    """One array is taken whatever its name for a plain forward; a forward reading its
    argument by key gets it as the dict's one key."""
    np.savez("one.npz", image=np.load("val.npz")["image"])
    result = run(export_main, ["masked.py:one_key", "--inputs", "one.npz", "-o", "one.onnx"])
    assert result.exit_code == 0, result.output
    assert [i.name for i in onnx.load("one.onnx").graph.input] == ["image"]
    for inputs in (["--inputs", "one.npz"], []):
        result = run(validate_main, ["masked.py:one_key", "one.onnx", *inputs])
        assert result.exit_code == 0, result.output
        assert result.stdout.strip().splitlines()[-1].startswith("PASS")


def test_a_loaders_batch_saved_as_it_is_exports_without_its_labels(in_dir):
    """``torch.save(batch)`` of a data loader: a label beside the inputs (which the file
    leaves out, saying so), and a nested dict read back by its dotted keys."""
    data = np.load("val.npz")
    image, mask = (torch.from_numpy(data[k]) for k in ("image", "mask"))
    names = [f"{i}.png" for i in range(4)]  # a batch's file names: read as no input at all
    torch.save({"image": image, "label": torch.arange(4), "path": names, "mask": mask}, "batch.pt")
    result = run(export_main, ["masked.py:build", "--inputs", "batch.pt", "-o", "batch.onnx"])
    assert result.exit_code == 0, result.output
    assert "left out label: MaskedNet.forward never reads it" in result.stdout
    assert "input image Nx3x48x64, mask Nx1x48x64" in result.stdout
    assert [i.name for i in onnx.load("batch.onnx").graph.input] == ["image", "mask"]
    for inputs in ("batch.pt", "val.npz"):
        result = run(validate_main, ["masked.py:build", "batch.onnx", "--inputs", inputs])
        assert result.exit_code == 0, result.output
        assert result.stdout.strip().splitlines()[-1].startswith("PASS")
    args = ["latency", "--models", "masked.py:build", "--inputs", "batch.pt", "--threads", "1", "--quick"]
    result = run(bench_main, args + ["--backends", "torch", "--json", "batch_bench.json"])
    assert result.exit_code == 0, result.output
    assert "label left out: the models' forward never reads them" in result.output
    torch.save({"batch": {"image": image, "mask": mask}}, "nested.pt")  # the argument's own name
    result = run(validate_main, ["masked.py:build", "masked.onnx", "--inputs", "nested.pt"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("saved", ["pt", "npz"])
def test_a_list_argument_takes_its_items_by_index(in_dir, saved):
    """``forward(self, views)`` of a list of two images: a ``.pt`` of ``{"views": [a, b]}``
    or an ``.npz`` of ``views.0``, ``views.1`` (the names the file's inputs get)."""
    from _dict_net import two_views as make

    g = torch.Generator().manual_seed(5)
    a, b = torch.rand(3, 3, 32, 32, generator=g), torch.rand(3, 3, 32, 32, generator=g)
    if saved == "pt":
        torch.save({"views": [a, b]}, "views.pt")
    else:
        np.savez("views.npz", **{"views.0": a.numpy(), "views.1": b.numpy()})
    result = run(export_main, ["masked.py:two_views", "--inputs", f"views.{saved}", "-o", f"views_{saved}.onnx"])
    assert result.exit_code == 0, result.output
    assert "input views.0 Nx3x32x32, views.1 Nx3x32x32" in result.stdout
    import onnxruntime as ort

    (got,) = ort.InferenceSession(f"views_{saved}.onnx").run(None, {"views.0": a.numpy(), "views.1": b.numpy()})
    with torch.no_grad():
        want = make().double().eval()([a.double(), b.double()]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    result = run(validate_main, ["masked.py:two_views", f"views_{saved}.onnx", "--inputs", f"views.{saved}"])
    assert result.exit_code == 0, result.output
