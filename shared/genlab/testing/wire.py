"""The wire format between the grader and a student's kernel: JSON plus safetensors, never pickle.

Student code runs in a kernel the grader does not trust. Everything that comes back from it is decoded
here into plain data: tensors (loaded by safetensors, so only dtype, shape and bytes survive), numbers,
strings, and lists/tuples/dicts of those. An object the format cannot carry (a rigged ``__eq__``, a module,
an open file) never crosses: the kernel keeps it and sends a *handle* that names its type, which the grader
can call through but never compare as if it were data.
"""
from __future__ import annotations

import json
import math
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

# The dtypes safetensors can carry; anything else is sent as float64 with its dtype name noted.
_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)}


@dataclass(frozen=True)
class Handle:
    """An object that stayed in the kernel. ``type_name`` is what the student's code returned."""

    id: int
    type_name: str

    def __repr__(self) -> str:
        return f"<object of type {self.type_name} kept in the student's kernel>"


class Encoder:
    """Turns a Python value into a JSON tree plus a dict of tensors for safetensors."""

    def __init__(self, keep=None):
        self.tensors: dict[str, torch.Tensor] = {}
        self.keep = keep  # callable(obj) -> handle id, for objects that cannot be sent as data

    def encode(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int) and type(value) is int:
            return value
        if isinstance(value, float) and type(value) is float:
            return value if math.isfinite(value) else {"__float__": repr(value)}
        if isinstance(value, torch.Tensor):
            return self._tensor(value)
        if isinstance(value, torch.dtype):
            return {"__dtype__": str(value).removeprefix("torch.")}
        if isinstance(value, torch.device):
            return {"__device__": str(value)}
        if type(value) in (list, tuple):
            items = [self.encode(v) for v in value]
            return items if type(value) is list else {"__tuple__": items}
        if type(value) in (dict, OrderedDict) and all(type(k) is str for k in value):  # state_dict()
            return {"__dict__": {k: self.encode(v) for k, v in value.items()}}
        if self.keep is None:
            raise TypeError(f"cannot send a {type(value).__name__} to the kernel")
        return {"__handle__": self.keep(value), "type": _type_name(value)}

    def _tensor(self, t: torch.Tensor) -> dict:
        key = f"t{len(self.tensors)}"
        meta = {"__tensor__": key, "device": str(t.device), "requires_grad": bool(t.requires_grad)}
        if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
            meta["subclass"] = _type_name(t)
            t = torch.Tensor.as_subclass(t, torch.Tensor)
        plain = torch.Tensor.detach(t).cpu()
        if str(plain.dtype).removeprefix("torch.") not in _DTYPES:
            meta["dtype"] = str(plain.dtype).removeprefix("torch.")
            plain = plain.to(torch.float64)
        # A fresh contiguous copy: safetensors refuses shared or strided storage.
        self.tensors[key] = plain.contiguous().clone()
        return meta


def decode(tree: Any, tensors: dict[str, torch.Tensor], *, handle_factory=Handle) -> Any:
    """Inverse of :class:`Encoder` on the trusted side: builds only plain values and handles."""
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, list):
        return [decode(v, tensors, handle_factory=handle_factory) for v in tree]
    if not isinstance(tree, dict):
        raise ValueError(f"malformed message: {type(tree).__name__}")
    if "__tensor__" in tree:
        t = tensors[tree["__tensor__"]]
        device = tree.get("device", "cpu")
        if device != "cpu" and device.startswith("cuda") and torch.cuda.is_available():
            t = t.to(device)
        if tree.get("requires_grad"):
            t.requires_grad_(True)
        return t
    if "__float__" in tree:
        return float(tree["__float__"])
    if "__dtype__" in tree:
        return _DTYPES.get(tree["__dtype__"]) or getattr(torch, tree["__dtype__"])
    if "__device__" in tree:
        return torch.device(tree["__device__"])
    if "__tuple__" in tree:
        return tuple(decode(v, tensors, handle_factory=handle_factory) for v in tree["__tuple__"])
    if "__dict__" in tree:
        return {k: decode(v, tensors, handle_factory=handle_factory) for k, v in tree["__dict__"].items()}
    if "__handle__" in tree:
        return handle_factory(int(tree["__handle__"]), str(tree.get("type", "?")))
    raise ValueError(f"malformed message keys: {sorted(tree)[:5]}")


def subclass_names(tree: Any) -> list[str]:
    """Tensor subclasses the kernel reported in a message (evidence for the instructor)."""
    found = []
    if isinstance(tree, list):
        for v in tree:
            found += subclass_names(v)
    elif isinstance(tree, dict):
        if "subclass" in tree:
            found.append(tree["subclass"])
        for v in tree.values():
            if isinstance(v, (list, dict)):
                found += subclass_names(v)
    return found


def write_message(path: Path, header: dict, encoder: Encoder) -> None:
    """Writes ``path.json`` and ``path.safetensors``; the JSON is written last, so it marks completion."""
    path = Path(path)
    save_file(encoder.tensors, str(path.with_suffix(".safetensors")))
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(header))
    os.replace(tmp, path.with_suffix(".json"))


def read_message(path: Path, *, max_bytes: int = 512 * 2**20) -> tuple[dict, dict[str, torch.Tensor]]:
    path = Path(path)
    blob = path.with_suffix(".safetensors")
    if blob.stat().st_size > max_bytes:
        raise ValueError(f"message of {blob.stat().st_size} bytes exceeds the limit of {max_bytes}")
    header = json.loads(path.with_suffix(".json").read_text())
    if not isinstance(header, dict):
        raise ValueError("malformed message header")
    return header, load_file(str(blob))


def _type_name(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"
