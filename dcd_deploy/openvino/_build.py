"""Build the OpenVINO extension library of the fused DCD op from ``csrc/openvino``.

The library is compiled with the machine's C++ compiler against the installed ``openvino``
package (its headers and versioned libraries), without importing openvino. Its file name
carries the openvino version and a hash of the sources and compiler flags, so a source or
openvino change gives a new file and an unchanged one is reused without compiling::

    libdcd_deploy_openvino-<openvino version>-<8 hex>.so

The kernels are compiled three times (AVX-512, AVX2+FMA, baseline) and picked at run time
(env ``DCD_DEPLOY_ISA``), so one library runs on any x86-64 CPU; on other machines only the
portable kernels are built. ``python -m dcd_deploy.openvino._build`` builds and prints the path.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from ..errors import ExtensionError

__all__ = ["build_extension", "source_dir"]

_PACKAGE_DIR = Path(__file__).resolve().parent
_SOURCES = ("dcd_op.cpp", "dcd_kernels.cpp", "dcd_kernels.hpp")
_COMMON_FLAGS = ("-O3", "-std=c++17", "-fPIC", "-fvisibility=hidden")
# (object name, source, extra flags); the kernels are built once per instruction set
_X86_KERNELS = (
    ("kernels_avx512", ("-DDCD_ISA_AVX512", "-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma")),
    ("kernels_avx2", ("-DDCD_ISA_AVX2", "-mavx2", "-mfma")),
    ("kernels_portable", ()),
)
_KERNEL_FLAGS = ("-ffp-contract=fast",)  # FMA contraction in the AVX2 / AVX-512 kernels
_MAX_JOBS = 2


def source_dir() -> Path:
    """The C++ sources: ``csrc/openvino`` of the source tree."""
    return _PACKAGE_DIR.parent.parent / "csrc" / "openvino"


def _find_compiler() -> str:
    env = os.environ.get("CXX")
    if env:
        exe = shutil.which(env)
        if exe is None:
            raise ExtensionError(f"no C++ compiler found: CXX={env} is not an executable; "
                                 "install g++ (e.g. apt install g++) or set CXX")
        return exe
    for name in ("c++", "g++"):
        exe = shutil.which(name)
        if exe:
            return exe
    raise ExtensionError("no C++ compiler found: install g++ (e.g. apt install g++) or set CXX")


def _find_openvino() -> tuple[str, Path, Path, list[Path]]:
    """(version, include dir, libs dir, the two libraries to link)."""
    spec = importlib.util.find_spec("openvino")
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError("openvino is not installed: pip install 'dcd-deploy[openvino]'")
    root = Path(next(iter(spec.submodule_search_locations)))
    try:
        version = importlib.metadata.version("openvino")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    include, libs = root / "include", root / "libs"

    def lib(stem: str) -> Path:
        found = sorted(libs.glob(f"{stem}.so*"), key=lambda p: len(p.name))
        if not found:
            raise ExtensionError(f"openvino at {root} has no {stem}.so*: reinstall it "
                                 "(pip install --force-reinstall 'dcd-deploy[openvino]')")
        return found[0]

    if not (include / "openvino" / "op" / "op.hpp").is_file():
        raise ExtensionError(f"openvino at {root} has no C++ headers (include/openvino): "
                             "reinstall it (pip install 'dcd-deploy[openvino]')")
    return version, include, libs, [lib("libopenvino"), lib("libopenvino_onnx_frontend"), lib("libtbb")]


def _default_out_dir() -> Path:
    here = _PACKAGE_DIR / "_build"
    try:
        here.mkdir(exist_ok=True)
        if os.access(here, os.W_OK):
            return here
    except OSError:
        pass
    return Path.home() / ".cache" / "dcd-deploy"


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def _first_error_line(output: str) -> str:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln
    return lines[0] if lines else "(no compiler output)"


def _run(cmd: list[str]) -> None:
    try:
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    except OSError as exc:
        raise ExtensionError(f"cannot run the C++ compiler {cmd[0]}: {exc.strerror or exc}") from None
    if proc.returncode != 0:
        raise ExtensionError(f"compiling the OpenVINO extension failed: {_first_error_line(proc.stdout)} "
                             f"(command: {' '.join(cmd)})")


def build_extension(*, out_dir: Path | None = None, force: bool = False,
                    progress: Callable[[str], None] | None = None) -> Path:
    """Build (or reuse) the extension library and return its path.

    Args:
        out_dir: where to put the library; default ``dcd_deploy/openvino/_build/`` if
            writable, else ``~/.cache/dcd-deploy/``.
        force: compile even when the library for these sources and flags exists.
        progress: called with one line of text per step (e.g. ``print``).

    Raises:
        ExtensionError: no compiler, no openvino, missing sources or a failed compile.
    """
    say = progress or (lambda _msg: None)
    version, include, libs, link = _find_openvino()
    src = source_dir()
    missing = [name for name in _SOURCES if not (src / name).is_file()]
    if missing:
        raise ExtensionError(f"the extension sources are missing: {', '.join(str(src / m) for m in missing)} "
                             "(the C++ sources ship with the source tree)")
    x86 = _is_x86()
    kernels = _X86_KERNELS if x86 else _X86_KERNELS[-1:]
    # OpenVINO's own build setting (its CMake targets export it): ov::parallel_for runs on TBB
    op_flags = ["-DOV_THREAD=OV_THREAD_TBB_ADAPTIVE", *(["-DDCD_WITH_X86"] if x86 else [])]
    link_flags = [f"-L{libs}", *(f"-l:{p.name}" for p in link), f"-Wl,-rpath,{libs}"]

    digest = hashlib.sha256()
    for name in _SOURCES:
        digest.update(name.encode() + b"\0" + (src / name).read_bytes() + b"\0")
    digest.update(repr((_COMMON_FLAGS, _KERNEL_FLAGS, kernels, op_flags, link_flags, version)).encode())
    out_dir = Path(out_dir) if out_dir is not None else _default_out_dir()
    target = out_dir / f"libdcd_deploy_openvino-{version}-{digest.hexdigest()[:8]}.so"
    if target.is_file() and not force:
        return target

    cxx = _find_compiler()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExtensionError(f"cannot create {out_dir}: {exc.strerror or exc}") from None
    with tempfile.TemporaryDirectory(prefix=".dcd-ovext-", dir=out_dir) as tmp:
        tmpdir = Path(tmp)
        base = [cxx, *_COMMON_FLAGS, f"-I{src}", f"-I{include}"]
        jobs = [(tmpdir / "dcd_op.o", [*base, *op_flags, "-c", str(src / "dcd_op.cpp")])]
        for obj, flags in kernels:
            jobs.append((tmpdir / f"{obj}.o", [*base, *_KERNEL_FLAGS, *flags, "-c", str(src / "dcd_kernels.cpp")]))
        say(f"compiling the OpenVINO extension ({len(jobs)} objects, {cxx}) ...")
        cmds = [[*cmd, "-o", str(obj)] for obj, cmd in jobs]
        with ThreadPoolExecutor(max_workers=min(_MAX_JOBS, os.cpu_count() or 1)) as pool:
            for fut in [pool.submit(_run, cmd) for cmd in cmds]:
                fut.result()  # the first failure raises
        partial = tmpdir / target.name
        _run([cxx, "-shared", "-o", str(partial), *(str(obj) for obj, _ in jobs), *link_flags])
        os.replace(partial, target)
    for old in out_dir.glob("libdcd_deploy_openvino-*.so"):
        if old != target:  # a build of other sources or another openvino release; a process
            old.unlink(missing_ok=True)  # that has it loaded keeps its mapping
    say(f"built {target}")
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    force = "--force" in args
    try:
        path = build_extension(force=force, progress=lambda m: print(m, file=sys.stderr))
    except ExtensionError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
