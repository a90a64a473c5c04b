"""Argument checks that raise ValueError naming the argument (used by the configs)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def check_int(name: str, value: Any, minimum: int) -> None:
    """``value`` must be an int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_number(
    name: str,
    value: Any,
    low: float,
    high: float | None = None,
    open_low: bool = True,
    open_high: bool = True,
) -> None:
    """``value`` must be a real number in the interval (low, high) (ends open by default)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok:
        ok = value > low if open_low else value >= low
        if high is not None:
            ok = ok and (value < high if open_high else value <= high)
    if not ok:
        left, right = "(" if open_low else "[", ")" if open_high else "]"
        interval = f"{left}{low}, {high if high is not None else 'inf'}{right}"
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    if not any(value is c or (type(value) is type(c) and value == c) for c in choices):
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")
