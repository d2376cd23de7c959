"""Build the OpenVINO extension library of the fused DCD op from ``csrc/openvino``.

The library is compiled with the machine's C++ compiler against the installed ``openvino``
package (its headers and versioned libraries), without importing openvino. Its file name
carries the openvino version and a hash of the sources and compiler flags, so a source or
openvino change gives a new file and an unchanged one is reused without compiling::

    libdcd_deploy_openvino-<openvino version>-<8 hex>.so

The kernels are compiled three times (AVX-512, AVX2+FMA, baseline) and picked at run time
(env ``DCD_DEPLOY_ISA``), so one library runs on any x86-64 CPU; on other machines only the
portable kernels are built. ``python -m dcd_deploy.openvino._build`` builds and prints the path.

A cached library is trusted by content, not by name: the build loads the new library in
a subprocess and asks its self-check entry point (``dcd_deploy_ov_selfcheck``, which also
returns the build's hash) before installing it with its SHA-256 beside it, and every
later call compares that hash before the library is handed to OpenVINO; a junk,
truncated or foreign file is rebuilt, never loaded. Builders of one folder take turns
(an ``fcntl`` lock on the folder); compilers run in their own process groups, killed on
an error, a signal or after ``DCD_DEPLOY_BUILD_TIMEOUT`` seconds; temporary folders of
builders that died are removed by the next build.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from .. import _cleanup
from ..errors import ExtensionError

__all__ = ["DEFAULT_TIMEOUT", "DIR_ENV", "TIMEOUT_ENV", "build_extension", "source_dir"]

#: Environment variable naming the folder of the built library (default: see build_extension).
DIR_ENV = "DCD_DEPLOY_EXTENSION_DIR"
#: Environment variable bounding a whole build (compiles, link, self-check), in seconds.
TIMEOUT_ENV = "DCD_DEPLOY_BUILD_TIMEOUT"
DEFAULT_TIMEOUT = 900.0
#: What the library's ``dcd_deploy_ov_selfcheck()`` answers ("DCD1").
SELF_CHECK_MAGIC = 0x44434431
#: Longest compiler line quoted in an error.
MAX_LINE = 300
_TMP_PREFIX = ".dcd-ovext-"
_GROUPS_FILE = "process-groups"
#: The POSIX shell each compiler is started through (it records its process group first).
_RECORD_SHELL = "/bin/sh"
#: Compiler and linker messages that are the machine's state, not the sources'.
_ENVIRONMENT_REASONS = (
    "No space left on device",
    "Disk quota exceeded",
    "File too large",
    "Read-only file system",
    "virtual memory exhausted",
    "Cannot allocate memory",
)

_PACKAGE_DIR = Path(__file__).resolve().parent
# The ops' translation units (baseline ISA, against OpenVINO's headers), then every source
# the build reads (the kernels are compiled once per instruction set, below).
_OP_UNITS = (
    "dcd_pointwise.cpp",
    "dcd_epilogue.cpp",
    "dcd_depthwise.cpp",
    "op_contract.cpp",
    "op_failures.cpp",
    "op_runtime.cpp",
    "weight_packing.cpp",
    "extension.cpp",
    "c_api.cpp",
    "kernel_host.cpp",
)
_SOURCES = (
    *_OP_UNITS,
    "dcd_pointwise.hpp",
    "dcd_epilogue.hpp",
    "dcd_depthwise.hpp",
    "op_contract.hpp",
    "op_failures.hpp",
    "op_runtime.hpp",
    "weight_packing.hpp",
    "packed_layout.hpp",
    "dcd_kernels.cpp",
    "depthwise_kernels.inc",
    "stages.inc",
    "shortk_kernels.inc",
    "dcd_kernels.hpp",
)
_COMMON_FLAGS = ("-O3", "-std=c++17", "-fPIC", "-fvisibility=hidden")
# (object name, source, extra flags); the kernels are built once per instruction set
_X86_KERNELS = (
    ("kernels_avx512", ("-DDCD_ISA_AVX512", "-mavx512f", "-mavx512dq", "-mavx512vl", "-mavx512bw", "-mfma")),
    # loops at 64-byte boundaries: on a Zen 3 the AVX2 kernels ran 2-6% faster, the same
    # source otherwise moving by up to 4% with where its loops happened to fall
    # (docs/performance.md, "AVX2 (AMD EPYC Zen 3)")
    ("kernels_avx2", ("-DDCD_ISA_AVX2", "-mavx2", "-mfma", "-falign-loops=64")),
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
            raise ExtensionError(
                f"no C++ compiler found: CXX={env} is not an executable; install g++ (e.g. apt install g++) or set CXX"
            )
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
            raise ExtensionError(
                f"openvino at {root} has no {stem}.so*: reinstall it "
                "(pip install --force-reinstall 'dcd-deploy[openvino]')"
            )
        return found[0]

    if not (include / "openvino" / "op" / "op.hpp").is_file():
        raise ExtensionError(
            f"openvino at {root} has no C++ headers (include/openvino): "
            "reinstall it (pip install 'dcd-deploy[openvino]')"
        )
    return version, include, libs, [lib("libopenvino"), lib("libopenvino_onnx_frontend"), lib("libtbb")]


def _default_out_dir() -> Path:
    env = os.environ.get(DIR_ENV)
    if env:
        return Path(env)
    here = _PACKAGE_DIR / "_build"
    try:
        here.mkdir(exist_ok=True)
        if os.access(here, os.W_OK):
            return here
    except OSError:
        pass
    # One folder per checkout: two checkouts sharing the fallback must not delete each
    # other's library (each removes only older builds of its own folder).
    key = hashlib.sha256(str(source_dir().resolve()).encode()).hexdigest()[:12]
    return Path.home() / ".cache" / "dcd-deploy" / key


def _is_x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")


def _clip(text: str, n: int = MAX_LINE) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def _first_error_line(output: str) -> str:
    """The line of a compiler's output that says what went wrong.

    The machine's state first: a full disk makes the linker say "No space left on
    device" a line before the "ld returned 1 exit status" every link failure ends with.
    """
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in lines:
        if any(reason in ln for reason in _ENVIRONMENT_REASONS):
            return _clip(ln)
    for ln in lines:
        if "error" in ln.lower():
            return _clip(ln)
    return _clip(lines[0]) if lines else "(no compiler output)"


def _build_timeout() -> float:
    text = os.environ.get(TIMEOUT_ENV, "")
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1e7:
        raise ExtensionError(f"{TIMEOUT_ENV}={_clip(text, 40)} is not a number of seconds (e.g. 600)")
    return value


class _Jobs:
    """Compiler commands run at most ``limit`` at a time, each in its own process group.

    Polled from the calling (main) thread, so a signal handler runs while the compilers
    do; leaving the ``with`` block, however (an error, a timeout, SIGTERM), kills every
    group still running: a compiler that hangs, and its children, end with the build.
    """

    def __init__(self, *, limit: int, deadline: float, timeout: float, logs: Path):
        self.limit, self.deadline, self.timeout, self.logs = limit, deadline, timeout, logs
        self.running: list[tuple[subprocess.Popen, Path, list[str]]] = []
        self.started = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for proc, _, _ in self.running:
            self._end(proc)
        self.running.clear()

    @staticmethod
    def _end(proc: subprocess.Popen) -> None:
        _cleanup.kill_group(proc.pid)  # children a finished compiler left behind, too
        proc.wait()
        _cleanup.unregister_group(proc.pid)

    def run(self, cmds: list[list[str]]) -> None:
        """Run every command; the first failure or the deadline raises ExtensionError."""
        pending = list(cmds)
        while pending or self.running:
            while pending and len(self.running) < self.limit:
                self._start(pending.pop(0))
            for entry in list(self.running):
                proc, log, cmd = entry
                if proc.poll() is None:
                    continue
                self.running.remove(entry)
                self._end(proc)
                if proc.returncode != 0:
                    output = log.read_text(errors="replace")
                    status = (
                        f"killed by {signal.Signals(-proc.returncode).name}"
                        if proc.returncode < 0
                        else f"exit {proc.returncode}"
                    )
                    raise ExtensionError(
                        f"compiling the OpenVINO extension failed: {_first_error_line(output)} "
                        f"({status}; command: {_clip(' '.join(cmd))})"
                    )
            if time.monotonic() > self.deadline:
                raise ExtensionError(
                    f"compiling the OpenVINO extension took more than {self.timeout:g} s; "
                    f"stopped (a hanging compiler? {TIMEOUT_ENV} sets the limit)"
                )
            time.sleep(0.05)

    def _start(self, cmd: list[str]) -> None:
        log = self.logs / f"job{self.started}.log"
        self.started += 1
        # The group records itself for the next build, in case this process is SIGKILLed: a
        # shell (the new session's leader, so its pid is the group's) appends its pid, then
        # becomes the compiler. Recorded here after the start instead, a SIGKILL between the
        # two would leave the group unrecorded (seen on a loaded machine).
        recorded = [_RECORD_SHELL, "-c", 'echo $$ >> "$0" && exec "$@"', str(self.logs / _GROUPS_FILE), *cmd]
        with open(log, "wb") as out, _cleanup.critical():  # no signal between the start and the record
            try:
                proc = subprocess.Popen(
                    recorded, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
                )
            except OSError as exc:
                raise ExtensionError(f"cannot run the C++ compiler {cmd[0]}: {exc.strerror or exc}") from None
            _cleanup.register_group(proc.pid)
            self.running.append((proc, log, cmd))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sidecar(lib: Path) -> Path:
    return lib.with_name(lib.name + ".sha256")


_verified: dict[str, tuple] = {}


def _is_verified(lib: Path) -> bool:
    """Whether ``lib`` is the file its build recorded (its sidecar's SHA-256).

    A library is mapped, not read: a truncated one (a full disk, a copy cut short) kills
    the process with SIGBUS when OpenVINO loads it. So nothing is loaded unverified.
    """
    try:
        st = lib.stat()
        recorded = _sidecar(lib).read_text().split()
    except (OSError, UnicodeDecodeError):
        return False
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if _verified.get(str(lib)) == key:
        return True
    try:
        ok = bool(recorded) and recorded[0] == _sha256(lib)
    except OSError:
        return False
    if ok:
        _verified[str(lib)] = key
    return ok


# Loads the library with ctypes only (no openvino import: fast) and prints its answers.
_SELF_CHECK = """\
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.dcd_deploy_ov_selfcheck.restype = ctypes.c_uint
lib.dcd_deploy_ov_build_id.restype = ctypes.c_char_p
print(hex(lib.dcd_deploy_ov_selfcheck()), lib.dcd_deploy_ov_build_id().decode())
"""


def _self_check(lib: Path, build_id: str, *, deadline: float) -> None:
    """Load ``lib`` in a subprocess (a broken library may crash its loader) and ask the op.

    Raises:
        ExtensionError: it does not load, crashes, or is not this build of the op.
    """
    want = f"{hex(SELF_CHECK_MAGIC)} {build_id}"
    with _cleanup.critical():
        proc = subprocess.Popen(
            [sys.executable, "-c", _SELF_CHECK, str(lib)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        _cleanup.register_group(proc.pid)
    try:
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise ExtensionError(
            "the compiled OpenVINO extension did not answer its self-check in time; not installed"
        ) from None
    finally:
        _cleanup.kill_group(proc.pid)
        proc.wait()
        _cleanup.unregister_group(proc.pid)
    if proc.returncode != 0 or out.decode(errors="replace").strip() != want:
        why = (
            f"killed by {signal.Signals(-proc.returncode).name}"
            if proc.returncode < 0
            else _first_error_line(err.decode(errors="replace"))
            if proc.returncode
            else f"it answered {_clip(out.decode(errors='replace').strip(), 80)!r}"
        )
        raise ExtensionError(
            f"the compiled OpenVINO extension fails its self-check ({why}); not installed: check the C++ compiler (CXX)"
        )


@contextlib.contextmanager
def _locked(out_dir: Path):
    """One builder at a time per folder: an ``fcntl`` lock on the folder itself (no lock
    file to leave behind; released when the process dies)."""
    try:
        fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise ExtensionError(f"cannot open {out_dir}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _remove_stale(out_dir: Path) -> None:
    """Temporary folders of builders that died (SIGKILL, power loss); called under the lock."""
    for tmp in out_dir.glob(f"{_TMP_PREFIX}*"):
        match = re.fullmatch(re.escape(_TMP_PREFIX) + r"(\d+)-.*", tmp.name)
        if match and int(match.group(1)) != os.getpid():
            try:
                os.kill(int(match.group(1)), 0)
                continue  # its builder is alive (a builder of an older version, without the lock)
            except ProcessLookupError:
                pass
            except PermissionError:
                continue
        elif match is None:
            try:
                if time.time() - tmp.stat().st_mtime < 3600:
                    continue  # an older version's folder, maybe in use
            except OSError:
                continue
        _kill_orphans(tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def _kill_orphans(tmp: Path) -> None:
    """Kill the compiler groups a dead builder left running (it recorded them in ``tmp``).

    A group is killed only if one of its processes still names ``tmp`` on its command
    line (a process id reused since is left alone). Linux only (``/proc``).
    """
    try:
        pgids = {int(v) for v in (tmp / _GROUPS_FILE).read_text().split()}
    except (OSError, ValueError):
        return
    needle = os.fsencode(tmp)
    try:
        pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return
    for pid in pids:
        try:
            pgid = os.getpgid(pid)
            if pgid in pgids:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if needle in fh.read():
                        _cleanup.kill_group(pgid)
                        pgids.discard(pgid)
        except OSError:
            continue


def build_extension(
    *, out_dir: Path | None = None, force: bool = False, progress: Callable[[str], None] | None = None
) -> Path:
    """Build (or reuse) the extension library and return its path.

    Only a library that loaded in a subprocess and answered the op's self-check is
    installed, with its SHA-256 beside it (``<name>.so.sha256``); one whose hash does not
    match (truncated, replaced) is rebuilt, never loaded.

    Args:
        out_dir: where to put the library; default ``$DCD_DEPLOY_EXTENSION_DIR`` if set,
            else ``dcd_deploy/openvino/_build/`` if writable, else
            ``~/.cache/dcd-deploy/<hash of this checkout's path>/``.
        force: compile even when the library for these sources and flags exists.
        progress: called with one line of text per step (e.g. ``print``).

    Raises:
        ExtensionError: no compiler, no openvino, missing sources, a failed or timed-out
            compile (:data:`TIMEOUT_ENV`), or a library that fails its self-check.
    """
    say = progress or (lambda _msg: None)
    version, include, libs, link = _find_openvino()
    src = source_dir()
    missing = [name for name in _SOURCES if not (src / name).is_file()]
    if missing:
        raise ExtensionError(
            f"the extension sources are missing: {', '.join(str(src / m) for m in missing)} "
            "(the C++ sources ship with the source tree)"
        )
    x86 = _is_x86()
    kernels = _X86_KERNELS if x86 else _X86_KERNELS[-1:]
    # OpenVINO's own build setting (its CMake targets export it): ov::parallel_for runs on TBB
    op_flags = ["-DOV_THREAD=OV_THREAD_TBB_ADAPTIVE", *(["-DDCD_WITH_X86"] if x86 else [])]
    link_flags = [f"-L{libs}", *(f"-l:{p.name}" for p in link), f"-Wl,-rpath,{libs}"]

    digest = hashlib.sha256()
    for name in _SOURCES:
        digest.update(name.encode() + b"\0" + (src / name).read_bytes() + b"\0")
    digest.update(repr((_COMMON_FLAGS, _KERNEL_FLAGS, kernels, op_flags, link_flags, version)).encode())
    build_id = digest.hexdigest()[:16]
    out_dir = Path(out_dir) if out_dir is not None else _default_out_dir()
    target = out_dir / f"libdcd_deploy_openvino-{version}-{build_id[:8]}.so"
    if not force and _is_verified(target):
        return target

    timeout = _build_timeout()
    deadline = time.monotonic() + timeout
    cxx = _find_compiler()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ExtensionError(f"cannot create {out_dir}: {exc.strerror or exc}") from None
    with _locked(out_dir):
        if not force and _is_verified(target):  # another process built it while we waited
            return target
        _remove_stale(out_dir)
        try:
            _build_locked(
                target,
                cxx=cxx,
                src=src,
                include=include,
                kernels=kernels,
                op_flags=op_flags,
                link_flags=link_flags,
                build_id=build_id,
                deadline=deadline,
                timeout=timeout,
                say=say,
            )
        except OSError as exc:  # our own writes: a full disk, a folder made read-only meanwhile
            raise ExtensionError(f"cannot install the OpenVINO extension in {out_dir}: {exc.strerror or exc}") from None
        for old in out_dir.glob("libdcd_deploy_openvino-*.so*"):
            if old not in (target, _sidecar(target)):  # an older build of this checkout; a process
                old.unlink(missing_ok=True)  # that has it loaded keeps its mapping
    say(f"built {target}")
    return target


def _build_locked(
    target: Path,
    *,
    cxx: str,
    src: Path,
    include: Path,
    kernels,
    op_flags,
    link_flags,
    build_id: str,
    deadline: float,
    timeout: float,
    say: Callable[[str], None],
) -> None:
    tmpdir = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-", dir=target.parent))
    _cleanup.register_path(tmpdir)
    try:
        base = [cxx, *_COMMON_FLAGS, f"-I{src}", f"-I{include}"]
        jobs = [
            (
                tmpdir / f"{Path(unit).stem}.o",
                [
                    *base,
                    *op_flags,
                    *([f'-DDCD_BUILD_ID="{build_id}"'] if unit == "c_api.cpp" else []),
                    "-c",
                    str(src / unit),
                ],
            )
            for unit in _OP_UNITS
        ]
        for obj, flags in kernels:
            jobs.append((tmpdir / f"{obj}.o", [*base, *_KERNEL_FLAGS, *flags, "-c", str(src / "dcd_kernels.cpp")]))
        say(f"compiling the OpenVINO extension ({len(jobs)} objects, {cxx}) ...")
        partial = tmpdir / target.name
        with _Jobs(
            limit=min(_MAX_JOBS, os.cpu_count() or 1), deadline=deadline, timeout=timeout, logs=tmpdir
        ) as runner:
            runner.run([[*cmd, "-o", str(obj)] for obj, cmd in jobs])
            _expect_output([obj for obj, _ in jobs], cxx)
            runner.run([[cxx, "-shared", "-o", str(partial), *(str(obj) for obj, _ in jobs), *link_flags]])
        _expect_output([partial], cxx)
        _self_check(partial, build_id, deadline=deadline)
        sidecar = tmpdir / "sha256"
        sidecar.write_text(f"{_sha256(partial)}  {target.name}\n")
        os.replace(partial, target)
        os.replace(sidecar, _sidecar(target))  # last: a library without it is never loaded
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
        _cleanup.unregister_path(tmpdir)


def _expect_output(paths: list[Path], cxx: str) -> None:
    for p in paths:
        if not p.is_file() or p.stat().st_size == 0:
            what = "an empty" if p.is_file() else "no"
            raise ExtensionError(f"the C++ compiler {cxx} reported success but wrote {what} {p.name}; check CXX")


def main(argv: list[str] | None = None) -> int:
    """``python -m dcd_deploy.openvino._build [--force]``: build, print the path.

    The commands' error contract (``cli._run.run_cli``): one ``Error:`` line, and
    SIGTERM (``timeout``) kills the compilers and removes the temporary folder.
    """
    from ..cli import run_cli

    args = sys.argv[1:] if argv is None else argv

    @run_cli
    def build() -> None:
        print(build_extension(force="--force" in args, progress=lambda m: print(m, file=sys.stderr)))

    try:
        build()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
