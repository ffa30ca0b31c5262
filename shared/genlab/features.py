"""The course's own feature network for FID and KID on the 8x8 digits.

FID is defined by its feature network: Inception-v3 (trained on ImageNet, 2048-d pool features) for the
numbers papers publish. Its weights cannot be downloaded offline, and it would see an 8x8 digit upsampled to
299x299 as nothing like its training data anyway. So the labs use a small CNN trained on scikit-learn's digits,
whose 64-d penultimate activations play the part of Inception's pool features. FIDs computed with it are
distances in *this* network's feature space: they are not comparable with published Inception FIDs (different
network, different dimension, different data), only with each other.

    from genlab.features import load_feature_net
    net = load_feature_net()                        # the shipped checkpoint (assets/digit_features.safetensors)
    feats = extract_features(net, images)           # Lab 5's student function: [N, 64], eval mode, no autograd

The checkpoint is produced by this module, deterministically (fixed seed, one thread, full data order fixed)::

    python -m genlab.features --out shared/genlab/assets/digit_features.safetensors
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["DigitFeatureNet", "train_feature_net", "load_feature_net", "CHECKPOINT"]

CHECKPOINT = Path(__file__).parent / "assets" / "digit_features.safetensors"
NUM_FEATURES = 64


class DigitFeatureNet(nn.Module):
    """Conv-BN-ReLU x2, max-pool, a 64-d linear feature layer, then ReLU and a 10-way head used only for training.

    ``forward`` returns the 64-d features (what FID needs); ``classify`` returns the digit logits. The features
    are taken *before* the ReLU: after it, about a third of the units were always 0 on the digits (dead units),
    which made every covariance singular whatever N. BatchNorm is
    there on purpose: in train mode it normalises with the *batch's* statistics, so features (and FID) then
    depend on the batch size, which is one of the lab's failure modes.
    """

    num_features = NUM_FEATURES  # torchmetrics reads this instead of probing with a 299x299 dummy image

    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(1, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.conv2, self.bn2 = nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32)
        self.fc = nn.Linear(32 * 4 * 4, NUM_FEATURES)
        self.head = nn.Linear(NUM_FEATURES, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1, 1, 8, 8)                  # accepts [N, 64] or [N, 1, 8, 8], pixels in [0, 1]
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc(x.flatten(1))

    def classify(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.forward(x)))


def train_feature_net(seed: int = 0, epochs: int = 30, batch_size: int = 64, n_train: int = 1200):
    """Trains the network on ``n_train`` digits (a seeded permutation) and reports held-out accuracy.

    Deterministic on the CPU: one seed for the permutation, the initial weights and the batch order.
    Returns ``(net in eval mode, held-out accuracy)``.
    """
    from genlab.data import load_digits

    images, labels = load_digits(flat=False)
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(len(images), generator=gen)
    train, held = order[:n_train], order[n_train:]
    torch.manual_seed(seed)
    net = DigitFeatureNet()
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    for _ in range(epochs):
        net.train()
        for batch in train[torch.randperm(n_train, generator=gen)].split(batch_size):
            loss = F.cross_entropy(net.classify(images[batch]), labels[batch])
            opt.zero_grad()
            loss.backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        accuracy = (net.classify(images[held]).argmax(-1) == labels[held]).float().mean().item()
    return net, accuracy


def load_feature_net(path: str | Path = CHECKPOINT) -> DigitFeatureNet:
    """The shipped checkpoint, in eval mode, gradients off (it is a fixed measuring instrument)."""
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"load_feature_net: expected the checkpoint at {path}, but it is missing. "
                                "Rebuild it with `python -m genlab.features --out <path>` (seconds on a CPU).")
    net = DigitFeatureNet()
    net.load_state_dict(load_file(str(path)))
    return net.eval().requires_grad_(False)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Train the digit feature network and save it as safetensors.")
    parser.add_argument("--out", default=str(CHECKPOINT))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from safetensors.torch import save_file

    torch.set_num_threads(1)  # one thread: the same float additions in the same order, run after run
    start = time.perf_counter()
    net, accuracy = train_feature_net(args.seed)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, args.out)
    print(f"saved {args.out}: held-out accuracy {accuracy:.3f}, trained in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
