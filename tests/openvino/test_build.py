"""Building the OpenVINO extension: reuse by content hash, clear one-line errors."""

from __future__ import annotations

import pytest

pytest.importorskip("openvino")

from dcd_deploy.errors import ExtensionError  # noqa: E402
from dcd_deploy.openvino import build_extension  # noqa: E402


def test_second_build_reuses_the_library():
    first = build_extension()
    mtime = first.stat().st_mtime_ns
    second = build_extension()
    assert second == first
    assert second.stat().st_mtime_ns == mtime
    assert first.name.startswith("libdcd_deploy_openvino-") and first.suffix == ".so"
    # no temporary files left beside it
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".dcd-ovext-")]


def test_missing_compiler_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent")
    with pytest.raises(ExtensionError) as err:
        build_extension(out_dir=tmp_path, force=True)
    msg = str(err.value)
    assert "\n" not in msg
    assert "no C++ compiler found" in msg and "apt install g++" in msg and "CXX" in msg
    assert list(tmp_path.iterdir()) == []


def test_no_compiler_needed_when_built(tmp_path, monkeypatch):
    built = build_extension()
    monkeypatch.setenv("CXX", "/nonexistent")
    assert build_extension() == built


def test_compile_failure_names_the_error_and_the_command(tmp_path, monkeypatch):
    # a "compiler" that fails like one: first error line + command in one line, no leftovers
    fake = tmp_path / "fakecxx"
    fake.write_text("#!/bin/sh\necho 'note: something'\necho 'x.cpp:1:2: error: boom' >&2\nexit 1\n")
    fake.chmod(0o755)
    out = tmp_path / "out"
    monkeypatch.setenv("CXX", str(fake))
    with pytest.raises(ExtensionError) as err:
        build_extension(out_dir=out, force=True)
    msg = str(err.value)
    assert "\n" not in msg
    assert "x.cpp:1:2: error: boom" in msg and str(fake) in msg
    assert list(out.iterdir()) == []


def test_missing_openvino_is_one_clear_line(tmp_path, monkeypatch):
    import dcd_deploy.openvino._build as b

    real = b.importlib.util.find_spec
    monkeypatch.setattr(b.importlib.util, "find_spec", lambda name, *a: None if name == "openvino" else real(name, *a))
    with pytest.raises(ExtensionError, match=r"openvino is not installed: pip install 'dcd-deploy\[openvino\]'"):
        build_extension(out_dir=tmp_path, force=True)


# -- a cache that trusts content, builds that end (issue #21) -------------------------------------

import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from dcd_deploy.openvino import _build  # noqa: E402


def _script(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


@pytest.fixture()
def good(tmp_path) -> Path:
    """A copy of this checkout's verified library (built once by ``make install``)."""
    lib = build_extension()
    return Path(shutil.copy(lib, tmp_path / "good.so"))


def copying_compiler(tmp_path: Path, good: Path, *, delay: float = 0.0) -> Path:
    """A "compiler" that links by copying the real library (so the result is a real build of
    these sources and passes the self-check) and counts its link steps."""
    return _script(
        tmp_path / "cxx",
        f"""\
out=""; shared=0; prev=""
for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; [ "$a" = "-shared" ] && shared=1; prev="$a"; done
sleep {delay}
if [ $shared = 1 ]; then echo link >> "{tmp_path}/links"; cp "{good}" "$out"; else echo object > "$out"; fi
""",
    )


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.startswith(".dcd-ovext-") or p.name.endswith(".tmp"))


def test_a_rebuild_replaces_the_library_of_older_sources(tmp_path, good, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    stale = out / "libdcd_deploy_openvino-2020.1.0-0badc0de.so"
    stale.write_bytes(b"an older build")
    stale.with_name(stale.name + ".sha256").write_text("0" * 64)
    other = out / "unrelated.so"
    other.write_bytes(b"not ours")
    monkeypatch.setenv("CXX", str(copying_compiler(tmp_path, good)))
    built = build_extension(out_dir=out)
    assert sorted(p.name for p in out.iterdir()) == sorted([built.name, built.name + ".sha256", "unrelated.so"])


def test_a_truncated_cached_library_is_rebuilt_not_loaded(tmp_path, good, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("CXX", str(copying_compiler(tmp_path, good)))
    lib = build_extension(out_dir=out)
    assert (tmp_path / "links").read_text().count("link") == 1
    assert build_extension(out_dir=out) == lib  # verified: reused
    lib.write_bytes(good.read_bytes()[:100_000])  # `head -c 100000 good.so > lib` (a SIGBUS on load)
    _build._verified.clear()
    assert build_extension(out_dir=out) == lib
    assert (tmp_path / "links").read_text().count("link") == 2
    assert lib.read_bytes() == good.read_bytes()
    lib.with_name(lib.name + ".sha256").unlink()  # no record: never trusted
    assert build_extension(out_dir=out) == lib
    assert (tmp_path / "links").read_text().count("link") == 3
    assert _leftovers(out) == []


@pytest.mark.parametrize(
    "body, needle",
    [
        ('for a in "$@"; do [ "$p" = "-o" ] && echo junk > "$a"; p="$a"; done\n', "fails its self-check"),
        ('for a in "$@"; do [ "$p" = "-o" ] && : > "$a"; p="$a"; done\n', "wrote an empty"),
        ("exit 0\n", "wrote no"),
        ('for a in "$@"; do [ "$p" = "-o" ] && cp {foreign} "$a"; p="$a"; done\n', "fails its self-check"),
    ],
    ids=["junk", "empty", "nothing", "foreign-library"],
)
def test_a_bad_build_is_never_cached(tmp_path, monkeypatch, body, needle):
    """A compiler that exits 0 without building the op: one line, nothing installed."""
    foreign = next(
        Path(p)
        for p in (
            "/lib/x86_64-linux-gnu/libm.so.6",
            "/usr/lib/x86_64-linux-gnu/libm.so.6",
            "/lib64/libm.so.6",
            "/lib/aarch64-linux-gnu/libm.so.6",
        )
        if Path(p).exists()
    )
    out = tmp_path / "out"
    monkeypatch.setenv("CXX", str(_script(tmp_path / "cxx", body.format(foreign=foreign))))
    for _ in range(2):  # and the next call does not find anything either
        with pytest.raises(ExtensionError) as err:
            build_extension(out_dir=out)
        assert needle in str(err.value) and "\n" not in str(err.value)
    assert list(out.iterdir()) == []


def test_a_full_disk_is_named(tmp_path, monkeypatch):
    fake = _script(
        tmp_path / "cxx",
        "echo '/usr/bin/ld: final link failed: No space left on device' >&2\n"
        "echo 'collect2: error: ld returned 1 exit status' >&2\nexit 1\n",
    )
    monkeypatch.setenv("CXX", str(fake))
    with pytest.raises(ExtensionError, match="No space left on device"):
        build_extension(out_dir=tmp_path / "out", force=True)


def _alive(pids: list[int], *, within: float = 5.0) -> list[int]:
    """Those of ``pids`` still running after at most ``within`` s: a SIGKILLed process of a
    loaded machine can take a moment to die (the builder sends the signal, it does not wait)."""
    deadline = time.monotonic() + within
    while (left := _running(pids)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _running(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        with open(f"/proc/{pid}/stat") as fh:  # a zombie waiting for its parent is gone too
            if fh.read().split(")")[-1].split()[0] != "Z":
                out.append(pid)
    return out


HANG = """\
echo $$ >> "{d}/pids"
sleep 1000 &
echo $! >> "{d}/pids"
wait
"""


def test_a_hanging_compiler_is_stopped_by_the_timeout(tmp_path, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("CXX", str(_script(tmp_path / "cxx", HANG.format(d=tmp_path))))
    monkeypatch.setenv("DCD_DEPLOY_BUILD_TIMEOUT", "1")
    with pytest.raises(ExtensionError, match="took more than 1 s.*DCD_DEPLOY_BUILD_TIMEOUT"):
        build_extension(out_dir=out, force=True)
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert pids and _alive(pids) == []  # the compilers and their children
    assert _leftovers(out) == []
    monkeypatch.setenv("DCD_DEPLOY_BUILD_TIMEOUT", "soon")
    with pytest.raises(ExtensionError, match="DCD_DEPLOY_BUILD_TIMEOUT=soon is not a number of seconds"):
        build_extension(out_dir=out, force=True)


def test_sigterm_during_the_build_leaves_nothing(tmp_path):
    """`timeout -s TERM 4 python -m dcd_deploy.openvino._build --force` (what make install runs)."""
    out = tmp_path / "out"
    env = {
        **os.environ,
        "CXX": str(_script(tmp_path / "cxx", HANG.format(d=tmp_path))),
        "DCD_DEPLOY_EXTENSION_DIR": str(out),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "dcd_deploy.openvino._build", "--force"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (tmp_path / "pids").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == "Error: stopped by SIGTERM; temporary files removed, nothing written"
    assert "Traceback" not in err
    assert _alive([int(p) for p in (tmp_path / "pids").read_text().split()]) == []
    assert _leftovers(out) == []


def test_stale_folders_of_dead_builders_are_removed(tmp_path, good, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = out / f".dcd-ovext-{dead.pid}-abc"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "dcd_op.o").write_bytes(b"x" * 100)
    alive = out / f".dcd-ovext-{os.getppid()}-abc"  # a builder still running: kept
    alive.mkdir()
    monkeypatch.setenv("CXX", str(copying_compiler(tmp_path, good)))
    build_extension(out_dir=out)
    assert not stale.exists() and alive.exists()


def test_concurrent_builders_compile_once(tmp_path, good, monkeypatch):
    out = tmp_path / "out"
    monkeypatch.setenv("CXX", str(copying_compiler(tmp_path, good, delay=0.5)))
    results, errors = [], []

    def build():
        try:
            results.append(build_extension(out_dir=out))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(results)) == 1
    assert (tmp_path / "links").read_text().count("link") == 1


def test_checkouts_sharing_the_cache_keep_their_own_folders(tmp_path, monkeypatch):
    """The ~/.cache fallback is keyed by the checkout: one never deletes another's library."""
    monkeypatch.setattr(_build, "_PACKAGE_DIR", tmp_path / "readonly" / "pkg")
    monkeypatch.setattr(_build.os, "access", lambda path, mode: False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DCD_DEPLOY_EXTENSION_DIR", raising=False)
    (tmp_path / "readonly" / "pkg").mkdir(parents=True)
    dirs = set()
    for checkout in ("a", "b"):
        monkeypatch.setattr(_build, "source_dir", lambda c=checkout: tmp_path / c / "csrc" / "openvino")
        d = _build._default_out_dir()
        assert d.parent == tmp_path / "home" / ".cache" / "dcd-deploy"
        dirs.add(d)
    assert len(dirs) == 2


def test_compilers_of_a_builder_killed_by_sigkill_are_stopped_by_the_next_build(tmp_path, good, monkeypatch):
    """SIGKILL cannot be handled: the next build removes the folder and kills the compiler
    groups it recorded there."""
    out = tmp_path / "out"
    env = {
        **os.environ,
        "CXX": str(_script(tmp_path / "hang", HANG.format(d=tmp_path))),
        "DCD_DEPLOY_EXTENSION_DIR": str(out),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "dcd_deploy.openvino._build", "--force"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while len(_pids(tmp_path)) < 4 and time.monotonic() < deadline:  # both compilers and their children
        time.sleep(0.1)
    proc.kill()
    proc.wait()
    orphans = _pids(tmp_path)
    assert _running(orphans) and _leftovers(out)
    monkeypatch.setenv("CXX", str(copying_compiler(tmp_path, good)))
    build_extension(out_dir=out)
    deadline = time.monotonic() + 60
    while _running(orphans) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alive(orphans) == [] and _leftovers(out) == []


def _pids(d: Path) -> list[int]:
    try:
        return [int(p) for p in (d / "pids").read_text().split()]
    except (OSError, ValueError):
        return []
