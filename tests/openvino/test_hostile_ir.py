"""Tampered OpenVINO IR and fused files, and failures inside the fused op (issue #21).

Every size the op reads from a file is untrusted. The exact report: a fused model saved
as IR with its first ``packed="48, 8, 4, 4"`` changed to ``packed="48, 8,
177372507123220484, 34359738372"`` (products wrapping around 2^64 to the real 1088
values) died on signal 11; it must be one ``Error:`` line. A short hypothesis fuzz of
the op's attributes and ``packed`` values runs every example in a worker process (a
crash is a failed example, not a dead pytest) under a 4 GiB address-space cap; another
fuzzes DCDDepthwise's geometry (kernel, stride, dilation, pads) and ``packed``.

Also here: an op failure OpenVINO's CPU plugin swallows (a weight reaching the op through
a data-dependent Reshape with the wrong shape at run time) is raised by the API and named
by ``dcd-validate``; an OpenVINO message quoting a 1 MB attribute is capped; a bad
``DCD_DEPLOY_ISA`` during an export names the ``-o`` path; a truncated cached library is
rebuilt instead of killing the command with SIGBUS; SIGTERM ends a ``Loop`` of 10^15
iterations in OpenVINO.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ov = pytest.importorskip("openvino")
onnx = pytest.importorskip("onnx")
from _hostile import TIMEOUT, cap_memory, sigterm_inside_inference  # noqa: E402
from click.testing import CliRunner  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from dcd_deploy import create_model, export_onnx, save_checkpoint  # noqa: E402
from dcd_deploy.errors import DCDDeployError  # noqa: E402
from dcd_deploy.openvino import build_extension, compile_onnx, last_kernel_error  # noqa: E402

BIN = Path(sys.executable).parent
SIZE = 32
REPRO = 'packed="48, 8, 177372507123220484, 34359738372"'


def _core():
    core = ov.Core()
    core.add_extension(str(build_extension()))
    return core


@pytest.fixture(scope="module")
def fused(tmp_path_factory) -> Path:
    """mobilenetv2_035_dcd exported fused at 32x32, and its IR beside it (f.xml, f.bin)."""
    d = tmp_path_factory.mktemp("fused")
    path = d / "f.onnx"
    model = create_model("mobilenetv2_035_dcd")
    save_checkpoint(model, d / "m.pt")  # the weights of f.onnx, for dcd-validate
    export_onnx(model, path, input_size=SIZE, mode="fused", check=False)
    ov.save_model(_core().read_model(str(path)), str(d / "f.xml"), compress_to_fp16=False)
    return path


def _tampered_ir(fused: Path, name: str, old: str, new: str) -> Path:
    xml = fused.with_name("f.xml").read_text()
    assert old in xml
    out = fused.with_name(f"{name}.xml")
    out.write_text(xml.replace(old, new, 1))
    shutil.copy(fused.with_name("f.bin"), out.with_suffix(".bin"))
    return out


# Reads, compiles and runs a file (argv[1]) twice: through the toolkit's API, then through
# OpenVINO alone; prints one line for each.
RUN_IR = """\
import sys
import numpy as np
import openvino as ov
from dcd_deploy.errors import DCDDeployError
from dcd_deploy.openvino import build_extension, compile_onnx
x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
core = ov.Core()
core.add_extension(str(build_extension()))
for path in sys.argv[1:]:
    try:
        out = next(iter(compile_onnx(path, input_shape=x.shape).create_infer_request().infer({0: x}).values()))
        print("api ok", np.isfinite(out).all())
    except DCDDeployError as exc:
        print("api Error:", exc)
    try:
        out = core.compile_model(core.read_model(path), "CPU")([x])[0]
        print("openvino ok", np.isfinite(out).all())
    except RuntimeError as exc:
        print("openvino RuntimeError")
"""


def test_the_reported_ir_overflow_is_one_line(fused):
    bad = _tampered_ir(fused, "overflow", 'packed="48, 8, 4, 4"', REPRO)
    result = subprocess.run(
        [sys.executable, "-c", RUN_IR, str(bad), str(fused.with_name("f.xml"))],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        preexec_fn=cap_memory,
    )
    assert result.returncode == 0, f"status {result.returncode} (a signal if negative)\n{result.stderr}"
    api, raw, good_api, good_raw = result.stdout.splitlines()
    assert api.startswith("api Error: OpenVINO cannot compile") and "S = 177372507123220484 is outside 1-65536" in api
    assert raw == "openvino RuntimeError"
    assert (good_api, good_raw) == ("api ok True", "openvino ok True")  # the untampered IR runs


# -- fuzz: the op's attributes and packed values, each example in a worker process -----------------

WORKER = """\
import sys
import numpy as np
import openvino as ov
core = ov.Core()
core.add_extension(sys.argv[1])
x = np.random.default_rng(0).standard_normal((1, 5, 5, 8)).astype(np.float32)
for line in sys.stdin:
    try:
        compiled = core.compile_model(core.read_model(line.strip()), "CPU", {"INFERENCE_NUM_THREADS": 1})
        out = compiled([x] + [x] * (len(compiled.inputs) - 1))[0]
        print("ran", flush=True)
    except RuntimeError:
        print("refused", flush=True)
"""


@pytest.fixture(scope="module")
def small_ir(tmp_path_factory) -> Path:
    """One packed DCDPointwise node (Cin 8, Cout 12, S 4, L 3, pool 2, SE, attention) as IR."""
    d = tmp_path_factory.mktemp("small_ir")
    rng = np.random.default_rng(0)
    cin, cout, S, L = 8, 12, 4, 3
    shapes = {
        "fc1": (S, cin * 4),
        "gate": (S, S),
        "scale_w": (cout, S),
        "phi_w": (L * L, S),
        "phi_b": (L * L,),
        "q": (L, cin),
        "q_b": (L,),
        "p": (cout, L),
        "w0": (cout, cin),
        "bias": (cout,),
    }
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), k) for k, s in shapes.items()]
    node = helper.make_node(
        "DCDPointwise",
        ["x", *shapes],
        ["out"],
        domain="dcd_deploy",
        pool=2,
        se=1,
        attention=1,
        residual=0,
        activation="relu",
        form="weight",
    )
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 5, cin])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 5, 5, cout])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("dcd_deploy", 1)])
    onnx.save(model, d / "one.onnx")
    ov.save_model(_core().read_model(str(d / "one.onnx")), str(d / "one.xml"), compress_to_fp16=False)
    assert 'packed="12, 8, 4, 3"' in (d / "one.xml").read_text()
    return d / "one.xml"


@pytest.fixture(scope="module")
def worker(small_ir):
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER, str(build_extension())],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=cap_memory,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    yield proc
    proc.kill()
    proc.wait()


_BIG = [2**31 - 1, 2**31, 2**32 + 4, 2**62, 2**63 - 1, 177372507123220484, 34359738372, 65536, 65537]
_dims = st.one_of(
    st.sampled_from([12, 8, 4, 3]), st.integers(-3, 70), st.sampled_from(_BIG), st.integers(-(2**63), 2**63 - 1)
)
_texts = st.one_of(
    st.sampled_from(
        ["none", "relu", "relu6", "leaky_relu", "leaky_relu", "prelu", "prelu", "weight", "latent", "auto", ""]
    ),
    st.text(alphabet="abcx6", max_size=8),
    st.just("y" * 5000),
)


@settings(
    deadline=None,
    derandomize=True,
    database=None,
    max_examples=150,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    pool=st.sampled_from([1, 2, 0, 3, -1, 2**31, 2**63 - 1]),
    flags=st.tuples(*[st.sampled_from([0, 1, 2, -1]) for _ in range(3)]),
    activation=_texts,
    form=_texts,
    packed=st.lists(_dims, min_size=0, max_size=5),
    alpha=st.sampled_from([None, "0.1", "-2.5", "nan", "inf", "-inf", "1e40", "abc", ""]),
    slopes=st.sampled_from([None, "", "0.5", "0.1, -0.2", "nan, 1", "1e40", "abc", ", ".join(["0.5"] * 12), "1,"]),
)
def test_fuzzed_attributes_never_crash(
    small_ir, worker, tmp_path_factory, pool, flags, activation, form, packed, alpha, slopes
):
    se, attention, residual = flags
    slope = "" if alpha is None else f' activation_alpha="{alpha}"'
    slope += "" if slopes is None else f' activation_slopes="{slopes}"'
    data = (
        f'<data pool="{pool}" se="{se}" attention="{attention}" residual="{residual}" '
        f'activation="{activation}"{slope} form="{form}" packed="{", ".join(map(str, packed))}" />'
    )
    xml = re.sub(r"<data pool=[^>]*/>", data, small_ir.read_text(), count=1)
    path = small_ir.with_name("fuzz.xml")
    path.write_text(xml)
    shutil.copy(small_ir.with_suffix(".bin"), path.with_suffix(".bin"))
    worker.stdin.write(f"{path}\n")
    worker.stdin.flush()
    answer = worker.stdout.readline().strip()
    assert answer in ("ran", "refused"), f"the worker died (status {worker.poll()}) on {data}"
    if answer == "ran":  # only a consistent node runs: the packed sizes of the real weights
        assert [int(v) for v in packed] == [12, 8, 4, 3] and pool == 2 and (se, attention) == (1, 1)


@pytest.fixture(scope="module")
def small_dw_ir(tmp_path_factory) -> Path:
    """One packed DCDDepthwise node (C 8, 3x3, S 4, L 2, pool 1, attention) as IR."""
    d = tmp_path_factory.mktemp("small_dw_ir")
    rng = np.random.default_rng(0)
    c, S, L = 8, 4, 2
    shapes = {
        "fc1": (S, c),
        "scale_w": (c, S),
        "phi_w": (L * L, S),
        "phi_b": (L * L,),
        "p": (c, L),
        "w0": (c, 9),
        "bias": (c,),
        "r": (L, 9),
    }
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), k) for k, s in shapes.items()]
    node = helper.make_node(
        "DCDDepthwise",
        ["x", *shapes],
        ["out"],
        domain="dcd_deploy",
        pool=1,
        se=0,
        attention=1,
        residual=0,
        activation="relu6",
        kernel=3,
        stride=1,
        dilation=1,
        pads=[1, 1, 1, 1],
    )
    graph = helper.make_graph(
        [node],
        "one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 5, 5, c])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 5, 5, c])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("dcd_deploy", 1)])
    onnx.save(model, d / "one.onnx")
    ov.save_model(_core().read_model(str(d / "one.onnx")), str(d / "one.xml"), compress_to_fp16=False)
    assert 'packed="8, 8, 4, 2"' in (d / "one.xml").read_text()
    return d / "one.xml"


_geometry = st.one_of(st.integers(-2, 9), st.sampled_from(_BIG), st.integers(-(2**63), 2**63 - 1))


def test_the_untampered_depthwise_ir_runs(small_dw_ir, worker):
    # the fuzz below has teeth: the node as written runs (and strides, paddings and
    # dilations that fit the 5x5 input run too)
    worker.stdin.write(f"{small_dw_ir}\n")
    worker.stdin.flush()
    assert worker.stdout.readline().strip() == "ran"


@settings(
    deadline=None,
    derandomize=True,
    database=None,
    max_examples=80,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    kernel=_geometry,
    stride=_geometry,
    dilation=_geometry,
    pads=st.lists(_geometry, min_size=0, max_size=5),
    packed=st.lists(st.one_of(st.sampled_from([8, 4, 2]), _dims), min_size=0, max_size=5),
)
def test_fuzzed_depthwise_attributes_never_crash(small_dw_ir, worker, kernel, stride, dilation, pads, packed):
    text = small_dw_ir.read_text()
    old = re.search(r"<data pool=[^>]*/>", text).group(0)
    geometry = {"kernel": kernel, "stride": stride, "dilation": dilation}
    data = old
    for name, value in geometry.items():
        data = re.sub(rf'{name}="[^"]*"', f'{name}="{value}"', data)
    data = re.sub(r'pads="[^"]*"', f'pads="{", ".join(map(str, pads))}"', data)
    data = re.sub(r'packed="[^"]*"', f'packed="{", ".join(map(str, packed))}"', data)
    path = small_dw_ir.with_name("fuzz.xml")
    path.write_text(text.replace(old, data, 1))
    shutil.copy(small_dw_ir.with_suffix(".bin"), path.with_suffix(".bin"))
    worker.stdin.write(f"{path}\n")
    worker.stdin.flush()
    answer = worker.stdout.readline().strip()
    assert answer in ("ran", "refused"), f"the worker died (status {worker.poll()}) on {data}"
    if answer == "ran":  # only the real weights' sizes and a kernel that fits the 5x5 input run
        assert [int(v) for v in packed] == [8, 8, 4, 2] and kernel == 3 and len(pads) == 4


# -- failures the CPU plugin swallows ----------------------------------------------------------------


def garbage_model(path: Path, *, cin=3, cout=4, S=8, L=2) -> None:
    """fc1 reaches the op through a Reshape whose target depends on the input's values: for
    finite inputs it is (S - 2, -1), the wrong shape, known only at run time."""
    rng = np.random.default_rng(0)
    arrays = {
        "fc1_flat": (S * cin,),
        "phi_w": (L * L, S),
        "phi_b": (L * L,),
        "q": (L, cin),
        "q_b": (L,),
        "p": (cout, L),
        "w0": (cout, cin),
        "bias": (cout,),
    }
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), k) for k, s in arrays.items()]
    inits += [
        numpy_helper.from_array(np.array(v, np.int64), k) for k, v in (("S", [S]), ("two", [2]), ("minus1", [-1]))
    ]
    nodes = [
        helper.make_node("Transpose", ["x"], ["xh"], perm=[0, 2, 3, 1]),
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("IsNaN", ["total"], ["nan"]),
        helper.make_node("Not", ["nan"], ["ok"]),
        helper.make_node("Cast", ["ok"], ["ok_i"], to=TensorProto.INT64),
        helper.make_node("Mul", ["ok_i", "two"], ["delta"]),
        helper.make_node("Sub", ["S", "delta"], ["rows"]),
        helper.make_node("Concat", ["rows", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["fc1_flat", "shape"], ["fc1"]),
        helper.make_node(
            "DCDPointwise",
            ["xh", "fc1", "phi_w", "phi_b", "q", "q_b", "p", "w0", "bias"],
            ["yh"],
            domain="dcd_deploy",
            pool=1,
            se=0,
            attention=0,
            residual=0,
            activation="none",
            form="weight",
        ),
        helper.make_node("ReduceMean", ["yh"], ["y"], axes=[1, 2], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "garbage",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, SIZE, SIZE])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", cout])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("dcd_deploy", 1)])
    model.ir_version = 8
    helper.set_model_props(model, {"input_size": str(SIZE)})
    onnx.save(model, path)


def test_a_swallowed_op_failure_is_raised_by_the_api(tmp_path):
    path = tmp_path / "garbage.onnx"
    garbage_model(path)
    x = np.ones((1, 3, SIZE, SIZE), np.float32)
    request = compile_onnx(path, input_shape=x.shape).create_infer_request()
    with pytest.raises(
        DCDDeployError,
        match=r"fused DCD op failed running .*garbage.onnx \(its output is not a "
        r"result\): fc1 has shape \[6,4\], expected \[6,3\]",
    ):
        request.infer({0: x})
    assert last_kernel_error() == "fc1 has shape [6,4], expected [6,3]"


def test_a_swallowed_op_failure_is_named_by_dcd_validate(tmp_path):
    from dcd_deploy.cli import validate

    path = tmp_path / "garbage.onnx"
    garbage_model(path)
    result = CliRunner().invoke(
        validate.main, ["mobilenetv2_035", str(path), "--backend", "openvino", "--batch-sizes", "1"]
    )
    assert result.exit_code == 1, result.output
    assert result.stderr.strip().splitlines() == [
        f"Error: OpenVINO's fused DCD op failed running {path} (its output is not a result): fc1 has shape [6,4], "
        "expected [6,3]"
    ]


def test_an_isa_changed_after_compiling_is_an_error(fused, monkeypatch):
    x = np.ones((1, 3, SIZE, SIZE), np.float32)
    request = compile_onnx(fused, input_shape=x.shape).create_infer_request()
    assert np.isfinite(next(iter(request.infer({0: x}).values()))).all()
    monkeypatch.setenv("DCD_DEPLOY_ISA", "sse9")
    with pytest.raises(DCDDeployError, match="DCD_DEPLOY_ISA=sse9 is not one of"):
        request.infer({0: x})
    # the op's output is NaN (tests/openvino/test_kernel.py), but OpenVINO's later Clip and
    # Gemm turn NaN into numbers: only the recorded failure tells a caller of its own request
    assert last_kernel_error().startswith("DCD_DEPLOY_ISA=sse9 is not one of")


def test_an_openvino_message_quoting_a_1mb_attribute_is_capped(fused, tmp_path):
    from dcd_deploy.cli import validate

    model = onnx.load(str(fused))
    node = next(n for n in model.graph.node if n.op_type == "DCDPointwise")
    next(a for a in node.attribute if a.name == "activation").s = b"x" * (1 << 20)
    bad = tmp_path / "big_attr.onnx"
    onnx.save(model, bad)
    result = CliRunner().invoke(validate.main, ["mobilenetv2_035_dcd", str(bad), "--backend", "openvino"])
    lines = result.stderr.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1, result.output[:2000]
    assert lines[0].startswith(
        f"Error: OpenVINO cannot compile {bad}: activation must be none, relu, relu6, silu, hardswish, gelu, leaky_relu, mish or prelu"
    )
    assert len(lines[0]) < 600


def test_a_bad_isa_during_export_names_the_output(tmp_path, monkeypatch):
    from dcd_deploy.cli import export

    monkeypatch.setenv("DCD_DEPLOY_ISA", "sse9")
    out = tmp_path / "m.onnx"
    result = CliRunner().invoke(
        export.main, ["mobilenetv2_035_dcd", "--mode", "fused", "-o", str(out), "--input-size", str(SIZE)]
    )
    line = result.stderr.strip().splitlines()[-1]
    assert result.exit_code == 1
    assert line.startswith(f"Error: OpenVINO cannot compile {out}: DCD_DEPLOY_ISA=sse9") and ".tmp" not in line
    assert list(tmp_path.iterdir()) == []


# -- through the installed commands ---------------------------------------------------------------


def _copying_compiler(d: Path, good: Path) -> Path:
    cxx = d / "cxx"
    cxx.write_text(f"""#!/bin/sh
out=""; shared=0; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; [ "$a" = "-shared" ] && shared=1; prev="$a"; done
if [ $shared = 1 ]; then cp "{good}" "$out"; else echo object > "$out"; fi
""")
    cxx.chmod(0o755)
    return cxx


def test_a_truncated_cached_library_is_rebuilt_by_the_commands(fused, tmp_path):
    """`head -c 100000 good.so > lib.so`: SIGBUS in every OpenVINO command, and a .tmp left.
    Now the hash beside it does not match, so the library is rebuilt before it is loaded."""
    good = build_extension()
    ext = tmp_path / "ext"
    ext.mkdir()
    shutil.copy(good.with_name(good.name + ".sha256"), ext)
    (ext / good.name).write_bytes(good.read_bytes()[:100_000])
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "DCD_DEPLOY_EXTENSION_DIR": str(ext), "CXX": str(_copying_compiler(tmp_path, good))}
    result = subprocess.run(
        [
            str(BIN / "dcd-validate"),
            str(fused.with_name("m.pt")),
            str(fused),
            "--backend",
            "openvino",
            "--batch-sizes",
            "1",
            "--num-inputs",
            "2",
            "--json",
            str(out / "r.json"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        preexec_fn=cap_memory,
    )
    assert result.returncode == 0, result.stderr
    assert (ext / good.name).read_bytes() == good.read_bytes()
    assert sorted(p.name for p in out.iterdir()) == ["r.json"]
    assert sorted(p.name for p in ext.iterdir()) == [good.name, good.name + ".sha256"]


def test_sigterm_ends_an_endless_openvino_inference(tmp_path):
    result = sigterm_inside_inference(tmp_path, "openvino")
    assert result.returncode == 128 + signal.SIGTERM, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "Error: stopped by SIGTERM; temporary files removed, nothing written"
    )
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hook", "inside", "loop.onnx"]


HANGING_COMPILER = """#!/bin/sh
echo $$ >> "{d}/pids"
sleep 1000 &
echo $! >> "{d}/pids"
wait
"""


def test_sigterm_during_a_fused_export_with_a_hanging_compiler(tmp_path):
    """`CXX` that hangs: dcd-export --mode fused used to outlive SIGTERM (the pool waited for
    the compiler) and SIGKILL left a .tmp, a .dcd-ovext-* folder and orphan compilers."""
    cxx = tmp_path / "cxx"
    cxx.write_text(HANGING_COMPILER.format(d=tmp_path))
    cxx.chmod(0o755)
    ext, out = tmp_path / "ext", tmp_path / "out"
    ext.mkdir()
    out.mkdir()
    env = {**os.environ, "CXX": str(cxx), "DCD_DEPLOY_EXTENSION_DIR": str(ext), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            str(BIN / "dcd-export"),
            "mobilenetv2_035_dcd",
            "--mode",
            "fused",
            "-o",
            str(out / "m.onnx"),
            "--input-size",
            str(SIZE),
            "--no-simplify",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=cap_memory,
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not (tmp_path / "pids").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (tmp_path / "pids").exists(), proc.communicate()[1] if proc.poll() is not None else "no compiler"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)  # a hang fails here
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == "Error: stopped by SIGTERM; temporary files removed, nothing written"
    assert list(out.iterdir()) == [] and list(ext.iterdir()) == []
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    for pid in pids:  # the compilers and their children are gone (or zombies of init)
        try:
            with open(f"/proc/{pid}/stat") as fh:
                assert fh.read().split(")")[-1].split()[0] == "Z", f"compiler process {pid} still runs"
        except FileNotFoundError:
            pass
