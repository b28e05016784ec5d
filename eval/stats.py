"""Confidence intervals: a percentile bootstrap over questions (seeded, so tables are reproducible)."""
from __future__ import annotations

import numpy as np


def bootstrap_ci(values, n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float] | None:
    """(low, high) of the mean of `values` by resampling questions; None for an empty list."""
    data = np.asarray([v for v in values if v is not None], dtype=float)
    if data.size == 0:
        return None
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, data.size, size=(n_boot, data.size))].mean(axis=1)
    alpha = (1 - level) / 2
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def mean_and_ci(values, digits: int = 3) -> tuple[float | None, list[float] | None]:
    """(mean, [low, high] of bootstrap_ci), both rounded; (None, None) for an empty list."""
    values = [float(v) for v in values]
    interval = bootstrap_ci(values)
    return (round(float(np.mean(values)), digits) if values else None,
            [round(x, digits) for x in interval] if interval else None)
