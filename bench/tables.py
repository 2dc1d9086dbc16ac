"""The benchmark report's number format and Markdown table, shared by its sections."""

from __future__ import annotations

from collections.abc import Mapping


def fmt(value: float) -> str:
    """A figure with the digits that matter: whole above 100, one decimal above 10, else three significant."""
    if value == 0:
        return "0"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def shown(value: float | None) -> str:
    """A figure, or n/a when the session did not measure it."""
    return "n/a" if value is None else fmt(value)


def ratio(ratios: Mapping[str, float], name: str) -> str:
    """A ratio of the session, or n/a when its results predate it."""
    return f"{ratios[name]:.2f}" if name in ratios else "n/a"


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]
