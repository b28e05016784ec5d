"""Confidence intervals: a percentile bootstrap over questions (seeded, so tables are reproducible),
of one stage's mean and of the difference between two stages on the same questions (paired)."""
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


def wilson_ci(successes: float, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval of a proportion: unlike the bootstrap it does not shrink to a point at 0 or 1
    (179 of 179 right gives [0.979, 1.0], not [1.0, 1.0]). None for n = 0."""
    from statistics import NormalDist

    if n <= 0:
        return None
    z = NormalDist().inv_cdf(1 - (1 - level) / 2)
    p = successes / n
    centre, spread = p + z * z / (2 * n), z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return float((centre - spread) / (1 + z * z / n)), float(min(1.0, (centre + spread) / (1 + z * z / n)))


def ratio_bootstrap_ci(numerators, denominators, n_boot: int = 2000, level: float = 0.95,
                       seed: int = 0) -> tuple[float, float] | None:
    """(low, high) of sum(numerators) / sum(denominators), resampling the units the pairs belong to
    (episodes, say, each with its valid and its total tool calls: calls of one episode move together).
    Resamples whose denominator sums to 0 are left out; None when there is nothing to resample."""
    num, den = np.asarray(numerators, dtype=float), np.asarray(denominators, dtype=float)
    if num.size == 0 or num.shape != den.shape or den.sum() == 0:
        return None
    index = np.random.default_rng(seed).integers(0, num.size, size=(n_boot, num.size))
    tops, bottoms = num[index].sum(axis=1), den[index].sum(axis=1)
    ratios = tops[bottoms > 0] / bottoms[bottoms > 0]
    alpha = (1 - level) / 2
    return float(np.quantile(ratios, alpha)), float(np.quantile(ratios, 1 - alpha))


def mean_and_ci(values, digits: int = 3) -> tuple[float | None, list[float] | None]:
    """(mean, [low, high] of bootstrap_ci), both rounded; (None, None) for an empty list."""
    values = [float(v) for v in values]
    interval = bootstrap_ci(values)
    return (round(float(np.mean(values)), digits) if values else None,
            [round(x, digits) for x in interval] if interval else None)


def paired_bootstrap(a, b, statistic, n_boot: int = 2000, level: float = 0.95, seed: int = 0):
    """statistic(a, b) and its percentile interval, resampling question indices (the same for a and b).

    For two stages run on the same questions this is far tighter than comparing their separate
    intervals: a question both get right (or both miss) adds no noise to the difference. Two-dimensional
    a and b (questions x seeds) resample whole rows: a question's seeds move together, since seeds
    run on the same questions are not independent samples. The two sides may hold different numbers
    of seeds (two variant seeds against one base seed). Resamples where the statistic is not
    finite are left out; if they are half or more, the interval is nan.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not (1 <= a.ndim <= 2 and 1 <= b.ndim <= 2) or len(a) != len(b) or a.size == 0 or b.size == 0:
        raise ValueError(f"paired_bootstrap needs two non-empty lists (or questions x seeds tables) with one row "
                         f"per question on both sides, not {a.shape} and {b.shape}")
    a, b = a.reshape(len(a), -1), b.reshape(len(b), -1)
    rng = np.random.default_rng(seed)
    index = rng.integers(0, len(a), size=(n_boot, len(a)))
    samples = statistic(a[index].reshape(n_boot, -1), b[index].reshape(n_boot, -1))
    samples = samples[np.isfinite(samples)]  # e.g. a ratio over a resample whose baseline mean is 0
    alpha = (1 - level) / 2
    point = float(statistic(a.reshape(1, -1), b.reshape(1, -1))[0])
    if samples.size < n_boot / 2:
        return point, (float("nan"), float("nan"))
    return point, (float(np.quantile(samples, alpha)), float(np.quantile(samples, 1 - alpha)))


def mean_difference(a, b):
    """Per resample (rows): mean(a) - mean(b)."""
    return a.mean(axis=-1) - b.mean(axis=-1)


def relative_change(a, b):
    """Per resample (rows): mean(a) / mean(b) - 1 (inf or nan where mean(b) is 0)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return a.mean(axis=-1) / b.mean(axis=-1) - 1
