"""Reading a benchmark's printed output: its Markdown tables, and the numbers in their cells."""

from __future__ import annotations


def number(cell: str) -> float:
    return float(cell.replace(",", ""))


def tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables in ``text``: each a list of rows (header and rule left out), each a
    list of cells."""
    found: list[list[list[str]]] = []
    rows: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            found.append(rows[2:])
            rows = []
    return found
