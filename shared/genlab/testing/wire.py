"""The wire format between the grader and a student's kernel: JSON plus safetensors, never pickle.

Student code runs in a kernel the grader does not trust. Everything that comes back from it is decoded
here into plain data: tensors (loaded by safetensors, so only dtype, shape and bytes survive), numbers,
strings, and lists/tuples/dicts of those. An object the format cannot carry (a rigged ``__eq__``, a module,
an open file) never crosses: the kernel keeps it and sends a *handle* that names its type, which the grader
can call through but never compare as if it were data.
"""
from __future__ import annotations

import builtins
import json
import math
import os
import struct
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from safetensors.torch import load, save

import genlab.models as _genlab_models

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
        if self.keep is None:  # the grader's side: what a test may send to the kernel
            if isinstance(getattr(value, "_handle", None), Handle):  # an object the kernel returned before
                return {"__handle__": value._handle.id, "type": value._handle.type_name}
            if type(value) in _MODULES.values():
                return encode_module(value, self)
            if isinstance(value, torch.Generator) and value.device.type == "cpu":
                # Sent as its state: the kernel draws from a copy, so the test's generator does not advance
                # (a test seeds a fresh generator for each call it wants reproducible).
                key = f"t{len(self.tensors)}"
                self.tensors[key] = value.get_state().clone()
                return {"__generator__": key}
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


def decode(tree: Any, tensors: dict[str, torch.Tensor], *, handle_factory=Handle, modules=None) -> Any:
    """Inverse of :class:`Encoder` on the trusted side: builds only plain values and handles.

    ``modules`` (a dict, used by the kernel's side only) lets allow-listed ``torch.nn`` modules a test sent be
    rebuilt; it maps tied parameters to one object. The grader never rebuilds modules from a kernel's reply.
    """
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, list):
        return [decode(v, tensors, handle_factory=handle_factory, modules=modules) for v in tree]
    if not isinstance(tree, dict):
        raise ValueError(f"malformed message: {type(tree).__name__}")
    if "__module__" in tree:
        if modules is None:
            raise ValueError("malformed message: a module spec where only data may come back")
        return decode_module(tree, tensors, modules)
    if "__tensor__" in tree:
        t = tensors[tree["__tensor__"]]
        device = tree.get("device", "cpu")
        if device != "cpu" and device.startswith("cuda") and torch.cuda.is_available():
            t = t.to(device)
        if tree.get("requires_grad"):
            t.requires_grad_(True)
        return t
    if "__generator__" in tree:
        if modules is None:  # like modules: only the kernel's side rebuilds what a test sent
            raise ValueError("malformed message: a generator where only data may come back")
        generator = torch.Generator()
        generator.set_state(tensors[tree["__generator__"]].to(torch.uint8))
        return generator
    if "__float__" in tree:
        return float(tree["__float__"])
    if "__dtype__" in tree:
        return _DTYPES.get(tree["__dtype__"]) or getattr(torch, tree["__dtype__"])
    if "__device__" in tree:
        return torch.device(tree["__device__"])
    if "__tuple__" in tree:
        return tuple(decode(v, tensors, handle_factory=handle_factory, modules=modules) for v in tree["__tuple__"])
    if "__dict__" in tree:
        return {k: decode(v, tensors, handle_factory=handle_factory, modules=modules)
                for k, v in tree["__dict__"].items()}
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


# -- frames: how a message travels on the grader's socket ---------------------------------------------------
# A frame is a fixed header, the JSON, then the tensors as safetensors bytes. The header names the request the
# frame belongs to (an answer carries its request's id) and the two lengths, so the grader can refuse an
# oversized answer before it reads a byte of it.
FRAME = struct.Struct("!4s16sIQ")   # magic, request id (16 ASCII hex digits), JSON bytes, tensor bytes
MAGIC = b"GLR1"
INTERRUPT = b"GLR!"                 # magic of a frame that interrupts the request it names (no body)


def pack_parts(header: dict, tensors: dict[str, torch.Tensor]) -> tuple[bytes, bytes]:
    """A frame's JSON and tensor bytes, without its header (which names the request)."""
    return json.dumps(header).encode(), (save(tensors) if tensors else b"")   # no tensors: no tensor bytes at all


def pack_frame(request_id: str, header: dict, tensors: dict[str, torch.Tensor], magic: bytes = MAGIC) -> bytes:
    text, blob = pack_parts(header, tensors)
    return FRAME.pack(magic, request_id.encode("ascii"), len(text), len(blob)) + text + blob


def recv_exactly(sock, n: int) -> bytes:
    """n bytes from a blocking socket; fewer only when the other end closed it."""
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(sock) -> tuple[bytes, str, dict, dict[str, torch.Tensor]] | None:
    """The kernel's reader: (magic, request id, header, tensors) of the next frame, None once the grader is
    gone. The grader is trusted here; the grader's own reader (autograder.wall.channel) trusts nothing."""
    head = recv_exactly(sock, FRAME.size)
    if len(head) < FRAME.size:
        return None
    magic, request_id, text_len, blob_len = FRAME.unpack(head)
    text, blob = recv_exactly(sock, text_len), recv_exactly(sock, blob_len)
    return magic, request_id.decode("ascii"), json.loads(text), (load(blob) if blob else {})


def _type_name(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


# -- errors the kernel reports ----------------------------------------------------------------------------
class StudentError(Exception):
    """The student's code raised. Subclassed per builtin type, so ``except ValueError`` works in tests."""

    remote_type = "Exception"
    remote_traceback = ""


_error_types: dict[str, type] = {}


def student_error(type_name: str, message: str, tb: str = "") -> StudentError:
    """The exception a kernel's error reply stands for, rebuilt from its type name (never unpickled)."""
    base = getattr(builtins, type_name, None)
    bases = (StudentError,)
    if isinstance(base, type) and issubclass(base, Exception) and base is not Exception:
        bases = (StudentError, base)
    cls = _error_types.get(type_name)
    if cls is None:
        cls = _error_types[type_name] = type(type_name, bases, {"remote_type": type_name})
    err = cls(message)
    err.remote_traceback = tb
    return err


# -- torch.nn modules a test sends to the kernel ------------------------------------------------------------
# A test may build a small model (``nn.Sequential`` of ``nn.Linear`` ...) and pass it to a student's function
# (Lab 4's ``add_lora(model, ...)``). It crosses as data: the class's name from this allow-list, its
# constructor's arguments (plain numbers, checked), its children, and its own parameters (each with its ``.grad``
# where a backward pass left one: Lab 6's ``grad_norms_by_module``) and buffers as tensors. The kernel rebuilds
# it from torch.nn alone: nothing is unpickled, no other class is built. A parameter shared by two modules (tied
# weights) arrives as one parameter.
_MODULES = {cls.__name__: cls for cls in (
    torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict, torch.nn.Linear, torch.nn.Identity,
    torch.nn.ReLU, torch.nn.GELU, torch.nn.Tanh, torch.nn.SiLU, torch.nn.Sigmoid, torch.nn.Dropout,
    torch.nn.LayerNorm, torch.nn.Embedding, torch.nn.Flatten, torch.nn.Conv2d, torch.nn.BatchNorm2d)}
# genlab's own small models (trusted code, shipped in this package; children are allow-listed torch.nn modules):
# Lab 2's ddpm_loss(model, ...) and p_sample_step(model, ...) are tested with them, cfg_eps with
# ConditionalTinyDenoiser.
# Lab 3's generate(model, ...) with a KV cache is tested with PrefixLM (it has a decode method).
# Lab 5's extract_features(model, ...) with DigitFeatureNet (BatchNorm: its mode changes its outputs).
# Lab 6's overfit_one_batch(model, batch, step_fn) with AdamStep and LossScript as step_fn (a module is callable).
_MODULES.update(_genlab_models.WIRE_MODELS)

# The constructor arguments of each class, read back from the instance (all ints, floats, bools or str).
_INIT_ARGS = {
    "Linear": lambda m: {"in_features": m.in_features, "out_features": m.out_features, "bias": m.bias is not None},
    "Dropout": lambda m: {"p": float(m.p)},
    "GELU": lambda m: {"approximate": m.approximate},
    "LayerNorm": lambda m: {"normalized_shape": list(m.normalized_shape), "eps": float(m.eps),
                            "elementwise_affine": m.elementwise_affine, "bias": m.bias is not None},
    "Embedding": lambda m: {"num_embeddings": m.num_embeddings, "embedding_dim": m.embedding_dim},
    "Flatten": lambda m: {"start_dim": m.start_dim, "end_dim": m.end_dim},
    "Conv2d": lambda m: {"in_channels": m.in_channels, "out_channels": m.out_channels,
                         "kernel_size": list(m.kernel_size), "stride": list(m.stride),
                         "padding": m.padding if isinstance(m.padding, str) else list(m.padding),
                         "dilation": list(m.dilation), "groups": m.groups, "bias": m.bias is not None,
                         "padding_mode": m.padding_mode},
    "BatchNorm2d": lambda m: {"num_features": m.num_features, "eps": float(m.eps),
                              "momentum": None if m.momentum is None else float(m.momentum),
                              "affine": m.affine, "track_running_stats": m.track_running_stats},
    "TinyDenoiser": lambda m: {k: int(v) for k, v in m.config.items()},
    "ConditionalTinyDenoiser": lambda m: {k: int(v) for k, v in m.config.items()},
    "PrefixLM": lambda m: {k: int(v) for k, v in m.config.items()},
    "AdamStep": lambda m: dict(m.config),     # Lab 6's overfit_one_batch: a learning rate and a loss's name
    "LossScript": lambda m: dict(m.config),
}


def encode_module(module: torch.nn.Module, encoder: Encoder) -> dict:
    shared = encoder.__dict__.setdefault("_parameters_sent", {})  # id(parameter) -> its tensor key
    name = type(module).__name__
    own = {}
    for pname, p in [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]:
        if id(p) in shared:
            own[pname] = {"__same_as__": shared[id(p)]}
        else:
            meta = encoder.encode(p)
            shared[id(p)] = meta["__tensor__"]
            own[pname] = {**meta, "parameter": isinstance(p, torch.nn.Parameter)}
            if isinstance(p, torch.nn.Parameter) and p.grad is not None:  # after a backward pass (Lab 6)
                own[pname]["grad"] = encoder.encode(p.grad)
    return {"__module__": name, "init": _INIT_ARGS.get(name, lambda m: {})(module), "training": module.training,
            "children": [[n, encode_module(c, encoder) if type(c) in _MODULES.values() else encoder.encode(c)]
                         for n, c in module.named_children()],
            "state": own}


def _plain(value, what: str):
    if isinstance(value, list) and all(type(v) is int for v in value):
        return value
    if type(value) not in (int, float, bool, str) and value is not None:
        raise ValueError(f"malformed module spec: {what} is a {type(value).__name__}")
    return value


def decode_module(tree: dict, tensors: dict[str, torch.Tensor], shared: dict) -> torch.nn.Module:
    """Kernel side: rebuilds an allow-listed module from its spec (see :func:`encode_module`)."""
    cls = _MODULES.get(tree.get("__module__"))
    if cls is None:
        raise ValueError(f"malformed message: {tree.get('__module__')!r} is not an allowed torch.nn module")
    init = {str(k): _plain(v, f"argument {k}") for k, v in dict(tree.get("init", {})).items()}
    if cls in (torch.nn.Linear, torch.nn.LayerNorm, torch.nn.Conv2d, torch.nn.BatchNorm2d):
        init["device"] = "meta"  # nothing to allocate or draw: the parameters and buffers arrive below
    if cls is torch.nn.Embedding and isinstance(init.get("num_embeddings"), int) and isinstance(
            init.get("embedding_dim"), int):
        # a weight given skips reset_parameters, whose normal_ on a meta tensor imports torch._refs: 0.85 s of
        # a kernel's first Embedding, measured (the weight arrives below)
        init["_weight"] = torch.empty((init["num_embeddings"], init["embedding_dim"]), device="meta")
    # genlab's models build their children themselves: that must not move the kernel's random generator either
    with torch.random.fork_rng(devices=[]):
        module = cls(**init)
    for child_name, child in tree.get("children", []):
        module.add_module(str(child_name), decode(child, tensors, modules=shared))
    for pname, meta in dict(tree.get("state", {})).items():
        if "__same_as__" in meta:
            value = shared[str(meta["__same_as__"])]
        else:
            t = decode({k: v for k, v in meta.items() if k not in ("parameter", "grad")}, tensors)
            value = torch.nn.Parameter(t.detach(), requires_grad=t.requires_grad) if meta.get("parameter") else t
            if isinstance(value, torch.nn.Parameter) and isinstance(meta.get("grad"), dict):
                grad = decode(meta["grad"], tensors)
                if not isinstance(grad, torch.Tensor) or grad.shape != value.shape:
                    raise ValueError(f"malformed module spec: the gradient of {pname} does not match its shape")
                value.grad = grad.detach().to(value.dtype)
            shared[meta["__tensor__"]] = value
        if isinstance(value, torch.nn.Parameter):
            module.register_parameter(str(pname), value)
        else:
            module.register_buffer(str(pname), value)
    module.training = bool(tree.get("training", True))  # this module's flag only; children carry their own
    return module


# -- what a call did to the modules it was sent ---------------------------------------------------------------
# A local call can switch its module argument's mode (``model.eval()``) and the caller sees it. The kernel works
# on a rebuilt copy, so it reports each sent module's flags after the call and the grader copies them back:
# a test can check that a function "leaves ``model.training`` as it was", as it would in the notebook.
def sent_modules(tree: Any, value: Any) -> list[torch.nn.Module]:
    """The modules that crossed as data, in message order: ``tree`` is the encoded form of ``value``."""
    if isinstance(tree, dict) and "__module__" in tree:
        return [value] if isinstance(value, torch.nn.Module) else []
    if isinstance(tree, list) and isinstance(value, list):
        return [m for t, v in zip(tree, value) for m in sent_modules(t, v)]
    if isinstance(tree, dict) and "__tuple__" in tree and isinstance(value, tuple):
        return [m for t, v in zip(tree["__tuple__"], value) for m in sent_modules(t, v)]
    if isinstance(tree, dict) and "__dict__" in tree and isinstance(value, dict):
        return [m for k, t in tree["__dict__"].items() if k in value for m in sent_modules(t, value[k])]
    return []


def modules_in(value: Any) -> list[torch.nn.Module]:
    """The modules in a value, in the order :func:`sent_modules` finds them once sent (a call made in this
    process, as a student's self-check makes them, reports its modes in the grader's order)."""
    if isinstance(value, torch.nn.Module):
        return [value]
    if isinstance(value, (list, tuple)):
        return [m for v in value for m in modules_in(v)]
    if isinstance(value, dict):
        return [m for v in value.values() for m in modules_in(v)]
    return []


def call_modules(header: dict, args: tuple, kwargs: dict) -> list[torch.nn.Module]:
    """The modules a request sent, positional then keyword: the same list on both sides of the wire."""
    return sent_modules(header.get("args"), tuple(args)) + sent_modules(header.get("kwargs"), dict(kwargs))


def modes(module: torch.nn.Module) -> dict[str, bool]:
    """``module.training`` of a module and of each submodule, by qualified name ("" is the module itself)."""
    return {name: bool(m.training) for name, m in module.named_modules()}


def apply_modes(modules: list[torch.nn.Module], reported: Any) -> None:
    """Sets the grader's modules to the modes the kernel reported (plain bools, matched by name)."""
    if not isinstance(reported, list):
        return
    for module, flags in zip(modules, reported):
        if not isinstance(flags, dict):
            continue
        for name, m in module.named_modules():
            if type(flags.get(name)) is bool:
                m.training = flags[name]


# -- torch's default dtype, as the test that makes a call has it --------------------------------------------
# A test may run a call under torch.set_default_dtype(torch.float64) (what `dtype=None` means is then float64);
# the kernel's server applies the name sent with each call around it, and puts its own back afterwards.
DEFAULT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def default_dtype_name() -> str:
    return str(torch.get_default_dtype()).removeprefix("torch.")


@contextmanager
def default_dtype(name: str | None):
    """``torch.set_default_dtype`` for the ``with`` block, to one of :data:`DEFAULT_DTYPES` (None: unchanged)."""
    if name is None or name == default_dtype_name():
        yield
        return
    if name not in DEFAULT_DTYPES:
        raise ValueError(f"malformed message: default dtype {name!r}")
    previous = torch.get_default_dtype()
    torch.set_default_dtype(getattr(torch, name))
    try:
        yield
    finally:
        torch.set_default_dtype(previous)
