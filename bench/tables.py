"""The benchmark report's number format and Markdown table, shared by its sections."""

from __future__ import annotations


def fmt(value: float) -> str:
    """A figure with the digits that matter: whole above 100, one decimal above 10, else three significant."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]
