"""Report C++ functions longer than a limit: ``python csrc/function_lengths.py 80 FILE...``.

A function's length is its lines from the opening brace of its body to the closing one,
lambdas included. The parser is a brace matcher, not a C++ parser: comments, strings and
character literals are blanked first; a ``{`` at namespace or class level opens a
function body when the text before it has a ``)`` and is not a namespace, class, struct,
enum or union header or an initializer (``= {``). Exit status 1 when any function is too
long (each one printed as ``file:line: N lines: signature``), else 0.
"""

from __future__ import annotations

import re
import sys

_CONTAINER = re.compile(r"\b(namespace|class|struct|enum|union)\b[^()]*$|\bextern\s*\"\"\s*$")


def _blank(src: str) -> str:
    """Comments, literals and preprocessor lines removed, line breaks kept (line numbers
    stay right)."""
    src = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.S)
    src = re.sub(r"//[^\n]*", "", src)
    src = re.sub(r'"(\\.|[^"\\\n])*"', '""', src)
    src = re.sub(r"'(\\.|[^'\\\n])*'", "''", src)
    return re.sub(r"^[ \t]*#[^\n]*(\\\n[^\n]*)*", lambda m: "\n" * m.group(0).count("\n"), src, flags=re.M)


def functions(path: str) -> list[tuple[int, int, str]]:
    """(length in lines, first line, signature's last line) of every function body."""
    stack: list[tuple[str, int, str]] = []  # (f: function, c: container, o: other), line, header
    line, head, out = 1, "", []
    for ch in _blank(open(path, encoding="utf-8").read()):
        if ch == "\n":
            line += 1
        if ch == "{":
            at_top = all(kind == "c" for kind, _, _ in stack)
            text = head.strip()
            if at_top and _CONTAINER.search(text):
                stack.append(("c", line, text))
            elif at_top and ")" in text and not re.search(r"=\s*$", text):
                stack.append(("f", line, text.splitlines()[-1] if text else ""))
            else:
                stack.append(("o", line, text))
            head = ""
        elif ch == "}":
            kind, start, text = stack.pop()
            if kind == "f":
                out.append((line - start + 1, start, text))
            head = ""
        elif ch == ";":
            head = ""
        else:
            head += ch
    return out


def main(argv: list[str]) -> int:
    limit, paths = int(argv[0]), argv[1:]
    too_long = [(p, n, start, text) for p in paths for n, start, text in functions(p) if n > limit]
    for path, n, start, text in too_long:
        print(f"{path}:{start}: {n} lines: {text.strip()[:80]}")
    return 1 if too_long else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
