"""Matplotlib helpers shared by the labs.

Three pictures cover most of the course: a grid of generated images, a few
training curves, and a labelled matrix (attention maps, confusion matrices).

Every helper follows the same rules so it behaves the same in JupyterLab, under
nbclient (autograding) and in pytest with the ``Agg`` backend:

* it uses the object-oriented API (``fig, ax = plt.subplots()``) and draws on
  the ``ax`` you pass, or on a new figure;
* it returns the :class:`~matplotlib.figure.Figure` and never calls
  ``plt.show()`` - Jupyter displays a figure left as the last expression, and
  a headless grader has nothing to show it on.

In a notebook, end the call with ``;`` (or assign the result)::

    show_images(samples);

otherwise the figure appears twice: once drawn by the inline backend at the
end of the cell and once more as the cell's value (the returned figure).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

__all__ = ["show_images", "plot_curves", "plot_loglog", "heatmap", "image_grid"]


def _plt():
    # Imported lazily so that `import genlab` does not pick a matplotlib
    # backend before a test or notebook had a chance to choose one.
    import matplotlib.pyplot as plt

    return plt


def _to_numpy(x) -> np.ndarray:
    """Accept torch tensors (any device, with grad) as well as numpy arrays and lists."""
    if hasattr(x, "detach"):  # torch.Tensor, without importing torch here
        x = x.detach().float().cpu().numpy()
    return np.asarray(x, dtype=np.float32)


def _as_nhwc(images) -> np.ndarray:
    """Normalise the accepted layouts to ``[N, H, W, C]`` with C in {1, 3}."""
    x = _to_numpy(images)
    if x.ndim == 2:
        # [N, D] flat images: must be square, e.g. the 64-pixel digits.
        side = math.isqrt(x.shape[1])
        if side * side != x.shape[1]:
            raise ValueError(
                f"show_images: expected flat images [N, D] with D a perfect square (64 for digits), "
                f"got shape {tuple(x.shape)}. Reshape to [N, H, W] first."
            )
        x = x.reshape(-1, side, side, 1)
    elif x.ndim == 3:  # [N, H, W]
        x = x[..., None]
    elif x.ndim == 4 and x.shape[1] in (1, 3):  # [N, C, H, W] (PyTorch layout)
        x = x.transpose(0, 2, 3, 1)
    else:
        raise ValueError(
            "show_images: expected images shaped [N, 64] (digits), [N, H, W], [N, 1, H, W] or "
            f"[N, 3, H, W], got shape {tuple(x.shape)}. For a single image add a batch dim (x[None])."
        )
    return x


def _to_unit_range(x: np.ndarray) -> np.ndarray:
    """Map ``[-1, 1]`` data to ``[0, 1]``; leave ``[0, 1]`` data alone.

    A negative value is the tell-tale of the diffusion convention. Values are
    clamped afterwards because samples of a half-trained model overshoot.
    """
    if x.size and x.min() < 0.0:
        x = (x + 1.0) / 2.0
    return np.clip(x, 0.0, 1.0)


def image_grid(images, nrow: int = 8, padding: int = 1, pad_value: float = 1.0) -> np.ndarray:
    """Tile images into one ``[H', W', C]`` array in ``[0, 1]`` (like torchvision's make_grid)."""
    x = _to_unit_range(_as_nhwc(images))
    n, h, w, c = x.shape
    ncol = max(1, min(nrow, n))  # images per row
    nrows = max(1, math.ceil(n / ncol))
    grid = np.full(
        (nrows * (h + padding) + padding, ncol * (w + padding) + padding, c), pad_value, dtype=np.float32
    )
    for i in range(n):
        r, col = divmod(i, ncol)
        top, left = padding + r * (h + padding), padding + col * (w + padding)
        grid[top : top + h, left : left + w] = x[i]
    return grid


def show_images(images, nrow: int = 8, title: str | None = None, ax=None):
    """Show a batch of images as one grid; returns the figure.

    Args:
        images: tensor or array shaped ``[N, 64]`` (flat 8x8 digits),
            ``[N, H, W]``, ``[N, 1, H, W]`` or ``[N, 3, H, W]``; values in
            ``[0, 1]`` or ``[-1, 1]`` (detected from the sign, then clamped).
        nrow: images per row of the grid.
        title: optional axes title.
        ax: draw into this axes instead of a new figure.
    """
    grid = image_grid(images, nrow=nrow)
    if ax is None:
        # About 1 inch per tile column (at most 12), keeping the grid's aspect ratio.
        width = min(12.0, max(2.0, float(min(nrow, len(images)))))
        height = max(1.5, width * grid.shape[0] / grid.shape[1])
        fig, ax = _plt().subplots(figsize=(width, height))
    else:
        fig = ax.figure
    if grid.shape[-1] == 1:
        # vmin/vmax fixed so that an all-dark batch is not stretched to look bright.
        ax.imshow(grid[..., 0], cmap="gray", vmin=0.0, vmax=1.0, interpolation="nearest")
    else:
        ax.imshow(grid, interpolation="nearest")
    ax.set_axis_off()
    if title:
        ax.set_title(title)
    return fig


def plot_curves(
    x,
    curves: Mapping[str, Sequence[float]],
    logy: bool = False,
    xlabel: str = "step",
    ylabel: str = "value",
    title: str | None = None,
    ax=None,
):
    """Plot several named curves against a shared x axis; returns the figure.

    Args:
        x: x values shared by every curve, or ``None`` for ``0..len-1``.
        curves: ``{"train loss": [...], "val loss": [...]}``; each curve must
            have as many points as ``x``.
        logy: log-scale y axis (losses spanning decades, FID, perplexity).
    """
    if not curves:
        raise ValueError("plot_curves: expected at least one curve in `curves`, got an empty mapping.")
    if ax is None:
        fig, ax = _plt().subplots(figsize=(6, 4))
    else:
        fig = ax.figure
    for name, ys in curves.items():
        ys = _to_numpy(ys).reshape(-1)
        xs = np.arange(len(ys)) if x is None else _to_numpy(x).reshape(-1)
        if len(xs) != len(ys):
            raise ValueError(
                f"plot_curves: curve {name!r} has {len(ys)} points but x has {len(xs)}. "
                "Pass x=None to plot against the point index."
            )
        ax.plot(xs, ys, label=str(name))
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def heatmap(matrix, xlabels=None, ylabels=None, title: str | None = None, ax=None, cmap: str = "viridis"):
    """Show a 2-D matrix (e.g. attention weights, rows = queries) with a colorbar; returns the figure."""
    m = _to_numpy(matrix)
    if m.ndim != 2:
        raise ValueError(
            f"heatmap: expected a 2-D matrix, got shape {tuple(m.shape)}. "
            "For attention [B, H, T, T], pick one batch item and head, e.g. att[0, 0]."
        )
    for labels, size, axis in ((xlabels, m.shape[1], "xlabels"), (ylabels, m.shape[0], "ylabels")):
        if labels is not None and len(labels) != size:
            raise ValueError(f"heatmap: expected {size} {axis} for a matrix of shape {m.shape}, got {len(labels)}.")
    if ax is None:
        fig, ax = _plt().subplots(figsize=(max(3.0, 0.35 * m.shape[1] + 2), max(2.5, 0.35 * m.shape[0] + 1)))
    else:
        fig = ax.figure
    im = ax.imshow(m, cmap=cmap, aspect="auto", interpolation="nearest")
    fig.colorbar(im, ax=ax)
    if xlabels is not None:
        ax.set_xticks(range(len(xlabels)), [str(s) for s in xlabels], rotation=90)
    if ylabels is not None:
        ax.set_yticks(range(len(ylabels)), [str(s) for s in ylabels])
    if title:
        ax.set_title(title)
    return fig


def plot_loglog(x, curves: Mapping[str, Sequence[float]], xlabel: str = "N", ylabel: str = "value",
                title: str | None = None, ax=None):
    """Curves on log-log axes, with markers: a power law (bias ~ c / N) is a straight line of slope -1."""
    fig = plot_curves(x, curves, xlabel=xlabel, ylabel=ylabel, title=title, ax=ax)
    ax = fig.axes[0] if ax is None else ax
    for line in ax.get_lines():
        line.set_marker("o")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.legend()
    return fig
