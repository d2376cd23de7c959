"""Each runtime is set up in one place: the package's source holds one ``InferenceSession``
construction and one OpenVINO ``compile_model`` call, both in dcd_deploy/runtimes."""

from __future__ import annotations

import re
from pathlib import Path

import dcd_deploy

PACKAGE = Path(dcd_deploy.__file__).parent


def places(pattern: str) -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(pattern, line) and not line.lstrip().startswith("#"):
                found.append(f"{path.relative_to(PACKAGE)}:{n}")
    return found


def test_one_session_and_one_compiled_model():
    sessions = places(r"\bInferenceSession\(")
    compiled = places(r"\b(core|ov)\.compile_model\(")
    assert len(sessions) == 1 and sessions[0].startswith("runtimes/_ort.py"), sessions
    assert len(compiled) == 1 and compiled[0].startswith("runtimes/_openvino.py"), compiled
