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


def test_a_rebuild_replaces_the_library_of_older_sources(tmp_path):
    stale = tmp_path / "libdcd_deploy_openvino-2020.1.0-0badc0de.so"
    stale.write_bytes(b"an older build")
    other = tmp_path / "unrelated.so"
    other.write_bytes(b"not ours")
    built = build_extension(out_dir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([built.name, "unrelated.so"])
