"""dcd-export's allocator setting: a large block freed is reused, not mapped afresh.

Oracle: the kernel's minor page-fault count (``getrusage``) against the block's page
count. Without the setting, glibc (``malloc``) maps a 64 MiB block afresh each time (one fault per
4 KiB page touched, 16384); with it, the second block reuses the first one's pages.
Run in a subprocess: the setting lasts for the process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

PROBE = textwrap.dedent(
    """
    import ctypes, resource, sys
    if sys.argv[1] == "set":
        from dcd_deploy.cli._malloc import keep_freed_memory
        assert keep_freed_memory()
    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    n = 64 << 20
    a = libc.malloc(n)
    ctypes.memset(a, 1, n)  # every page touched
    libc.free(a)
    before = faults()
    b = libc.malloc(n)
    ctypes.memset(b, 1, n)
    print(faults() - before)
    """
)


def _second_block_faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[-1])


def test_a_freed_block_is_reused():
    pages = (64 << 20) // 4096
    if _second_block_faults("default") < pages // 2:
        pytest.skip("this kernel backs the block with huge pages: few faults either way")
    assert _second_block_faults("set") < pages // 16
