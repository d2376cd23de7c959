"""The one table formatter of the benchmark reports: fixed-width text and Markdown.

A table is a sequence of :class:`Column` and rows; a row is a list of cells (strings,
already formatted), or a string printed as it is (``""`` for a blank line, a note under
a row). Text: each cell padded to its column's width and alignment, one space between
columns, trailing spaces dropped, the header underlined with dashes as long as the
header line. Markdown: one ``| a | b |`` line per row, ``|`` in a cell escaped, numbers'
columns right-aligned (``---:``); verbatim rows are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: The cell of a missing value.
DASH = "-"

Row = Sequence[str] | str


@dataclass(frozen=True)
class Column:
    """One column: its header, its minimum width, ``<`` (left) or ``>`` (right)."""

    head: str
    width: int = 0
    align: str = "<"


def number(value: float | None, fmt: str) -> str:
    """``value`` formatted with ``fmt``, or :data:`DASH` for None."""
    return DASH if value is None else format(value, fmt)


def text_row(columns: Sequence[Column], cells: Sequence[str]) -> str:
    """One row of the text table."""
    return " ".join(f"{c:{col.align}{col.width}}" for c, col in zip(cells, columns)).rstrip()


def text_header(columns: Sequence[Column], *, rule: bool = True) -> list[str]:
    """The header line and (``rule``) its dashes."""
    line = " ".join(f"{col.head:{col.align}{col.width}}" for col in columns)
    return [line.rstrip()] + (["-" * len(line)] if rule else [])


def text_table(columns: Sequence[Column], rows: Sequence[Row], *, rule: bool = True) -> list[str]:
    """The header, (``rule``) its dashes and every row, as lines."""
    return text_header(columns, rule=rule) + [r if isinstance(r, str) else text_row(columns, r) for r in rows]


def markdown_row(cells: Sequence[str]) -> str:
    """``| a | b |`` with ``|`` in a cell escaped."""
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def markdown_table(columns: Sequence[Column], rows: Sequence[Row]) -> list[str]:
    """The header, the alignment line and every row that has cells, as Markdown lines."""
    align = "|" + "|".join("---:" if col.align == ">" else "---" for col in columns) + "|"
    return [markdown_row([col.head for col in columns]), align] + [
        markdown_row(r) for r in rows if not isinstance(r, str)
    ]


__all__ = ["Column", "DASH", "markdown_row", "markdown_table", "number", "text_header", "text_row", "text_table"]
