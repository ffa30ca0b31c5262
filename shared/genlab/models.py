"""Small models the labs train and the tests call, small enough to train on a CPU in seconds.

These classes can also travel to a student's kernel *by value* (:mod:`genlab.testing.wire` rebuilds them
from their ``config``, their children and their tensors): a test that calls ``ddpm_loss(model, ...)`` ships
the model's class name, its constructor arguments (plain numbers) and its tensors, never a pickle and
never the test's own object. Their children are allow-listed ``torch.nn`` modules only.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from genlab.features import DigitFeatureNet

__all__ = ["time_features", "TinyDenoiser", "ConditionalTinyDenoiser", "OracleDenoiser", "PrefixLM", "AdamStep",
           "LossScript", "WIRE_MODELS"]


def time_features(t: torch.Tensor, dim: int, max_period: float = 10_000.0) -> torch.Tensor:
    """Sinusoidal features of the timestep (Vaswani et al. 2017, as in DDPM): ``[B] -> [B, dim]``.

    A network that must undo noise of very different sizes has to know which step it is at; the integer
    ``t`` becomes ``dim`` smooth features at geometrically spaced frequencies, so nearby steps get nearby
    features and the MLP does not have to learn that step 499 is like step 500.
    """
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / half)
    angles = t.float()[:, None] * freqs[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class TinyDenoiser(nn.Module):
    """An MLP that predicts the noise ``eps`` in ``x_t`` from ``(x_t, t)``: Lab 2's denoiser.

    ``x_t`` is ``[B, 1, 8, 8]`` (or any ``[B, ...]`` with ``dim`` values per example); the output has its shape
    and dtype. The time features are added to both hidden layers (a common, cheap conditioning), so each
    layer can scale its work to the noise level of step ``t``. ``seed`` fixes the initial weights without
    touching the global random generator.
    """

    def __init__(self, dim: int = 64, hidden: int = 128, time_dim: int = 32, seed: int = 0):
        super().__init__()
        self.config = {"dim": dim, "hidden": hidden, "time_dim": time_dim, "seed": seed}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.inp = nn.Linear(dim, hidden)
            self.t1, self.t2 = nn.Linear(time_dim, hidden), nn.Linear(time_dim, hidden)
            self.mid = nn.Linear(hidden, hidden)
            self.out = nn.Linear(hidden, dim)

    def forward(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        emb = time_features(t.to(x_t.device), self.config["time_dim"])
        h = nn.functional.silu(self.inp(x_t.flatten(1).to(self.inp.weight.dtype)) + self.t1(emb))
        h = nn.functional.silu(self.mid(h) + self.t2(emb))
        return self.out(h).view_as(x_t).to(x_t.dtype)


class ConditionalTinyDenoiser(TinyDenoiser):
    """:class:`TinyDenoiser` told the class too: ``forward(x_t, t, y)`` adds an embedding of the label ``y`` to
    the first hidden layer. ``num_classes`` labels are the digits; label ``num_classes`` is the *null* label, the
    "no class given" of classifier-free guidance (Ho & Salimans 2022), which training must show it (Lab 2's
    ``drop_labels``). ``seed`` fixes the initial weights without touching the global random generator.
    """

    def __init__(self, num_classes: int = 10, dim: int = 64, hidden: int = 128, time_dim: int = 32, seed: int = 0):
        super().__init__(dim=dim, hidden=hidden, time_dim=time_dim, seed=seed)
        self.config["num_classes"] = num_classes
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 1)
            self.label = nn.Embedding(num_classes + 1, hidden)

    @property
    def null_label(self) -> int:
        return self.config["num_classes"]

    def forward(self, x_t: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # in the weights' dtype, so that a model made float64 with .double() computes in float64
        emb = time_features(t.to(x_t.device), self.config["time_dim"]).to(self.inp.weight.dtype)
        h = self.inp(x_t.flatten(1).to(self.inp.weight.dtype)) + self.t1(emb) + self.label(y.to(x_t.device))
        h = nn.functional.silu(self.mid(nn.functional.silu(h)) + self.t2(emb))
        return self.out(h).view_as(x_t).to(x_t.dtype)


class OracleDenoiser(nn.Module):
    """The noise predictor that knows the clean data: ``eps = (x_t - sqrt(abar_t) x0) / sqrt(1 - abar_t)``.

    It is exact, so one reverse step fed with it must land on the posterior mean ``mu~(x_t, x0)`` (the tests
    use this): any difference is the sampler's error, not the model's.
    """

    def __init__(self, x0: torch.Tensor | None = None, alpha_bar: torch.Tensor | None = None):
        super().__init__()
        self.config = {}
        self.register_buffer("x0", x0)
        self.register_buffer("alpha_bar", alpha_bar)

    def forward(self, x_t: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        a = self.alpha_bar.to(x_t.device).double()[t].view((-1,) + (1,) * (x_t.dim() - 1))
        eps = (x_t.double() - a.sqrt() * self.x0.to(x_t.device).double()) / (1 - a).sqrt()
        return eps.to(x_t.dtype)


class PrefixLM(nn.Module):
    """A language model whose next token depends on the whole prefix and on the position, with a cache.

    The logits at position t read the mean of the embeddings of tokens 0..t plus sinusoidal features of t,
    so a generator that drops the prefix, counts a token twice or restarts the positions gets other tokens.
    ``forward(ids)`` recomputes everything (``[B, T] -> [B, T, V]``); ``decode(ids, past)`` is the cached path
    Lab 3's ``generate`` uses: it reads only the new tokens ``ids`` and ``past = (sum of embeddings, count)``
    and returns ``(logits of the new tokens, new past)``, with the same logits as ``forward`` on the whole
    sequence. ``seed`` fixes the weights without touching the global random generator.
    """

    def __init__(self, vocab: int = 13, dim: int = 16, seed: int = 0):
        super().__init__()
        self.config = {"vocab": vocab, "dim": dim, "seed": seed}
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.emb = nn.Embedding(vocab, dim)
            self.head = nn.Linear(dim, vocab)

    def _logits(self, running_sum: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        mean = running_sum / (positions + 1).to(running_sum.dtype)[None, :, None]
        return self.head(mean + time_features(positions, self.config["dim"])[None])

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self._logits(self.emb(ids).cumsum(dim=1), positions)

    def decode(self, ids: torch.Tensor, past=None):
        total, count = past if past is not None else (torch.zeros(ids.shape[0], self.config["dim"]), 0)
        running = total[:, None] + self.emb(ids).cumsum(dim=1)
        positions = torch.arange(count, count + ids.shape[1], device=ids.device)
        return self._logits(running, positions), (running[:, -1], count + ids.shape[1])


class AdamStep(nn.Module):
    """One Adam step on one batch, as a module a test can send (Lab 6's ``overfit_one_batch(model, batch, step)``).

    ``step(model, (x, y))`` computes the loss of ``model(x)`` against ``y`` (``loss="mse"``: the mean squared error;
    ``"ce"``: the cross-entropy against integer labels), takes one step of an Adam optimizer at learning rate ``lr``
    (built on the model's parameters at the first call for that model) and returns the loss before the step, a
    detached 0-d tensor (the caller turns it into a float).
    """

    def __init__(self, lr: float = 0.01, loss: str = "mse"):
        super().__init__()
        if loss not in ("mse", "ce"):
            raise ValueError(f"loss must be 'mse' or 'ce', got {loss!r}")
        self.config = {"lr": float(lr), "loss": loss}
        self._optimizers: dict = {}   # id(model) -> (model, its optimizer): the model kept, so the id stays its own

    def forward(self, model: nn.Module, batch) -> torch.Tensor:
        if id(model) not in self._optimizers:
            self._optimizers[id(model)] = (model, torch.optim.Adam(model.parameters(), lr=self.config["lr"]))
        optimizer = self._optimizers[id(model)][1]
        x, y = batch
        out = model(x)
        loss = nn.functional.mse_loss(out, y) if self.config["loss"] == "mse" else nn.functional.cross_entropy(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()


class LossScript(nn.Module):
    """A step that trains nothing and reports scripted losses: call k (from 0) returns ``start * ratio**k``, NaN
    from call ``nan_at`` on (never when it is negative), as a Python float or, with ``as_tensor``, a 0-d tensor.
    A test of ``overfit_one_batch`` knows with it exactly which call reaches the target."""

    def __init__(self, start: float = 1.0, ratio: float = 0.5, nan_at: int = -1, as_tensor: bool = False):
        super().__init__()
        self.config = {"start": float(start), "ratio": float(ratio), "nan_at": int(nan_at), "as_tensor": bool(as_tensor)}
        self.calls = 0

    def forward(self, model: nn.Module, batch):
        k, self.calls = self.calls, self.calls + 1
        c = self.config
        value = math.nan if 0 <= c["nan_at"] <= k else c["start"] * c["ratio"] ** k
        return torch.tensor(value, dtype=torch.float64) if c["as_tensor"] else value


# The classes the test wire may rebuild in a student's kernel (name -> class); Lab 5's feature network included.
WIRE_MODELS = {cls.__name__: cls for cls in (TinyDenoiser, ConditionalTinyDenoiser, OracleDenoiser, PrefixLM,
                                             DigitFeatureNet, AdamStep, LossScript)}
