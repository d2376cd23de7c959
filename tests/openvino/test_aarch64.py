"""The fused kernels' portable path on aarch64: cross-compiled (``g++-aarch64-linux-gnu``)
with a stand-alone driver (``csrc/openvino/test_driver.cpp``) and run under ``qemu-aarch64``
(``qemu-user``), against the float64 numpy model of the op contract (_fused_reference).

The cases cover the three ops (DCDPointwise in both forms, DCDConvEpilogue at strides 1
and 2 and with latent_input, the joint-fusion form, DCDDepthwise 3x3 / 5x5 / 7x7 at
strides 1 and 2, padded, unpadded and dilated), global and 2x2 pooling on odd sides, the SE / attention /
residual / activation options, batches, K above the kernel's K block, channel counts
that leave partial panels, and the GEMM row split over threads. Skipped, with the reason,
when the cross tools are missing (``make test-aarch64`` installs them when it may, and
sets DCD_DEPLOY_REQUIRE_AARCH64=1 so a missing tool fails instead). The same driver built
for this machine checks the harness itself wherever a C++ compiler is.
"""

from __future__ import annotations

import os
import struct
import subprocess

import numpy as np
import pytest
from _fused_reference import (
    DEPTHWISE_WEIGHT_ORDER,
    EPILOGUE_WEIGHT_ORDER,
    LATENT_WEIGHT_ORDER,
    WEIGHT_ORDER,
    conv_nhwc,
    depthwise_reference,
    epilogue_reference,
    latent_epilogue_reference,
    make_case,
    make_depthwise_case,
    make_latent_case,
    max_relative_error,
    reference,
)

from dcd_deploy.errors import ExtensionError
from dcd_deploy.openvino import _cross

ACTS = {"none": 0, "relu": 1, "relu6": 2, "silu": 3, "hardswish": 4, "gelu": 5, "leaky_relu": 6, "mish": 7, "prelu": 8}
#: (se, attention, residual, activation) cases of the epilogue and depthwise kinds; an
#: activation with a parameter is (name, its value): LeakyReLU's slope, YOLO's 0.1, PyTorch's
#: default 0.01, and below 0 and above 1 (PyTorch takes any). PReLU's slopes: :func:`_slopes`.
OPTIONS = (
    (1, 0, 0, "relu"),
    (0, 1, 1, "relu6"),
    (1, 1, 1, "none"),
    (0, 0, 1, "silu"),
    (1, 0, 0, "hardswish"),
    (0, 1, 0, "gelu"),
    (1, 1, 1, ("leaky_relu", 0.1)),
    (0, 0, 0, ("leaky_relu", -0.75)),
    (1, 0, 1, "mish"),
    (0, 1, 1, "prelu"),
)
FORMS = {"weight": 0, "latent": 1, "auto": 2}
MAGIC = 0x4B444344
REQUIRE_ENV = "DCD_DEPLOY_REQUIRE_AARCH64"


def _act(act) -> dict:
    """A case's activation fields from an option's: a name, or (name, its parameter)."""
    name, alpha = act if isinstance(act, tuple) else (act, 0.0)
    return {"activation": name, "alpha": alpha}


def _slopes(k) -> np.ndarray | None:
    """A prelu case's slope per output channel (from -0.75 to 1.5, each its own), else None."""
    return np.linspace(-0.75, 1.5, k["Cout"]) if k["activation"] == "prelu" else None


def _alpha(k):
    """The reference's activation parameter: the slope, or prelu's slopes."""
    slopes = _slopes(k)
    return k["alpha"] if slopes is None else slopes


def _slope_bytes(k) -> bytes:
    """What follows the header's float: prelu's slopes (float32, Cout), else nothing."""
    slopes = _slopes(k)
    return b"" if slopes is None else np.ascontiguousarray(slopes, dtype="<f4").tobytes()


def _cases():
    """(sizes and options) of every case; each gets its own seed."""
    base = dict(
        B=1,
        H=7,
        W=7,
        Cin=17,
        Cout=23,
        L=4,
        S=8,
        pool=1,
        se=0,
        attention=0,
        residual=0,
        activation="none",
        alpha=0.0,
        form="weight",
        threads=1,
    )
    out = []
    for form in ("weight", "latent"):
        for pool in (1, 2):
            for h, w in ((7, 7), (5, 3), (1, 1), (14, 14)):
                out.append({**base, "H": h, "W": w, "pool": pool, "form": form})
        # channel counts: partial panels and vectors, L above a panel, K over one block
        for cin, cout, L in ((32, 96, 8), (96, 32, 20), (160, 96, 8), (23, 160, 20), (96, 17, 4), (200, 203, 8)):
            out.append({**base, "H": 5, "W": 3, "Cin": cin, "Cout": cout, "L": L, "S": 12, "pool": 2, "form": form})
        for se, att, res, act in (
            (0, 0, 0, "none"),
            (1, 0, 0, "relu"),
            (0, 1, 1, "relu6"),
            (1, 1, 1, "none"),
            (1, 1, 0, "relu6"),
            (0, 0, 1, "relu"),
            (1, 1, 1, "silu"),
            (0, 1, 0, "hardswish"),
            (1, 0, 1, "gelu"),
            (0, 1, 1, ("leaky_relu", 0.01)),
            (1, 0, 0, ("leaky_relu", 2.5)),
            (0, 1, 1, "mish"),
            (1, 1, 1, "prelu"),
        ):
            for B in (1, 4):
                out.append(
                    {
                        **base,
                        "B": B,
                        "H": 5,
                        "W": 3,
                        "Cin": 23,
                        "Cout": 17,
                        "L": 8,
                        "pool": 2,
                        "se": se,
                        "attention": att,
                        "residual": res,
                        **_act(act),
                        "form": form,
                    }
                )
        # Cin above the K block (256): partial sums go through the output
        out.append(
            {
                **base,
                "H": 3,
                "W": 5,
                "Cin": 600,
                "Cout": 40,
                "L": 8,
                "attention": 1,
                "residual": 1,
                "activation": "relu",
                "form": form,
            }
        )
        # one region per call and sample, its stages split over 2 and 3 threads (the op's
        # members are OpenVINO's threads; -2: two members one after the other on one
        # thread, as TBB may run them: the first does all the work, nothing waits)
        for threads in (2, 3, -2):
            out.append(
                {
                    **base,
                    "B": 2,
                    "H": 19,
                    "W": 17,
                    "Cin": 23,
                    "Cout": 40,
                    "L": 8,
                    "S": 6,
                    "pool": 2,
                    "se": 1,
                    "attention": 1,
                    "residual": 1,
                    "activation": "relu",
                    "form": form,
                    "threads": threads,
                }
            )
    out.append({**base, "H": 6, "W": 6, "pool": 2, "form": "auto"})
    # the short-K GEMM (K <= 128, panels of 8 on aarch64 in tiles of 4 rows x 2 panels): 1-7
    # full panels with and without a narrow last one, rows not a multiple of the 8-row block,
    # residual and ReLU6
    for cin, cout in ((16, 56), (24, 44), (1, 16), (128, 9)):
        out.append({**base, "H": 7, "W": 5, "Cin": cin, "Cout": cout, "residual": 1, "activation": "relu6", "S": 6})
    # DCDConvEpilogue (kind 1): 3x3 at strides 1 and 2, 1x1 at stride 2, odd sides, options,
    # batches, partial panels, the row split
    epi = {**base, "kind": 1, "k": 3, "stride": 1, "form": "latent"}
    for k, stride in ((3, 1), (3, 2), (1, 2)):
        for pool in (1, 2):
            for h, w in ((9, 9), (7, 5), (1, 1)):
                out.append({**epi, "k": k, "stride": stride, "pool": pool, "H": h, "W": w})
        for se, att, res, act in OPTIONS:
            out.append(
                {
                    **epi,
                    "k": k,
                    "stride": stride,
                    "B": 3,
                    "H": 8,
                    "W": 5,
                    "Cin": 19,
                    "Cout": 29,
                    "L": 6,
                    "pool": 2,
                    "se": se,
                    "attention": att,
                    "residual": res,
                    **_act(act),
                }
            )
        out.append(
            {
                **epi,
                "k": k,
                "stride": stride,
                "B": 2,
                "H": 17,
                "W": 15,
                "Cin": 23,
                "Cout": 160,
                "L": 20,
                "S": 6,
                "pool": 2,
                "se": 1,
                "attention": 1,
                "residual": 1,
                "activation": "relu",
                "threads": 3,
            }
        )
        out.append({**out[-1], "threads": -2})
    return out + _latent_cases(base) + _depthwise_cases(base)


def _latent_cases(base):
    """DCDConvEpilogue with latent_input (kind 2, joint fusion): Φ' of L x Lz, z given."""
    lat = {**base, "kind": 2, "stride": 1, "form": "latent", "Lz": 16}
    out = []
    for stride in (1, 2):
        for pool, (h, w) in ((1, (9, 9)), (2, (7, 5)), (2, (1, 1))):
            out.append({**lat, "stride": stride, "pool": pool, "H": h, "W": w})
        for se, att, res, act in OPTIONS:
            out.append(
                {**lat, "stride": stride, "B": 3, "H": 8, "W": 5, "Cin": 19, "Cout": 29, "L": 6, "Lz": 24}
                | {"pool": 2, "se": se, "attention": att, "residual": res, **_act(act)}
            )
    # partial panels, Lz above a panel, the row split
    out.append(
        {**lat, "B": 2, "H": 17, "W": 15, "Cin": 23, "Cout": 160, "L": 9, "Lz": 81, "S": 6, "pool": 2}
        | {"se": 1, "attention": 1, "residual": 1, "activation": "relu", "threads": 3}
    )
    out.append({**out[-1], "threads": -2})
    return out


def _depthwise_cases(base):
    """DCDDepthwise (kind 3): kernels, strides, paddings, dilation, channel tails, options,
    batches and the row split."""
    dw = {
        **base,
        "kind": 3,
        "Cin": 17,
        "Cout": 17,
        "L": 4,
        "form": "weight",
        "k": 3,
        "stride": 1,
        "pads": (1, 1, 1, 1),
        "dilation": 1,
    }
    out = []
    for k, stride, pads, dil in (
        (3, 1, (1, 1, 1, 1), 1),
        (3, 2, (1, 1, 1, 1), 1),
        (5, 1, (2, 2, 2, 2), 1),
        (5, 2, (0, 0, 0, 0), 1),
        (7, 1, (3, 3, 3, 3), 1),
        (7, 2, (3, 3, 3, 3), 1),
        (3, 1, (2, 2, 2, 2), 2),
        (3, 1, (0, 1, 1, 0), 1),
    ):
        for pool, (h, w) in ((1, (9, 11)), (2, (7, 5)), (2, (13, 14))):
            out.append({**dw, "k": k, "stride": stride, "pads": pads, "dilation": dil, "pool": pool, "H": h, "W": w})
    for C, L in ((4, 1), (8, 4), (33, 12), (96, 4)):
        out.append({**dw, "Cin": C, "Cout": C, "L": L, "H": 12, "W": 10, "pool": 2})
    for se, att, res, act in OPTIONS:
        out.append(
            {**dw, "B": 3, "H": 8, "W": 9, "Cin": 19, "Cout": 19, "se": se, "attention": att}
            | {"residual": res, **_act(act), "pool": 2}
        )
    out.append(
        {
            **dw,
            "B": 2,
            "H": 33,
            "W": 31,
            "Cin": 40,
            "Cout": 40,
            "se": 1,
            "attention": 1,
            "residual": 1,
            "activation": "relu",
            "threads": 3,
        }
    )
    out.append({**out[-1], "threads": -2})
    return out


CASES = _cases()


def write_cases(path, cases):
    """The driver's case file (test_driver.cpp, version 6) and the expected outputs, float64."""
    expected = []
    with open(path, "wb") as f:
        f.write(struct.pack("<3i", MAGIC, 6, len(cases)))
        for seed, k in enumerate(cases):
            kind = k.get("kind", 0)
            rng = np.random.default_rng(seed)
            if kind == 3:
                expected.append(_write_depthwise_case(f, rng, k))
                continue
            x, res, c = make_case(
                rng,
                B=k["B"],
                H=k["H"],
                W=k["W"],
                Cin=k["Cin"],
                Cout=k["Cout"],
                L=k["L"],
                S=k["S"],
                pool=k["pool"],
                se=k["se"],
                attention=k["attention"],
                residual=k["residual"] and not kind,
            )
            stride = k.get("stride", 1)
            if kind == 2:
                expected.append(_write_latent_case(f, rng, k))
                continue
            f.write(_header(k, kind))
            opts = dict(
                pool=k["pool"], se=k["se"], attention=k["attention"], activation=k["activation"], alpha=_alpha(k)
            )
            if kind == 0:
                tensors = [x, res] + [c[n] for n in WEIGHT_ORDER if n in c]
                expected.append(reference(x, res, c, **opts))
            else:
                w0 = (rng.standard_normal((k["Cout"], k["Cin"], k["k"], k["k"])) / np.sqrt(k["Cin"])).astype(np.float32)
                conv = conv_nhwc(x, w0, stride=stride, pad=k["k"] // 2).astype(np.float32)
                res = rng.standard_normal(conv.shape).astype(np.float32) if k["residual"] else None
                tensors = [x, conv, res] + [c[n] for n in EPILOGUE_WEIGHT_ORDER if n in c]
                expected.append(epilogue_reference(x, conv, res, c, stride=stride, offset=0, **opts))
            for a in tensors:
                if a is not None:
                    f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())
    return expected


def _header(k, kind):
    """The case's header (test_driver.cpp): 23 int32, the float32 slope, prelu's slopes."""
    fields = [k[n] for n in ("B", "H", "W", "Cin", "Cout", "S", "L", "pool", "se", "attention", "residual")]
    fields += [ACTS[k["activation"]], FORMS[k["form"]], k["threads"], kind, k.get("stride", 1), 0]
    return struct.pack("<23if", *fields, 0, 0, 0, 0, 0, 0, k["alpha"]) + _slope_bytes(k)


def _write_latent_case(f, rng, k):
    """A kind-2 case (header, Lz, tensors) into f; returns its expected output."""
    ho, wo = (k["H"] - 1) // k["stride"] + 1, (k["W"] - 1) // k["stride"] + 1
    sizes = {n: k[n] for n in ("B", "H", "W", "Cin", "Cout", "L", "Lz", "S", "pool", "se", "attention", "residual")}
    x, conv, z, res, c = make_latent_case(rng, Ho=ho, Wo=wo, **sizes)
    f.write(_header(k, 2) + struct.pack("<i", k["Lz"]))
    for a in [x, conv, res, z] + [c[n] for n in LATENT_WEIGHT_ORDER if n in c]:
        if a is not None:
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())
    opts = dict(pool=k["pool"], se=k["se"], attention=k["attention"], activation=k["activation"], alpha=_alpha(k))
    return latent_epilogue_reference(x, conv, z, res, c, **opts)


def _write_depthwise_case(f, rng, k) -> np.ndarray:
    """One DCDDepthwise case into the file; returns its expected output (float64)."""
    x, c = make_depthwise_case(
        rng,
        B=k["B"],
        H=k["H"],
        W=k["W"],
        C=k["Cin"],
        L=k["L"],
        S=k["S"],
        k=k["k"],
        pool=k["pool"],
        se=k["se"],
        attention=k["attention"],
    )
    geometry = dict(k=k["k"], stride=k["stride"], pads=k["pads"], dilation=k["dilation"])
    opts = dict(pool=k["pool"], se=k["se"], attention=k["attention"], activation=k["activation"], alpha=_alpha(k))
    shape = depthwise_reference(x, None, c, **opts, **geometry).shape
    res = rng.standard_normal(shape).astype(np.float32) if k["residual"] else None
    head = [k[n] for n in ("B", "H", "W", "Cin", "Cout", "S", "L", "pool", "se", "attention", "residual")]
    head += [ACTS[k["activation"]], FORMS[k["form"]], k["threads"], 3, k["stride"], 0, k["k"]]
    top, left, bottom, right = k["pads"]
    f.write(struct.pack("<23if", *head, top, left, bottom, right, k["dilation"], k["alpha"]) + _slope_bytes(k))
    for a in [x, res] + [c[n] for n in DEPTHWISE_WEIGHT_ORDER if n in c]:
        if a is not None:
            f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())
    return depthwise_reference(x, res, c, **opts, **geometry)


def read_outputs(path, expected):
    data = path.read_bytes()
    magic, n = struct.unpack_from("<2i", data)
    assert magic == MAGIC and n == len(expected)
    outs, off = [], 8
    for want in expected:
        got = np.frombuffer(data, dtype="<f4", count=want.size, offset=off).reshape(want.shape)
        outs.append(got)
        off += want.size * 4
    assert off == len(data), "the driver wrote more than the cases' outputs"
    return outs


def check_outputs(got, expected):
    errors = [(max_relative_error(g, w), i) for i, (g, w) in enumerate(zip(got, expected))]
    worst, i = max(errors)
    assert worst < 1e-5, f"case {i} {CASES[i]}: max error {worst:.2e} relative to the output scale"


def require_cross_tools() -> None:
    """Skip (or fail, when ``DCD_DEPLOY_REQUIRE_AARCH64=1``) naming the missing Debian packages."""
    missing = _cross.missing_packages()
    if not missing:
        return
    msg = f"aarch64 cross tools missing: install the Debian package(s) {' '.join(missing)} (or run make test-aarch64)"
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(msg)
    pytest.skip(msg)


# ------------------------------------------------------------------------------------ tests
def test_portable_kernels_under_qemu_aarch64(tmp_path):
    require_cross_tools()
    driver = _cross.build_driver(target="aarch64")
    assert driver.read_bytes()[18:20] == struct.pack("<H", 183)  # ELF e_machine EM_AARCH64
    expected = write_cases(tmp_path / "cases.bin", CASES)
    assert _cross.run_driver(driver, tmp_path / "cases.bin", tmp_path / "out.bin") == "portable"
    check_outputs(read_outputs(tmp_path / "out.bin", expected), expected)


def test_driver_on_this_machine(tmp_path):
    # the harness itself (case file, driver, comparison), where no cross tools are needed
    try:
        driver = _cross.build_driver(target="host")
    except ExtensionError as exc:
        pytest.skip(f"no native build of the driver: {exc}")
    # every third case, and every case of the split over threads (concurrent members, and
    # members run one after the other: the stages must not wait for a member that never comes)
    # and of LeakyReLU (its slope is the one float of the case's header) and PReLU (its slopes follow it)
    cases = [
        c
        for i, c in enumerate(CASES)
        if i % 3 == 0 or c["threads"] != 1 or c["alpha"] != 0.0 or c["activation"] == "prelu"
    ]
    expected = write_cases(tmp_path / "cases.bin", cases)
    assert _cross.run_driver(driver, tmp_path / "cases.bin", tmp_path / "out.bin", target="host") == "portable"
    got = read_outputs(tmp_path / "out.bin", expected)
    for i, (g, w) in enumerate(zip(got, expected)):
        assert max_relative_error(g, w) < 1e-5, cases[i]
    # and the comparison catches a wrong output: one value off in the last case
    bad = [g.copy() for g in got]
    bad[-1].flat[bad[-1].size // 2] += 1e-2 * max(1.0, float(np.abs(expected[-1]).max()))
    assert max_relative_error(bad[-1], expected[-1]) > 1e-5


def test_the_op_source_compiles_for_aarch64():
    # the x86 ISA dispatch of op_runtime.cpp (CPU-feature checks, AVX kernels) compiles away on
    # aarch64, even given the x86 build's -DDCD_WITH_X86; checked against the installed
    # openvino wheel's headers (there is no OpenVINO for aarch64 here to link against)
    require_cross_tools()
    pytest.importorskip("openvino")
    from dcd_deploy.openvino import _build

    _, include, _, _ = _build._find_openvino()
    cxx = _cross.cross_tools()[0]
    for source in _build._OP_UNITS:
        cmd = [
            cxx,
            *_build._COMMON_FLAGS,
            "-fsyntax-only",
            "-DOV_THREAD=OV_THREAD_TBB_ADAPTIVE",
            "-DDCD_WITH_X86",
            f"-I{_build.source_dir()}",
            f"-I{include}",
            str(_build.source_dir() / source),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-2000:]


def test_missing_tools_skip_with_the_packages_named(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it
    monkeypatch.delenv(REQUIRE_ENV, raising=False)
    assert _cross.missing_packages() == ["g++-aarch64-linux-gnu", "qemu-user"]
    with pytest.raises(pytest.skip.Exception, match="g\\+\\+-aarch64-linux-gnu qemu-user"):
        require_cross_tools()
    with pytest.raises(ExtensionError, match="apt-get install g\\+\\+-aarch64-linux-gnu qemu-user"):
        _cross.build_driver(target="aarch64", out_dir=tmp_path, force=True)
    assert list(tmp_path.iterdir()) == []
    # make test-aarch64 asks for the tools: then a missing one fails instead of skipping
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="qemu-user"):
        require_cross_tools()


def test_one_missing_tool_is_named_alone(monkeypatch, tmp_path):
    fake = tmp_path / "aarch64-linux-gnu-g++"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert _cross.missing_packages() == ["qemu-user"]
