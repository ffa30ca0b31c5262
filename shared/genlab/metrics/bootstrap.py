"""The percentile bootstrap (Efron & Tibshirani 1993, ch. 13): resample rows with replacement, read an interval.

A measure computed on one finite sample varies from sample to sample; drawing each set again with replacement,
at its own size, and recomputing, estimates that spread from the sample alone. Two cautions, measured in Lab 5
(section 12):

- FID is biased by an amount that grows as the sample shrinks, and a resample holds only about 63% distinct
  rows: bootstrap FIDs sit above the point estimate, so their interval shows the spread, not where FID lies.
- A comparison survives: two sets scored against one resample of the real set, and, when their rows come in
  pairs (the same starting noise), on one resample of the pairs, share the bias, which cancels in the
  difference. So a difference is read from the interval of the paired differences, not from two intervals.
"""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
import torch

__all__ = ["paired_replicates", "percentile_interval"]


def paired_replicates(statistics: Mapping[str, Callable], n_real: int, n_fake: int, n_boot: int = 200,
                      generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
    """Each statistic on ``n_boot`` resamples, all on the same ones: ``statistics[name](real_rows, fake_rows)``
    with ``real_rows`` [n_real] and ``fake_rows`` [n_fake], row indices drawn with replacement (real first, from
    ``generator``). Every fake set it reads must pair its rows (row i of each set from the same starting noise),
    so that one resample of the pairs serves all of them. Returns ``{name: [n_boot] float64 replicates}``."""
    replicates = {name: torch.empty(n_boot, dtype=torch.float64) for name in statistics}
    for b in range(n_boot):
        real_rows = torch.randint(0, n_real, (n_real,), generator=generator)
        fake_rows = torch.randint(0, n_fake, (n_fake,), generator=generator)
        for name, statistic in statistics.items():
            replicates[name][b] = float(statistic(real_rows, fake_rows))
    return replicates


def percentile_interval(values: torch.Tensor, level: float = 0.95) -> tuple[float, float]:
    """The (1 - level)/2 and (1 + level)/2 quantiles of the 1-d ``values``, linearly interpolated (numpy's
    default, as Lab 5's), as two Python floats. ValueError for a level outside (0, 1) or no values."""
    replicates = np.asarray(values, dtype=np.float64).reshape(-1)
    if not 0 < level < 1 or replicates.size == 0:
        raise ValueError(f"percentile_interval: expected a level in (0, 1) and at least one value, got level {level} "
                         f"and {replicates.size} values")
    tails = np.array([1 - level, 1 + level]) / 2
    return tuple(float(q) for q in np.quantile(replicates, tails))
