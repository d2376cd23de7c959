"""Parity: the comparison rule on hand-made arrays, and check_parity on a real export.

The rule (dcd_deploy/parity.py docstring), with ``ref`` the float64 reference and
``torch`` PyTorch's fp32 result: a comparison passes when
``max |onnx - ref| <= max(atol + rtol * max |ref|, k * max |torch - ref|)``; top-1 flips
count only where the reference's top-2 margin exceeds that tolerance; non-finite values
pass when ONNX Runtime has them in the same places as PyTorch fp32.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import sys
from pathlib import Path

import _tamper
import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from dcd_deploy import check_parity, create_model, export_onnx, pseudo_train
from dcd_deploy.errors import DCDDeployError, ExportError, NonFiniteOutputError
from dcd_deploy.layers import DCDConv2d
from dcd_deploy.models import synthetic_images
from dcd_deploy.parity import DEFAULT_ATOL, DEFAULT_K, DEFAULT_RTOL, LayerRow, ParityReport, ParityRow, _compare

NAN, INF = float("nan"), float("inf")


def arr(rows) -> np.ndarray:
    return np.asarray(rows, dtype=np.float32)


def compare(ref, out, atol=1e-5, rtol=1e-3, torch32=None, k=DEFAULT_K) -> ParityRow:
    """``torch32`` defaults to the reference itself: PyTorch fp32 exact, the classic rule alone."""
    ref = arr(ref).astype(np.float64)
    torch32 = ref.astype(np.float32) if torch32 is None else arr(torch32)
    return _compare(ref, torch32, arr(out), "disabled", len(ref), atol=atol, rtol=rtol, k=k)


def rule(ref, out, level="all", batch=4, atol=DEFAULT_ATOL, rtol=DEFAULT_RTOL) -> ParityRow:
    return _compare(ref.astype(np.float64), ref, out, level, batch, atol=atol, rtol=rtol)


# ------------------------------------------------------------------------ the rule
def test_identical_outputs_pass():
    ref = [[0.5, -2.0, 3.0], [1.0, 0.0, -1.0]]
    row = compare(ref, ref)
    assert row.passed
    assert (row.max_abs, row.max_rel, row.mean_abs) == (0.0, 0.0, 0.0)
    assert (row.top1_agreement, row.top1_mismatches, row.nonfinite, row.nonfinite_match) == (1.0, 0, 0, True)
    assert (row.optimization, row.batch_size, row.n_inputs) == ("disabled", 2, 2)


def test_error_above_tolerance_fails_and_is_measured():
    # scale 4: tolerance 1e-5 + 1e-3 * 4 = 0.00401; the error is 0.125 (exact in fp32)
    row = compare([[1.0, 2.0, 4.0]], [[1.0, 2.0, 4.125]])
    assert not row.passed
    assert row.max_abs == 0.125
    assert row.max_rel == pytest.approx(0.125 / 4)
    assert row.mean_abs == pytest.approx(0.125 / 3)
    assert row.top1_mismatches == 0  # failed on the error alone


def test_error_just_inside_tolerance_passes():
    row = compare([[1.0, 2.0, 4.0]], [[1.0, 2.0, 4.0 + 0.0039]])
    assert row.passed and row.max_abs == pytest.approx(0.0039, rel=1e-3)


def test_exact_boundary_is_inside():
    # atol 0.25 + rtol 0.5 * scale 2 = 1.25, all exact in binary floating point
    ref = [[2.0, 0.0, -1.0]]
    assert compare(ref, [[2.0, 1.25, -1.0]], atol=0.25, rtol=0.5).passed
    above = float(np.nextafter(np.float32(1.25), np.float32(2.0)))
    row = compare(ref, [[2.0, above, -1.0]], atol=0.25, rtol=0.5)
    assert not row.passed and row.max_abs > 1.25


def test_tolerance_scales_with_output_magnitude():
    g = np.random.default_rng(0)
    base = g.standard_normal((4, 10)).astype(np.float32)
    noise = g.uniform(-1, 1, base.shape).astype(np.float32)
    for scale in (1e-3, 1.0, 1e3):
        ref = base * np.float32(scale)
        rel_ok = ref + noise * np.float32(5e-4 * scale) * np.abs(base).max()  # 0.5x the rtol
        rel_bad = ref + noise * np.float32(5e-3 * scale) * np.abs(base).max()  # 5x the rtol
        assert rule(ref, rel_ok, atol=0.0).passed, scale
        assert not rule(ref, rel_bad, atol=0.0).passed, scale
    # The same absolute error of 0.2 passes at scale 1e3 and fails at scale 1.
    assert rule(base * 1000, base * 1000 + 0.2).passed
    assert not rule(base, base + 0.2).passed


def test_nan_in_the_same_places_passes_and_is_counted():
    ref = [[NAN, NAN, NAN], [1.0, 2.0, 3.0]]
    row = compare(ref, [[NAN, NAN, NAN], [1.0, 2.0, 3.0 + 1e-6]])
    assert row.passed and row.nonfinite_match
    assert row.nonfinite == 3
    assert row.max_abs == pytest.approx(1e-6, rel=0.1)  # measured on the finite values only
    assert row.top1_agreement == 1.0  # over the finite rows


def test_nan_on_one_side_only_fails():
    ref = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    row = compare(ref, [[1.0, NAN, 3.0], [4.0, 5.0, 6.0]])
    assert not row.passed and not row.nonfinite_match
    row = compare([[1.0, NAN, 3.0]], [[1.0, 2.0, 3.0]])
    assert not row.passed and not row.nonfinite_match and row.nonfinite == 1
    row = compare([[NAN, 2.0]], [[1.0, NAN]])  # as many, elsewhere
    assert not row.passed and not row.nonfinite_match


def test_infinities_must_match_in_place_and_sign():
    assert compare([[INF, 1.0, -INF]], [[INF, 1.0, -INF]]).passed
    assert not compare([[INF, 1.0]], [[-INF, 1.0]]).passed
    assert not compare([[INF, 1.0]], [[NAN, 1.0]]).passed
    assert not compare([[INF, 1.0]], [[1e30, 1.0]]).passed


def test_nan_and_inf_together_in_the_same_places_pass():
    row = compare([[NAN, INF, 1.0]], [[NAN, INF, 1.0]])
    assert row.nonfinite == 2
    assert row.passed


def test_top1_flip_within_tolerance_is_allowed():
    # tolerance 0.1 (atol 0, rtol 0.1, scale 1); the reference's top-2 margin is 0.05
    row = compare([[1.0, 0.95, 0.0]], [[0.96, 0.99, 0.0]], atol=0.0, rtol=0.1)
    assert row.passed
    assert row.top1_agreement == 0.0 and row.top1_mismatches == 0


def test_top1_flip_with_a_large_margin_fails_even_within_tolerance():
    # every value within 0.1 of the reference, but its top-2 margin (0.15) exceeds 0.1
    row = compare([[1.0, 0.85, 0.0], [0.0, 1.0, 0.5]], [[0.92, 0.93, 0.0], [0.0, 1.0, 0.5]], atol=0.0, rtol=0.1)
    assert row.max_abs <= 0.1 + 1e-7
    assert not row.passed
    assert row.top1_mismatches == 1 and row.top1_agreement == 0.5


def test_shape_mismatch_fails():
    row = rule(arr([[1.0, 2.0]]), arr([[1.0, 2.0, 3.0]]))
    assert not row.passed and row.max_abs == float("inf")


# ------------------------------------------------------------------------ conditioning
def test_export_as_good_as_ill_conditioned_pytorch_is_inconclusive_not_a_pass():
    # scale 10: classic tolerance 0.01001. PyTorch fp32 is 0.5 off the reference (5%):
    # fp32 itself is ill-conditioned, and ONNX at 0.8 is within k = 10 times that.
    ref = [[10.0, 2.0, 1.0]]
    row = compare(ref, [[10.8, 2.0, 1.0]], torch32=[[9.5, 2.0, 1.0]])
    assert row.passed and row.ill_conditioned
    assert row.torch_fp32_abs == pytest.approx(0.5) and row.tolerance == pytest.approx(DEFAULT_K * 0.5)
    report = ParityReport("m.onnx", 8, 1e-5, 1e-3, rows=[row])
    assert report.ill_conditioned and report.inconclusive and report.end_to_end_passed
    # no layer was checked on its own: nothing decided, so no PASS
    assert not report and report.verdict == "INCONCLUSIVE"
    assert report.summary().startswith(
        "INCONCLUSIVE: end to end inconclusive, fp32 is 0.05 of scale off float64 on these images"
    )
    assert "top-1" not in report.summary()  # no evidence where the comparison has no power
    report.accept_inconclusive = True
    assert report and report.summary().startswith("PASS (accepted inconclusive: end to end inconclusive")
    assert report.to_dict()["decided_by"] == "accepted"


def layer(path, kind="DCD", form="weight", max_rel=1e-6, bound_rel=1e-4, backend="onnxruntime", level="all"):
    return LayerRow(
        path, kind, form, backend, level, max_rel * 10, max_rel, 10.0, bound_rel * 10, 1e-7, max_rel <= bound_rel
    )


def test_inconclusive_end_to_end_is_decided_layer_by_layer():
    ref = [[10.0, 2.0, 1.0]]
    row = compare(ref, [[10.8, 2.0, 1.0]], torch32=[[9.5, 2.0, 1.0]])
    report = ParityReport(
        "m.onnx",
        8,
        1e-5,
        1e-3,
        rows=[row],
        layer_record=True,
        layers=[layer("a"), layer("b", max_rel=2e-6), layer("c", "Conv", None, 3e-7)],
    )
    assert report and report.verdict == "PASS" and report.decided_by == "layers"
    assert report.summary() == (
        "PASS (decided layer by layer: 2 DCD layers within 2e-06, 1 Conv layer within "
        "3e-07 of float64 on their own inputs; end to end inconclusive, fp32 is 0.05 of "
        "scale off float64 on these images)"
    )
    # static layers alone do not decide
    report.layers = [layer("c", "Conv", None, 3e-7)]
    assert not report and report.verdict == "INCONCLUSIVE"
    assert "no dynamic layer was checked on its own" in report.summary()


def test_a_layer_out_of_bound_fails_and_is_named_first_in_graph_order():
    row = compare([[10.0, 2.0, 1.0]], [[10.0, 2.0, 1.0]])
    layers = [
        layer("a"),
        layer("b", max_rel=0.87),
        layer("c", max_rel=0.5),
        layer("a", backend="openvino", level="openvino"),
        layer("b", backend="openvino", level="openvino"),
        layer("c", backend="openvino", level="openvino", max_rel=0.9),
    ]
    report = ParityReport("m.onnx", 8, 1e-5, 1e-3, rows=[row], layer_record=True, layers=layers)
    assert report.end_to_end_passed and not report and report.verdict == "FAIL"
    assert report.first_failing_layer.path == "b"
    assert report.summary().startswith(
        "FAIL at b (DCD, weight form): max rel 0.87 > 0.0001 in ORT all; 2 of 3 layers out of bound; end to end passed"
    )
    d = json.loads(json.dumps(report.to_dict()))
    assert d["first_failing_layer"] == "b" and d["verdict"] == "FAIL" and len(d["layers"]) == 6
    table = report.layer_table().splitlines()
    assert len(table) == 7 and table[2].split()[0] == "b" and table[2].split()[-1] == "NO"


def test_export_far_worse_than_pytorch_fails_even_when_ill_conditioned():
    ref = [[10.0, 2.0, 1.0]]
    row = compare(ref, [[10.0, 8.0, 1.0]], torch32=[[10.5, 2.0, 1.0]])  # 6.0 > 10 * 0.5? no: 6 > 5
    assert not row.passed and row.ill_conditioned


def test_well_conditioned_pytorch_keeps_the_classic_bound():
    # PyTorch fp32 is 1e-4 off: k * err = 1e-3 < classic 0.01001, so the classic bound decides
    ref = [[10.0, 2.0, 1.0]]
    torch32 = [[10.0001, 2.0, 1.0]]
    assert compare(ref, [[10.0, 2.0, 1.0 + 0.01]], torch32=torch32).passed
    row = compare(ref, [[10.0, 2.0, 1.0 + 0.0102]], torch32=torch32)
    assert not row.passed and not row.ill_conditioned
    assert row.tolerance == pytest.approx(1e-5 + 1e-3 * 10)


def test_errors_are_measured_against_the_reference_not_pytorch_fp32():
    # ONNX equals PyTorch fp32 exactly, but both are 0.5 off: max_abs is 0.5, not 0
    row = compare([[10.0, 2.0]], [[10.5, 2.0]], torch32=[[10.5, 2.0]])
    assert row.max_abs == pytest.approx(0.5) and row.torch_fp32_abs == pytest.approx(0.5)
    assert row.passed  # as good as PyTorch itself


# ------------------------------------------------------------------------ the report
def row(passed: bool, max_abs=0.0, max_rel=0.0, level="all", batch=1, nonfinite=0, match=True) -> ParityRow:
    scale = max_abs / max_rel if max_rel else 1.0
    return ParityRow(
        level,
        batch,
        8,
        max_abs,
        max_rel,
        max_abs / 2,
        0.0,
        scale,
        1e-3 * scale,
        False,
        1.0,
        0,
        nonfinite,
        match,
        passed,
    )


def test_report_truth_and_aggregates():
    report = ParityReport("m.onnx", 64, 1e-5, 1e-3)
    assert not report and not report.passed  # nothing compared is not a pass
    report.rows = [row(True, 1e-6, 1e-7), row(True, 3e-6, 2e-7, batch=2)]
    assert report and report.passed
    assert (report.max_abs, report.max_rel) == (3e-6, 2e-7)
    assert report.summary().startswith("PASS: max abs 3e-06, max rel 2e-07")
    report.rows.append(row(False, 0.5, 0.05, level="disabled", batch=4))
    assert not report and not report.passed
    assert report.summary().startswith("FAIL: max abs 0.5")
    lines = report.table().splitlines()
    assert len(lines) == 4 and lines[0].split()[:2] == ["ORT", "opt"]
    assert lines[3].split()[:2] == ["disabled", "4"] and lines[3].split()[-1] == "NO"
    assert lines[1].split()[-1] == "yes"
    d = json.loads(json.dumps(report.to_dict()))
    assert d["passed"] is False and len(d["rows"]) == 3 and d["rows"][2]["passed"] is False


def test_report_summary_mentions_non_finite_values():
    report = ParityReport("m.onnx", 64, 1e-5, 1e-3, [row(True, nonfinite=10), row(True, nonfinite=10)])
    assert "20 non-finite values propagated identically" in report.summary()
    report.rows.append(row(False, nonfinite=1, match=False))
    assert "non-finite values differ" in report.summary()


# ------------------------------------------------------------------------ check_parity
@functools.cache
def _nets():
    path = Path(__file__).resolve().parent / "exporters" / "test_lowering.py"
    spec = importlib.util.spec_from_file_location("_dcd_test_lowering_nets_parity", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


SIZE = 8


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A small DCD net (release layers, BN after each) exported once."""
    model = _nets().small_net(SIZE)
    path = tmp_path_factory.mktemp("parity") / "small.onnx"
    export_onnx(model, path, input_size=SIZE, check=False)
    return model, path


def ort_outputs(path, x: torch.Tensor) -> list[np.ndarray]:
    outs = []
    for level in (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ort.GraphOptimizationLevel.ORT_ENABLE_ALL):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        outs.append(sess.run(None, {"input": x.numpy()})[0])
    return outs


def extreme_inputs() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 3, SIZE, SIZE, generator=g)
    x[0] = 0.0
    x[1] *= 1e4
    x[2] *= 1e-6
    x[3] = torch.rand(3, SIZE, SIZE, generator=g) * 1e4  # all positive, huge
    x[4] = 1e-6
    return x


def test_extreme_but_finite_inputs_pass(exported):
    model, path = exported
    x = extreme_inputs()
    report = check_parity(model, path, batch_sizes=(1, 2, 3), inputs=x)
    assert report, report.table()
    assert [(r.optimization, r.batch_size, r.n_inputs) for r in report.rows] == [
        (level, b, 6) for b in (1, 2, 3) for level in ("disabled", "all")
    ]
    assert all(r.nonfinite == 0 for r in report.rows)
    # Independently: ONNX Runtime's outputs are within the tolerance of PyTorch's.
    with torch.no_grad():
        ref = model(x).numpy()
    for out in ort_outputs(path, x):
        scale = np.abs(ref).max(axis=1)
        assert (np.abs(out - ref).max(axis=1) <= DEFAULT_ATOL + DEFAULT_RTOL * scale).all()
    # The outputs really span magnitudes (the huge inputs are not washed out).
    assert np.abs(ref[1]).max() > 10 * np.abs(ref[0]).max()


def test_nan_inputs_propagate_on_both_sides(exported):
    model, path = exported
    x = extreme_inputs()
    x[5, 1, 2, 3] = float("nan")  # one pixel: spreads to the whole row through the pools
    report = check_parity(model, path, batch_sizes=(1, 2), inputs=x)
    with torch.no_grad():
        ref = model(x).numpy()
    expected_nonfinite = int((~np.isfinite(ref)).sum())
    assert expected_nonfinite == ref.shape[1]  # the whole row 5, nothing else
    for out in ort_outputs(path, x):
        assert np.array_equal(np.isnan(out), np.isnan(ref))
    assert report, report.table()
    assert all(r.nonfinite == expected_nonfinite and r.nonfinite_match for r in report.rows)
    assert f"{4 * expected_nonfinite} non-finite values propagated identically" in report.summary()


def test_inf_inputs_do_not_crash_and_the_verdict_matches_an_independent_check(exported):
    model, path = exported
    x = extreme_inputs()
    x[5, 0, 4, 4] = float("inf")
    x[4, 2, 0, 0] = -float("inf")
    report = check_parity(model, path, batch_sizes=(1,), inputs=x)
    with torch.no_grad():
        ref = model(x).numpy()
    for r, out in zip(report.rows, ort_outputs(path, x)):
        finite = np.isfinite(ref)
        same_places = np.array_equal(finite, np.isfinite(out)) and np.array_equal(
            ref[~finite], out[~finite], equal_nan=True
        )
        scale = np.abs(ref[finite & np.isfinite(out)]).max()
        close = np.abs(ref[finite] - out[finite]).max() <= DEFAULT_ATOL + DEFAULT_RTOL * scale
        assert r.nonfinite == int((~finite).sum())
        assert r.passed == (same_places and close), (r, same_places, close)


def test_explicit_tolerances(exported):
    model, path = exported
    x = torch.randn(4, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(1))
    strict = check_parity(model, path, batch_sizes=(2,), inputs=x, atol=0.0, rtol=0.0, k=0.0)
    if strict.max_abs > 0:  # any rounding difference at all fails a zero tolerance
        assert not strict
    # With only the k rule left, the verdict is "no worse than k times PyTorch fp32".
    k_only = check_parity(model, path, batch_sizes=(2,), inputs=x, atol=0.0, rtol=0.0, k=3.0)
    assert bool(k_only) == all(r.max_abs <= 3.0 * r.torch_fp32_abs for r in k_only.rows)
    loose = check_parity(model, path, batch_sizes=(2,), inputs=x, atol=0.0, rtol=1e-2)
    assert loose and (loose.atol, loose.rtol) == (0.0, 1e-2)


def test_synthetic_inputs_are_seeded(exported):
    model, path = exported
    a = check_parity(model, path, batch_sizes=(1, 2), n_inputs=4, seed=3)
    b = check_parity(model, path, batch_sizes=(1, 2), n_inputs=4, seed=3)
    assert a and [r.max_abs for r in a.rows] == [r.max_abs for r in b.rows]
    assert a.input_size == SIZE and a.onnx_path == str(path)


def test_n_inputs_is_rounded_up_to_whole_batches(exported):
    model, path = exported
    report = check_parity(model, path, batch_sizes=(3,), n_inputs=8)
    assert all(r.n_inputs >= 8 for r in report.rows)


def test_too_few_explicit_inputs_is_a_user_error(exported):
    model, path = exported
    with pytest.raises(DCDDeployError):
        check_parity(model, path, batch_sizes=(2,), inputs=torch.randn(1, 3, SIZE, SIZE))


def test_unreadable_file_is_a_user_error(tmp_path, exported):
    model, _ = exported
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not an onnx file")
    with pytest.raises(ExportError, match="cannot read .* as ONNX"):
        check_parity(model, bad)


def test_another_models_file_fails(tmp_path, exported):
    a, _ = exported  # the small net (seed 0), and its twin with the weights of seed 1
    b = _nets().small_net(SIZE, seed=1)
    path = export_onnx(b, tmp_path / "b.onnx", input_size=SIZE, check=False).path
    report = check_parity(a, path, batch_sizes=(1, 2))
    assert not report
    assert all(not r.passed for r in report.rows)
    assert report.max_rel > 0.05


# ------------------------------------------------------------------------ conditioning, end to end
@pytest.fixture(scope="module")
def mbv2(tmp_path_factory):
    """A pseudo-trained DCD MobileNetV2 x0.5 at 64x64 and its correct export."""
    model = pseudo_train(create_model("mobilenetv2_050_dcd"), seed=0, input_size=64)
    path = tmp_path_factory.mktemp("mbv2") / "m.onnx"
    export_onnx(model, path, input_size=64, check=False)
    return model, path


def test_correct_export_passes_where_fp32_itself_is_ill_conditioned(mbv2):
    model, path = mbv2
    # White noise at twice the unit scale: far outside the range the BN statistics were
    # calibrated on (natural images), where the per-sample terms blow up.
    x = 2 * torch.randn(4, 3, 64, 64, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref64 = copy.deepcopy(model).double()(x.double()).numpy()
        ref32 = model(x).numpy()
    own = np.abs(ref32 - ref64).max() / np.abs(ref64).max()
    assert own > 2 * DEFAULT_RTOL  # the premise: PyTorch fp32 itself is far off float64
    # fp32 against fp32 (the old rule) would refuse this correct file:
    assert max(np.abs(out - ref32).max() for out in ort_outputs(path, x)) > DEFAULT_RTOL * np.abs(ref32).max()

    report = check_parity(model, path, batch_sizes=(2,), inputs=x)
    assert report, report.table()
    assert report.ill_conditioned and report.inconclusive and not report.synthetic_inputs
    assert report.torch_fp32_rel == pytest.approx(own, rel=0.5)
    # the end-to-end comparison has no power here: the layers decided, and the summary says so
    assert report.decided_by == "layers" and report.summary().startswith("PASS (decided layer by layer: 33 DCD")
    assert "end to end inconclusive" in report.summary() and "top-1" not in report.summary()
    assert max(r.max_rel for r in report.layers) < 1e-5
    # On the default inputs (natural-looking images) the same model is well-conditioned.
    default = check_parity(model, path, batch_sizes=(2,), n_inputs=4)
    assert default and not default.ill_conditioned and default.synthetic_inputs
    assert default.torch_fp32_rel < 1e-4 and "ill-conditioned" not in default.summary()
    assert default.decided_by == "end to end" and default.summary().startswith("PASS: max abs")


def test_check_leaves_the_model_untouched(mbv2):
    model, path = mbv2
    before = {k: v.clone() for k, v in model.state_dict().items()}
    check_parity(model, path, batch_sizes=(1,), n_inputs=2)
    after = model.state_dict()
    assert all(after[k].dtype == before[k].dtype and torch.equal(after[k], before[k]) for k in before)
    assert next(model.parameters()).dtype == torch.float32


def test_explicit_inputs_are_all_used_in_whole_batches(exported):
    model, path = exported
    x = torch.randn(11, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))
    report = check_parity(model, path, batch_sizes=(1, 4), n_inputs=2, inputs=x)  # n_inputs is for synthetic
    assert [(r.batch_size, r.n_inputs) for r in report.rows] == [(1, 11), (1, 11), (4, 8), (4, 8)]


def test_a_model_that_outputs_nan_is_refused_and_nothing_is_written(tmp_path, mbv2):
    model, _ = mbv2
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.features[3].conv[3].weight[0, 0, 0, 0] = float("nan")  # one weight of a depthwise conv
    with pytest.raises(
        NonFiniteOutputError, match="the PyTorch model outputs NaN on finite inputs: check the checkpoint"
    ):
        export_onnx(broken, tmp_path / "nan.onnx", input_size=64)
    assert list(tmp_path.iterdir()) == []
    # NaN *inputs* still only have to propagate identically.
    x = synthetic_images(2, 64, seed=0)
    x[1, 0, 5, 5] = float("nan")
    report = check_parity(model, mbv2[1], batch_sizes=(1,), inputs=x)
    assert report and report.rows[0].nonfinite == 1000  # the whole row of sample 1


def test_json_names_the_file_written_not_its_temporary_name(tmp_path, exported):
    model, _ = exported
    result = export_onnx(model, tmp_path / "final.onnx", input_size=SIZE)
    assert result.parity.onnx_path == str(tmp_path / "final.onnx")
    assert result.to_dict()["parity"]["onnx_path"] == str(tmp_path / "final.onnx")


def test_openvino_nan_turned_into_numbers_is_named_not_refused(exported):
    """OpenVINO's CPU plugin turns NaN into numbers even in standard-op files: a correct
    file is not refused for it, and the summary says what was not compared."""
    pytest.importorskip("openvino")
    model, path = exported
    x = synthetic_images(4, SIZE, seed=1)
    x[1, 0, 3, 3] = float("nan")
    report = check_parity(model, path, batch_sizes=(2,), inputs=x, backends=("onnxruntime", "openvino"))
    assert report, report.summary()
    ov = [r for r in report.rows if r.backend == "openvino"]
    ort_rows = [r for r in report.rows if r.backend == "onnxruntime"]
    assert all(r.nonfinite > 0 and r.nonfinite_match and r.nonfinite_replaced == 0 for r in ort_rows)
    if any(r.nonfinite_replaced for r in ov):  # what this OpenVINO release does
        assert "NaN/Inf outputs became numbers in OpenVINO (not compared" in report.summary()
    # a number where PyTorch has one must still match, and NaN where PyTorch has a number fails
    ref = [[1.0, 2.0], [NAN, NAN]]
    assert _compare(
        arr(ref).astype(np.float64),
        arr(ref),
        arr([[1.0, 2.0], [5.0, 7.0]]),
        "openvino",
        2,
        atol=1e-5,
        rtol=1e-3,
        nan_to_number=True,
    ).passed
    assert not _compare(
        arr(ref).astype(np.float64),
        arr(ref),
        arr([[1.0, NAN], [5.0, 7.0]]),
        "openvino",
        2,
        atol=1e-5,
        rtol=1e-3,
        nan_to_number=True,
    ).passed
    assert not _compare(
        arr(ref).astype(np.float64), arr(ref), arr([[1.0, 2.0], [5.0, 7.0]]), "all", 2, atol=1e-5, rtol=1e-3
    ).passed


class _ChangesItsInput(torch.nn.Module):
    """Normalises its input in place inside ``forward``, as some training code does."""

    def __init__(self):
        super().__init__()
        self.dcd = DCDConv2d(3, 8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        x.sub_(0.5).div_(0.25)
        torch.nn.functional.hardswish(x, inplace=True)
        return self.head(self.dcd(x).mean((2, 3)))


def test_a_model_that_changes_its_inputs_in_place_is_checked_on_the_inputs_given(tmp_path):
    torch.manual_seed(0)
    net = _ChangesItsInput().eval()
    x = torch.rand(4, 3, 12, 12)  # pixels in [0, 1]
    kept = x.clone()
    example = x[:1].clone()
    result = export_onnx(net, tmp_path / "m.onnx", example_inputs=example, parity_inputs=x, parity_batch_sizes=(1, 2))
    assert result.parity  # every run saw the inputs as given, not as a previous run left them
    assert torch.equal(x, kept) and torch.equal(example, kept[:1])  # the caller's tensors are unchanged
    report = check_parity(net, result.path, inputs=x, batch_sizes=(1, 4))
    assert report and torch.equal(x, kept)

    # The file computes the model on the inputs as given (oracle: eager PyTorch on a copy).
    with torch.no_grad():
        want = net(kept.clone()).numpy()
    sess = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: kept.numpy()})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


class _CastsToFloat(torch.nn.Module):
    """``x.float()`` in forward (mixed-precision habits): float64 cannot run it end to end."""

    def __init__(self):
        super().__init__()
        self.a = DCDConv2d(3, 8, 3, padding=1)
        self.b = DCDConv2d(8, 8, 1)
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        y = torch.relu(self.b(torch.relu(self.a(x.float()))))
        return self.fc(y.mean((2, 3)).float())


def test_a_model_float64_cannot_run_is_still_checked_layer_by_layer_in_float64(tmp_path):
    """The end-to-end reference falls back to float32; each layer alone still runs in float64
    (it used to be fed float64 inputs with float32 weights and fail as "cannot evaluate")."""
    torch.manual_seed(0)
    net = _CastsToFloat().eval()
    with pytest.raises(RuntimeError):
        copy.deepcopy(net).double()(torch.zeros(1, 3, 12, 12, dtype=torch.float64))
    result = export_onnx(net, tmp_path / "m.onnx", input_size=12)
    report = result.parity
    assert report and report.reference == "float32", report.summary()
    assert {r.path for r in report.layers if r.passed and r.torch_fp32_rel > 0} >= {"a", "b", "fc"}

    proto = onnx.load(str(tmp_path / "m.onnx"))  # the layer check still has its power
    broken = _tamper.scale_weight(proto)
    onnx.save(proto, str(tmp_path / "t.onnx"))
    tampered = check_parity(net, tmp_path / "t.onnx", batch_sizes=(2,))
    assert not tampered and f"FAIL at {broken} " in tampered.summary(), tampered.summary()


def test_a_layer_whose_fp32_and_float64_copies_differ_is_not_passed():
    """The layer bound grows with PyTorch's own fp32 error (k * err_torch). When the fp32
    model and its float64 copy compute different layers (lazy weights each copy drew on
    its first call: the check passed such a file, "1 Conv layer within 1.2"), that term
    would pass any file: the layer fails as unchecked, saying why. Same weights: passes."""
    from dcd_deploy.parity._layerwise import LayerRecord, _compare_layer

    record = LayerRecord(path="conv", kind="Conv", form=None, input="x", output="y")
    torch.manual_seed(0)
    model = torch.nn.Sequential()
    model.add_module("conv", torch.nn.Conv2d(4, 6, 3, padding=1))
    ref64 = copy.deepcopy(model).double()
    x = torch.randn(2, 4, 5, 7)
    with torch.no_grad():
        file_y = model.conv(x).numpy()  # a file computing what the fp32 model computes
        values = {"x": [x.numpy()], "y": [file_y]}
        row = _compare_layer(record, values, ref64=ref64, model=model, k=DEFAULT_K, fp32_errors=None)
        assert row.passed and row.max_rel < 1e-5, row
        ref64.conv.weight.mul_(2.0)  # the float64 copy holds other weights than the fp32 model
        values = {"x": [x.numpy()], "y": [ref64.conv(x.double()).float().numpy()]}
        row = _compare_layer(record, values, ref64=ref64, model=model, k=DEFAULT_K, fp32_errors=None)
    assert not row.passed and "evaluations of the layer differ by" in row.note, row


class _SqueezesItsBatch(torch.nn.Module):
    """``.mean((2, 3)).squeeze()``: at a batch of 1 the batch axis goes too."""

    def __init__(self):
        super().__init__()
        self.a = DCDConv2d(3, 8, 3, padding=1)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(torch.relu(self.a(x)).mean((2, 3)).squeeze())


def test_a_model_that_drops_its_batch_axis_at_batch_1_is_told_so(tmp_path):
    torch.manual_seed(0)
    net = _SqueezesItsBatch().eval()
    x = torch.rand(4, 3, 12, 12)
    result = export_onnx(net, tmp_path / "m.onnx", example_inputs=x[:1], check=False)
    # the file keeps the batch axis at every batch, the model not at 1
    sess = ort.InferenceSession(str(result.path), providers=["CPUExecutionProvider"])
    assert sess.run(None, {sess.get_inputs()[0].name: x[:1].numpy()})[0].shape == (1, 5)
    with pytest.raises(DCDDeployError, match=r"returns \(5,\) for a batch of 1 but \(4, 5\) for a batch of 4.*squeeze"):
        check_parity(net, result.path, inputs=x, batch_sizes=(1, 4))


def test_default_batch_sizes_are_those_the_given_inputs_fill(tmp_path):
    from dcd_deploy.parity import DEFAULT_BATCH_SIZES, default_batch_sizes

    assert DEFAULT_BATCH_SIZES == (1, 2) and default_batch_sizes(None) == (1, 2)
    assert default_batch_sizes(torch.zeros(1, 3, 4, 4)) == (1,)
    assert default_batch_sizes(np.zeros((5, 3, 4, 4))) == (1, 2)
    assert default_batch_sizes({"image": torch.zeros(1, 3), "meta": {"k": torch.zeros(1)}}) == (1,)
    assert default_batch_sizes((torch.zeros(()), [torch.zeros(2, 1)])) == (1, 2)  # the first with a batch axis


class _KeepsItsBatch(_SqueezesItsBatch):
    def forward(self, x):
        return self.fc(torch.relu(self.a(x)).mean((2, 3)))


def test_one_image_of_the_users_is_checked_at_batch_1(tmp_path):
    torch.manual_seed(0)
    net = _KeepsItsBatch().eval()
    x = torch.rand(1, 3, 12, 12)
    result = export_onnx(net, tmp_path / "m.onnx", example_inputs=x, parity_inputs=x)
    assert result.parity and {r.batch_size for r in result.parity.rows} == {1}
    report = check_parity(net, result.path, inputs=x)
    assert report and {r.batch_size for r in report.rows} == {1}
    with pytest.raises(DCDDeployError, match=r"batch size 2 needs at least 2 inputs; got 1 \(give more"):
        check_parity(net, result.path, inputs=x, batch_sizes=(1, 2))  # asked for: not trimmed


def test_numpy_inputs_are_taken_and_other_things_named(tmp_path):
    torch.manual_seed(0)
    net = _KeepsItsBatch().eval()
    x = np.random.default_rng(0).random((2, 3, 12, 12), dtype=np.float32)
    path = export_onnx(net, tmp_path / "m.onnx", input_size=12, check=False).path
    by_numpy = check_parity(net, path, inputs=x)
    by_torch = check_parity(net, path, inputs=torch.from_numpy(x.copy()))
    assert by_numpy and [r.max_abs for r in by_numpy.rows] == [r.max_abs for r in by_torch.rows]
    with pytest.raises(
        DCDDeployError, match=r"expected tensors or NumPy arrays, one per file input \(input\), got list"
    ):
        check_parity(net, path, inputs=(x.tolist(),))
