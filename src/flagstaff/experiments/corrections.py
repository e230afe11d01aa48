"""Multiple-testing corrections of p-values: Holm-Bonferroni and Benjamini-Hochberg.

Both take the family's p-values (every metric x every variant of an experiment) and return
adjusted ones in the same order, as ``statsmodels.stats.multitest.multipletests`` does
(``holm``, ``fdr_bh``): a hypothesis is rejected at ``alpha`` when its adjusted p-value is
below ``alpha``. Holm controls the family-wise error rate; Benjamini-Hochberg the false
discovery rate (independent or positively dependent tests).
"""

from __future__ import annotations

from typing import Literal

__all__ = ["CORRECTIONS", "Correction", "adjust_p_values"]

Correction = Literal["holm", "benjamini_hochberg", "none"]
CORRECTIONS: tuple[Correction, ...] = ("holm", "benjamini_hochberg", "none")


def _holm(p_values: list[float]) -> list[float]:
    m = len(p_values)
    order = sorted(range(m), key=p_values.__getitem__)
    adjusted = [0.0] * m
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


def _benjamini_hochberg(p_values: list[float]) -> list[float]:
    m = len(p_values)
    order = sorted(range(m), key=p_values.__getitem__, reverse=True)
    adjusted = [0.0] * m
    running = 1.0
    for position, index in enumerate(order):
        rank = m - position  # 1-based rank in ascending order
        running = min(running, m * p_values[index] / rank)
        adjusted[index] = running
    return adjusted


def adjust_p_values(p_values: list[float], method: Correction) -> list[float]:
    """The adjusted p-values, in the order given (``none``: unchanged)."""
    if method == "none" or not p_values:
        return list(p_values)
    if method == "holm":
        return _holm(p_values)
    return _benjamini_hochberg(p_values)
