"""Build the fused kernels' stand-alone test driver, for this machine or cross for aarch64.

The driver (``csrc/openvino/test_driver.cpp``) runs the kernels of ``dcd_kernels.cpp``
without OpenVINO on cases read from a file and writes their outputs, so the kernels are
tested where no OpenVINO runs: cross-compiled with Debian's ``g++-aarch64-linux-gnu``
(statically linked, never ``-march=native``: the portable kernels, which GCC's vector
extensions turn into NEON code on aarch64) and run under ``qemu-user``'s
``qemu-aarch64``. ``tests/openvino/test_aarch64.py`` writes the cases and checks the
outputs against a float64 model of the op contract; ``make test-aarch64`` installs the two
packages when it may and runs those tests.

``python -m dcd_deploy.openvino._cross --missing`` prints the Debian packages whose tools
are missing (nothing when both are there); ``python -m dcd_deploy.openvino._cross
[aarch64|host]`` builds the driver and prints its path.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import ExtensionError
from ._build import (
    _COMMON_FLAGS,
    _KERNEL_FLAGS,
    _MAX_JOBS,
    _build_timeout,
    _default_out_dir,
    _find_compiler,
    _Jobs,
    source_dir,
)

__all__ = ["CROSS_CXX", "CROSS_PACKAGES", "QEMU", "build_driver", "cross_tools", "missing_packages", "run_driver"]

#: The aarch64 cross compiler and where it comes from (Debian package).
CROSS_CXX = ("aarch64-linux-gnu-g++", "g++-aarch64-linux-gnu")
#: The user-mode emulator (``qemu-user``; ``qemu-user-static`` names it ``qemu-aarch64-static``).
QEMU = (("qemu-aarch64", "qemu-aarch64-static"), "qemu-user")
#: The Debian packages ``make test-aarch64`` needs.
CROSS_PACKAGES = (CROSS_CXX[1], QEMU[1])
_DRIVER_SOURCES = (
    "test_driver.cpp",
    "kernel_host.cpp",
    "dcd_kernels.cpp",
    "depthwise_kernels.inc",
    "stages.inc",
    "shortk_kernels.inc",
    "dcd_kernels.hpp",
)
_DRIVER_UNITS = ("test_driver", "kernel_host")  # baseline-ISA units (.cpp), beside the kernels
_TIMEOUT_S = 600  # qemu runs the test cases in a few seconds


def _find_qemu() -> str | None:
    for name in QEMU[0]:
        exe = shutil.which(name)
        if exe:
            return exe
    return None


def missing_packages() -> list[str]:
    """The Debian packages of the cross tools not found on ``PATH`` (empty: both there)."""
    missing = []
    if shutil.which(CROSS_CXX[0]) is None:
        missing.append(CROSS_CXX[1])
    if _find_qemu() is None:
        missing.append(QEMU[1])
    return missing


def cross_tools() -> tuple[str, str]:
    """(aarch64 C++ compiler, qemu-aarch64) found on ``PATH``.

    Raises:
        ExtensionError: one of them is missing (the message names the Debian packages).
    """
    missing = missing_packages()
    if missing:
        raise ExtensionError(
            f"the aarch64 cross tools are missing: install the Debian package(s) "
            f"{' '.join(missing)} (apt-get install {' '.join(missing)})"
        )
    return shutil.which(CROSS_CXX[0]), _find_qemu()  # type: ignore[return-value]


def build_driver(*, target: str = "aarch64", out_dir: Path | None = None, force: bool = False) -> Path:
    """Build (or reuse) the kernel test driver and return its path.

    Args:
        target: ``aarch64`` (cross-compiled, statically linked) or ``host`` (this
            machine's compiler). Either way the portable kernels: the only ones an
            aarch64 build has; on x86 the OpenVINO tests run every ISA.
        out_dir: where to put it; default the extension's build directory.
        force: compile even when a driver of these sources and flags exists.

    Raises:
        ExtensionError: missing tools or sources, or a failed compile.
    """
    src = source_dir()
    missing = [name for name in _DRIVER_SOURCES if not (src / name).is_file()]
    if missing:
        raise ExtensionError(f"the kernel sources are missing: {', '.join(str(src / m) for m in missing)}")
    kernels = (("kernels_portable", ()),)
    if target == "aarch64":
        cxx = cross_tools()[0]
        link_flags: tuple = ("-static", "-pthread")  # runs under qemu without an aarch64 sysroot
    elif target == "host":
        cxx = _find_compiler()
        link_flags = ("-pthread",)
    else:
        raise ExtensionError(f"unknown driver target {target!r}: aarch64 or host")

    digest = hashlib.sha256()
    for name in _DRIVER_SOURCES:
        digest.update(name.encode() + b"\0" + (src / name).read_bytes() + b"\0")
    digest.update(repr((cxx, _COMMON_FLAGS, _KERNEL_FLAGS, kernels, link_flags)).encode())
    out_dir = Path(out_dir) if out_dir is not None else _default_out_dir()
    target_path = out_dir / f"dcd_kernel_driver-{target}-{digest.hexdigest()[:8]}"
    if target_path.is_file() and not force:
        return target_path
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExtensionError(f"cannot create {out_dir}: {exc.strerror or exc}") from None
    with tempfile.TemporaryDirectory(prefix=".dcd-driver-", dir=out_dir) as tmp:
        tmpdir = Path(tmp)
        base = [cxx, *_COMMON_FLAGS, f"-I{src}"]
        objs = [tmpdir / f"{unit}.o" for unit in _DRIVER_UNITS]
        cmds = [[*base, "-c", str(src / f"{unit}.cpp"), "-o", str(obj)] for unit, obj in zip(_DRIVER_UNITS, objs)]
        for obj, flags in kernels:
            objs.append(tmpdir / f"{obj}.o")
            cmds.append([*base, *_KERNEL_FLAGS, *flags, "-c", str(src / "dcd_kernels.cpp"), "-o", str(objs[-1])])
        partial = tmpdir / target_path.name
        timeout = _build_timeout()
        # the extension's own job runner: process groups, the build timeout, the first failure raises
        with _Jobs(
            limit=min(_MAX_JOBS, os.cpu_count() or 1), deadline=time.monotonic() + timeout, timeout=timeout, logs=tmpdir
        ) as runner:
            runner.run(cmds)
            runner.run([[cxx, "-o", str(partial), *(str(o) for o in objs), *link_flags]])
        os.replace(partial, target_path)
    for old in out_dir.glob(f"dcd_kernel_driver-{target}-*"):
        if old != target_path:
            old.unlink(missing_ok=True)
    return target_path


def run_driver(driver: Path, cases: Path, out: Path, *, target: str = "aarch64") -> str:
    """Run ``driver`` on the case file ``cases`` (under qemu for ``aarch64``), writing ``out``.

    Returns:
        The name of the kernels it ran (its ``kernels: NAME`` line).

    Raises:
        ExtensionError: the driver failed (its stderr in the message).
    """
    cmd = [str(driver), str(cases), str(out)]
    if target == "aarch64":
        cmd.insert(0, cross_tools()[1])
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=_TIMEOUT_S)
    if proc.returncode != 0:
        raise ExtensionError(
            f"the kernel driver failed (exit {proc.returncode}): "
            f"{proc.stderr.strip() or proc.stdout.strip()} (command: {' '.join(cmd)})"
        )
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("kernels: ")), "")
    return line[len("kernels: ") :]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--missing"]:
        print(" ".join(missing_packages()))
        return 0
    target = args[0] if args else "aarch64"
    try:
        print(build_driver(target=target))
    except ExtensionError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
