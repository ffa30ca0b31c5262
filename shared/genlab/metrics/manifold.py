"""Precision and recall (Kynkäänniemi et al. 2019), density and coverage (Naeem et al. 2020).

Each set's manifold is estimated as the union of balls around its points, each reaching the point's k-th nearest
neighbour in its own set (the point itself not counted). Then, for real features x_1..x_N and fake y_1..y_M:

- precision: the share of fake points inside at least one real ball (fidelity);
- recall: the share of real points inside at least one fake ball (diversity);
- density: the number of real balls holding each fake point, averaged and divided by k (about 1 when the two
  sets come from one distribution, not bounded by 1);
- coverage: the share of real balls holding at least one fake point.

A distance equal to a radius counts as outside, as in Naeem et al.'s ``prdc`` package. Each of the four is a mean
over points of a per-point count; :func:`manifold_counts` returns those counts, so a bootstrap can resample the
points while holding the balls fixed (resampling the sets themselves would put duplicate points in them, whose
balls shrink to radius 0).
"""
from __future__ import annotations

import numpy as np
import torch
from scipy.spatial.distance import cdist

__all__ = ["manifold_counts", "precision_recall_density_coverage"]


def _radii(points: np.ndarray, k: int) -> np.ndarray:
    if not 1 <= k < len(points):
        raise ValueError(f"k = {k}: the k-th nearest other point needs 1 <= k <= {len(points) - 1} (the set's size - 1)")
    # sorted, position 0 of each row is the point's own distance 0: position k is its k-th nearest other point
    return np.partition(cdist(points, points), k, axis=1)[:, k]


def manifold_counts(real: torch.Tensor, fake: torch.Tensor, k: int = 5) -> dict[str, torch.Tensor]:
    """Per-point counts whose means are the four measures: ``precision`` and ``density`` [M] (one per fake point:
    inside any real ball, 0 or 1; real balls holding it, divided by k), ``recall`` and ``coverage`` [N] (one per
    real point: inside any fake ball; its own ball holds a fake point). float64."""
    x, y = real.double().numpy(), fake.double().numpy()
    fake_to_real = cdist(y, x)                                       # [M, N]
    held = fake_to_real < _radii(x, k)[None, :]                      # fake j lies in real i's ball
    balls_per_fake = held.sum(axis=1)
    counts = {"precision": balls_per_fake > 0, "recall": (fake_to_real < _radii(y, k)[:, None]).any(axis=0),
              "density": balls_per_fake / k, "coverage": held.any(axis=0)}
    return {name: torch.from_numpy(np.asarray(value, dtype=np.float64)) for name, value in counts.items()}


def precision_recall_density_coverage(real: torch.Tensor, fake: torch.Tensor, k: int = 5) -> dict[str, float]:
    """The four measures of fake features [M, D] against real features [N, D], as Python floats."""
    return {name: float(counts.mean()) for name, counts in manifold_counts(real, fake, k).items()}
