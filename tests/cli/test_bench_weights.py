"""``dcd-bench latency --models MODULE:FUNCTION --weights FILE``: the weights are loaded
(weights-only, strictly) into the model the factory builds, and its static counterpart is
made from the loaded model. Oracle: the model built and loaded by hand with
``load_state_dict``; the runs are the quickest (no timing is asserted).
"""

from __future__ import annotations

import pytest
import torch
from _cli import one_error_line
from _user_net import install_to_static, write_factory
from click.testing import CliRunner

from dcd_deploy._factory_spec import build_from_factory
from dcd_deploy.bench import _lineup
from dcd_deploy.cli.bench import main

FAST = ["--quick", "--runs", "2", "--warmup", "0", "--min-time", "0", "--input-size", "32"]


def run(args):
    return CliRunner().invoke(main, ["latency", *map(str, args)])


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    """tiny.py, and tiny.pt: its state dict with other values than build() gives."""
    monkeypatch.chdir(tmp_path)
    install_to_static(monkeypatch)
    write_factory(tmp_path)
    model = build_from_factory("tiny.py:build")
    with torch.no_grad():
        g = torch.Generator().manual_seed(3)
        for p in model.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))
    torch.save(model.state_dict(), tmp_path / "tiny.pt")
    return tmp_path


@pytest.fixture
def benched(monkeypatch):
    """The models the run loaded (spec -> model), captured as the lineup builds them."""
    seen = {}
    real = _lineup.static_counterpart

    def counterpart(model):
        seen["dcd"] = model
        seen["static"] = real(model)
        return seen["static"]

    monkeypatch.setattr(_lineup, "static_counterpart", counterpart)
    return seen


def test_weights_go_into_the_factory_model_and_its_static_counterpart(user_dir, benched):
    result = run(["--models", "tiny.py:build", "--weights", "tiny.pt", "--backends", "torch", *FAST])
    assert result.exit_code == 0, result.output
    assert "[build] tiny:build: built by tiny.py:build, weights tiny.pt" in result.stderr
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    want = build_from_factory("tiny.py:build")
    want.load_state_dict(torch.load(user_dir / "tiny.pt", weights_only=True))
    plain = build_from_factory("tiny.py:build").eval()
    with torch.no_grad():
        got, expected, unloaded = benched["dcd"](x), want.eval()(x), plain(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert not torch.allclose(got, unloaded)  # the weights changed what is benched
    # the static counterpart is the loaded model's W0, not build()'s
    static_w = [m.weight for m in benched["static"].modules() if isinstance(m, torch.nn.Conv2d)]
    assert any(torch.equal(w, want.pw.conv.weight) for w in static_w)


@pytest.mark.parametrize(
    "args, pattern",
    [
        (["--models", "tiny.py:build", "--weights", "missing.pt"], r"missing\.pt"),
        (["--models", "tiny.py:build", "--weights", "wrong.pt"], r"wrong\.pt does not fit tiny:build"),
        (["--models", "tiny.py:build", "--weights", "junk.pt"], r"junk\.pt"),
        (
            ["--models", "tiny.py:build,mobilenetv2_035", "--weights", "tiny.pt"],
            r"--weights tiny\.pt is for one model .*2 models given",
        ),
        (["--models", "tiny.onnx", "--weights", "tiny.pt"], r"not into tiny\.onnx \(a file has its own weights\)"),
        (["--models", "tiny.py:build", "--weights", "tiny.pt", "--json", "tiny.pt"], r"tiny\.pt"),
    ],
)
def test_bad_weights_are_one_error_line(user_dir, args, pattern):
    state = torch.load(user_dir / "tiny.pt", weights_only=True)
    torch.save(state | {"head.bias": torch.zeros(3)}, user_dir / "wrong.pt")
    (user_dir / "junk.pt").write_bytes(b"not a checkpoint")
    before = (user_dir / "tiny.pt").read_bytes()
    result = run(args + ["--backends", "torch", *FAST])
    one_error_line(result, pattern, notes=True)
    assert (user_dir / "tiny.pt").read_bytes() == before


def test_the_ema_copy_is_benched_when_named(user_dir, benched):
    trained = torch.load(user_dir / "tiny.pt", weights_only=True)
    ema = {k: v * 0.5 if v.is_floating_point() else v for k, v in trained.items()}
    torch.save({"epoch": 3, "state_dict": trained, "state_dict_ema": ema}, user_dir / "train.pth")
    args = ["--models", "tiny.py:build", "--weights", "train.pth", "--backends", "torch", *FAST]
    result = run([*args, "--weights-key", "state_dict_ema"])
    assert result.exit_code == 0, result.output
    got = benched["dcd"].state_dict()
    assert all(torch.equal(got[k], v) for k, v in ema.items())
    result = run(args)  # the default: the weights, and a warning that the EMA is there
    assert result.exit_code == 0, result.output
    assert "Warning: train.pth: loaded the weights under 'state_dict'; it also holds state_dict_ema" in result.stderr
    assert all(torch.equal(benched["dcd"].state_dict()[k], v) for k, v in trained.items())
    one_error_line(
        run(["--models", "tiny.py:build", "--weights-key", "ema", "--backends", "torch", *FAST]),
        r"--weights-key ema picks the weights in a checkpoint file; tiny\.py:build reads none",
        notes=True,
    )
