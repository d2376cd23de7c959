"""Statistics of timing samples: quantiles, the ratio of medians and its spread.

Pure numpy, no torch. Conventions (documented in ``docs/bench.md``):

* quantiles use numpy's default (linear interpolation between order statistics), so the
  p50 of ``1..10`` is 5.5 and its p90 is 9.1;
* the ratio of two models is ``median(numerator) / median(denominator)``;
* its spread is given two ways: a percentile bootstrap interval (fixed seed, so a report
  is reproducible) that resamples whole interleaved rounds, the same rounds for both
  models (:func:`paired_rounds_bootstrap_ci`; with fewer than two rounds, the runs of
  each model resampled independently, :func:`bootstrap_ratio_ci`), and the quantiles of
  the per-round ratios, one ratio of medians per interleaved round (both models timed
  back to back in that round).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Resamples of :func:`bootstrap_ratio_ci` unless told otherwise.
DEFAULT_BOOTSTRAP = 2000
#: Confidence level of :func:`bootstrap_ratio_ci` unless told otherwise.
DEFAULT_LEVEL = 0.95
# Largest resample matrix built at once (elements), to bound memory for long runs.
_CHUNK_ELEMENTS = 2_000_000


@dataclass(frozen=True)
class Summary:
    """Location and spread of one model's timed runs (milliseconds).

    Attributes:
        n: runs.
        p50, p90: median and 90th percentile (linear interpolation).
        mean, std: mean and sample standard deviation (0 for one run).
        min, max: fastest and slowest run.
    """

    n: int
    p50: float
    p90: float
    mean: float
    std: float
    min: float
    max: float


def _array(samples: Sequence[float]) -> np.ndarray:
    a = np.asarray(samples, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError("no samples")
    if not np.all(np.isfinite(a)):
        raise ValueError("samples must be finite")
    return a


def quantile(samples: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) of ``samples``, linear interpolation."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], not {q}")
    return float(np.quantile(_array(samples), q))


def summarize(samples: Sequence[float]) -> Summary:
    """:class:`Summary` of one model's runs."""
    a = _array(samples)
    p50, p90 = np.quantile(a, [0.5, 0.9])
    return Summary(
        n=int(a.size),
        p50=float(p50),
        p90=float(p90),
        mean=float(a.mean()),
        std=float(a.std(ddof=1)) if a.size > 1 else 0.0,
        min=float(a.min()),
        max=float(a.max()),
    )


def ratio_of_medians(numerator: Sequence[float], denominator: Sequence[float]) -> float:
    """``median(numerator) / median(denominator)``."""
    den = float(np.median(_array(denominator)))
    if den <= 0:
        raise ValueError("the denominator's median must be positive")
    return float(np.median(_array(numerator))) / den


def _resampled_medians(a: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    out = np.empty(n_boot)
    step = max(1, _CHUNK_ELEMENTS // a.size)
    for start in range(0, n_boot, step):
        k = min(step, n_boot - start)
        idx = rng.integers(0, a.size, size=(k, a.size))
        out[start : start + k] = np.median(a[idx], axis=1)
    return out


def bootstrap_ratio_ci(
    numerator: Sequence[float],
    denominator: Sequence[float],
    *,
    level: float = DEFAULT_LEVEL,
    n_boot: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile bootstrap interval of :func:`ratio_of_medians`.

    Each resample draws ``len(numerator)`` runs of the numerator and
    ``len(denominator)`` runs of the denominator with replacement, independently, and
    takes the ratio of their medians; the interval is the central ``level`` share of
    those ratios. Deterministic for a given ``seed``.

    Returns:
        ``(low, high)``.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), not {level}")
    if n_boot < 1:
        raise ValueError("n_boot must be positive")
    a, b = _array(numerator), _array(denominator)
    rng = np.random.default_rng(seed)
    ratios = _resampled_medians(a, n_boot, rng) / _resampled_medians(b, n_boot, rng)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return float(low), float(high)


def paired_rounds_bootstrap_ci(
    numerator_rounds: Sequence[Sequence[float]],
    denominator_rounds: Sequence[Sequence[float]],
    *,
    level: float = DEFAULT_LEVEL,
    n_boot: int = DEFAULT_BOOTSTRAP,
    seed: int = 0,
) -> tuple[float, float]:
    """Bootstrap interval of :func:`ratio_of_medians` that resamples whole interleaved rounds.

    Each resample draws rounds with replacement, the *same* rounds for both models (so
    drift common to a round cancels, as in the measurement), pools each model's runs of
    those rounds and takes the ratio of their medians. Unlike :func:`bootstrap_ratio_ci`
    it widens when the machine's speed changes from round to round. Rounds where either
    model has no run are dropped; at least two must remain.

    Returns:
        ``(low, high)``.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), not {level}")
    if len(numerator_rounds) != len(denominator_rounds):
        raise ValueError("both models must have the same number of rounds")
    pairs = [(_array(a), _array(b)) for a, b in zip(numerator_rounds, denominator_rounds) if len(a) and len(b)]
    if len(pairs) < 2:
        raise ValueError("need at least two rounds")
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(pairs), size=(n_boot, len(pairs)))
    ratios = np.empty(n_boot)
    for i, row in enumerate(picks):
        num = np.concatenate([pairs[j][0] for j in row])
        den = np.concatenate([pairs[j][1] for j in row])
        ratios[i] = np.median(num) / np.median(den)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(ratios, [tail, 1.0 - tail])
    return float(low), float(high)


def round_ratios(
    numerator_rounds: Sequence[Sequence[float]], denominator_rounds: Sequence[Sequence[float]]
) -> list[float]:
    """One ratio of medians per interleaved round (rounds where either has no run are skipped)."""
    if len(numerator_rounds) != len(denominator_rounds):
        raise ValueError("both models must have the same number of rounds")
    return [ratio_of_medians(a, b) for a, b in zip(numerator_rounds, denominator_rounds) if len(a) and len(b)]


def spread(values: Sequence[float]) -> dict[str, float | int]:
    """``{"n", "p10", "p50", "p90"}`` of a few values (e.g. :func:`round_ratios`)."""
    a = _array(values)
    p10, p50, p90 = np.quantile(a, [0.1, 0.5, 0.9])
    return {"n": int(a.size), "p10": float(p10), "p50": float(p50), "p90": float(p90)}
