"""The grader's end of the request channel, written as if the kernel at the other end were hostile.

Requests and answers travel on a Unix socket pair that the grader creates before the kernel starts: the
kernel inherits one end as a file descriptor (``pass_fds``), and the boot cell, which runs before any student
code, hands its number to :func:`genlab.testing.server.install`. Nothing of the channel is a file: there is no
folder the kernel could replace by a link, no answer it could turn into a named pipe, no path the grader (often
root) would ever open on the kernel's behalf. The kernel can still write anything into its end, so the grader

- sends each request within a deadline (the call's time limit): a kernel that stops reading cannot hold the
  grader in a send (:class:`SendTimeout`);
- reads an answer's fixed header first and refuses (unread) one that announces more than its limits;
- reads the rest within a time limit, once the header is there (a trickle is tampering, not a slow test);
- takes only the answer to the request it sent: another request id is a forged frame;
- checks every answer's structure (:func:`check_reply`) before anything uses it.

An answer that breaks these rules raises :class:`ChannelTampered`, whose message says what was wrong in words.
The stream cannot be trusted after that, so the channel stays broken and every later request on it raises the
same. The pipeline makes the test ``tampered`` with that evidence. The kernel closing its end, or dying,
raises :class:`ChannelLost`, a kind of :class:`~autograder.wall.kernel.KernelLost`.
"""
from __future__ import annotations

import json
import re
import select
import socket
import time

import torch
from safetensors.torch import load as load_tensors

from autograder.core.sanitize import student_text
from genlab.testing import wire


class ChannelTampered(Exception):
    """An answer broke the channel's rules: evidence that the notebook interferes."""


class ChannelLost(Exception):
    """No answer came back (the kernel closed its end, or died). Subclassed by kernel.py as a KernelLost, so
    that a missing answer is graded as it always was (status killed)."""


class AnswerTimeout(Exception):
    """No answer within the time given: the request is still running in the kernel."""


class SendTimeout(Exception):
    """The kernel did not read a request (or an interrupt) within the time given. Part of the frame may have
    been sent, so the stream is out of step: the kernel must be stopped, not asked again."""


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


class RequestChannel:
    """The grader's end of the socket pair; :attr:`kernel_fd` is the end the kernel inherits."""

    def __init__(self):
        self._mine, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.broken = ""   # the evidence, once an answer broke the rules: the stream is out of step for good

    @property
    def kernel_fd(self) -> int:
        return self._theirs.fileno()

    def launched(self) -> None:
        """The kernel has its copy: close ours, so that the kernel's death reads as the end of the stream."""
        self._theirs.close()

    def close(self) -> None:
        self._theirs.close()
        self._mine.close()

    def send(self, request_id: str, header: dict, tensors: dict[str, torch.Tensor], *,
             deadline: float | None = None) -> None:
        """Sends one request; raises SendTimeout when the kernel has not read all of it by ``deadline``
        (``time.monotonic()``; None: no limit, for tests of this module only)."""
        self._send(wire.pack_frame(request_id, header, tensors), deadline)

    def send_encoded(self, request_id: str, text: bytes, blob: bytes, *, deadline: float | None = None) -> None:
        """Sends one request already encoded (:func:`genlab.testing.wire.pack_parts`): the same inputs go to
        several measured processes (autograder.wall.measure) without being encoded again for each."""
        self._send(wire.FRAME.pack(wire.MAGIC, request_id.encode("ascii"), len(text), len(blob)) + text, deadline)
        if blob:
            self._send(blob, deadline)

    def interrupt(self, request_id: str, *, deadline: float | None = None) -> None:
        """Asks the kernel's server to raise KeyboardInterrupt in the call answering ``request_id``."""
        self._send(wire.pack_frame(request_id, {}, {}, magic=wire.INTERRUPT), deadline)

    def _send(self, frame: bytes, deadline: float | None) -> None:
        if self.broken:
            raise ChannelTampered(self.broken)
        # Never a blocking sendall: a request larger than the socket's buffer (Lab 1's memory test sends 24 MiB)
        # waits for the kernel's reader, and a reader stopped for 150 s held that test for 151 s against a 60 s
        # limit, and it passed (sample lab1_attack_stop_reading, issue 39). So each piece goes out only once
        # select says the kernel has made room, within the deadline.
        view, sent = memoryview(frame), 0
        while sent < len(view):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0 or not select.select([], [self._mine], [], left)[1]:
                raise SendTimeout(f"the kernel read {sent} of the {len(view)} bytes of the grader's request, "
                                  "and no more within the time limit")
            try:
                sent += self._mine.send(view[sent:], socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                raise ChannelLost("the kernel closed the grader's channel") from None

    def receive(self, request_id: str, *, wait_s: float, read_s: float, max_json_bytes: int,
                max_tensor_bytes: int, alive=lambda: True) -> tuple[object, dict[str, torch.Tensor]]:
        """The answer to ``request_id``: its JSON (parsed, not yet checked: see :func:`check_reply`) and its
        tensors. Waits up to ``wait_s`` for it to begin (AnswerTimeout), checking ``alive()`` meanwhile, then
        reads it within ``read_s``. Raises ChannelTampered or ChannelLost."""
        if self.broken:
            raise ChannelTampered(self.broken)
        deadline = time.monotonic() + wait_s
        while not self._readable(min(0.2, max(0.0, deadline - time.monotonic()))):
            if not alive():
                raise ChannelLost("the kernel died before it answered")
            if time.monotonic() >= deadline:
                raise AnswerTimeout(request_id)
        try:
            return self._read_answer(request_id, time.monotonic() + read_s, max_json_bytes, max_tensor_bytes)
        except ChannelTampered as exc:
            self.broken = str(exc)
            raise

    def _readable(self, timeout_s: float) -> bool:
        return bool(select.select([self._mine], [], [], timeout_s)[0])

    def _read_answer(self, request_id, deadline, max_json_bytes, max_tensor_bytes):
        head = self._read(wire.FRAME.size, deadline, "the header of the kernel's answer")
        magic, got_id, text_len, blob_len = wire.FRAME.unpack(head)
        if magic != wire.MAGIC:
            raise ChannelTampered("the kernel's answer does not start as the server's answers do")
        if got_id != request_id.encode("ascii"):
            raise ChannelTampered("the kernel sent an answer to a request the grader did not make")
        for size, limit, what in ((text_len, max_json_bytes, "JSON"), (blob_len, max_tensor_bytes, "tensors")):
            if size > limit:
                raise ChannelTampered(f"the {what} of the kernel's answer is {_mib(size)}; an answer may be at "
                                      f"most {_mib(limit)}")
        text = self._read(text_len, deadline, "the JSON of the kernel's answer")
        blob = self._read(blob_len, deadline, "the tensors of the kernel's answer")
        try:
            reply = json.loads(text)
        except (ValueError, RecursionError):
            raise ChannelTampered("the kernel's answer is not valid JSON") from None
        try:
            tensors = load_tensors(blob) if blob else {}
        except Exception:  # noqa: BLE001 - safetensors' own error type, or anything a forged answer triggers
            raise ChannelTampered("the kernel's answer has tensors that are not valid safetensors") from None
        return reply, tensors

    def _read(self, n: int, deadline: float, what: str) -> bytes:
        chunks, left = [], n
        while left:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._readable(remaining):
                raise ChannelTampered(f"{what} did not arrive within the time limit to read an answer")
            chunk = self._mine.recv(min(left, 1 << 20))
            if not chunk:
                raise ChannelLost("the kernel closed the grader's channel" +
                                  (" in the middle of an answer" if n - left else " before it answered") +
                                  ": something in the notebook closed or shut down a socket it did not open")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


# -- the structure of an answer ---------------------------------------------------------------------------
_TYPE_NAME = re.compile(r"[\w.<>-]{1,300}")           # module.Qualname: <locals>, builtins.method-wrapper
_WATCHED_NAME = re.compile(r"[\w.() -]{1,200}")       # "torch.allclose", "shell.run_cell (instance override)"
_DEVICE = re.compile(r"[a-z]{2,12}(:\d{1,3})?")
_NON_FINITE = {"inf", "-inf", "nan"}
MAX_DEPTH = 64


def _malformed(why: str) -> ChannelTampered:
    return ChannelTampered(f"the kernel's answer is malformed: {why}")


def check_tree(tree, tensors: dict[str, torch.Tensor], depth: int = 0) -> None:
    """A result tree as :class:`genlab.testing.wire.Encoder` writes it, and nothing else: plain values, lists,
    and the tagged dicts (tensor, non-finite float, dtype, device, tuple, dict, handle) with fields of the
    right types. Raises ChannelTampered."""
    if depth > MAX_DEPTH:
        raise _malformed(f"nested deeper than {MAX_DEPTH} levels")
    if tree is None or type(tree) in (bool, int, float, str):
        return
    if type(tree) is list:
        for item in tree:
            check_tree(item, tensors, depth + 1)
        return
    if type(tree) is not dict:
        raise _malformed(f"a {type(tree).__name__} in the result")
    keys = set(tree)
    if "__tensor__" in tree:
        key = tree["__tensor__"]
        if not keys <= {"__tensor__", "device", "requires_grad", "subclass", "dtype"} or type(key) is not str \
                or key not in tensors:
            raise _malformed("a tensor entry with unknown fields or no tensor behind it")
        if not _DEVICE.fullmatch(str(tree.get("device", "cpu"))) or type(tree.get("device", "")) is not str:
            raise _malformed("a tensor's device is not a device name")
        if type(tree.get("requires_grad", False)) is not bool:
            raise _malformed("a tensor's requires_grad is not a boolean")
        if tree.get("requires_grad") and not (tensors[key].is_floating_point() or tensors[key].is_complex()):
            raise _malformed("an integer tensor that requires a gradient")
        for name in ("subclass", "dtype"):
            if name in tree and not (type(tree[name]) is str and _TYPE_NAME.fullmatch(tree[name])):
                raise _malformed(f"a tensor's {name} is not a type name")
        return
    if len(keys) == 1 and "__float__" in keys:
        if tree["__float__"] not in _NON_FINITE:
            raise _malformed("a non-finite float that is not inf, -inf or nan")
        return
    if len(keys) == 1 and "__dtype__" in keys:
        name = tree["__dtype__"]
        if not (type(name) is str and name.isidentifier() and isinstance(getattr(torch, name, None), torch.dtype)):
            raise _malformed("a dtype that is not a torch dtype")
        return
    if len(keys) == 1 and "__device__" in keys:
        if not (type(tree["__device__"]) is str and _DEVICE.fullmatch(tree["__device__"])):
            raise _malformed("a device that is not a device name")
        return
    if len(keys) == 1 and "__tuple__" in keys:
        if type(tree["__tuple__"]) is not list:
            raise _malformed("a tuple that is not a list")
        check_tree(tree["__tuple__"], tensors, depth + 1)
        return
    if len(keys) == 1 and "__dict__" in keys:
        if type(tree["__dict__"]) is not dict:
            raise _malformed("a dict that is not an object")
        for value in tree["__dict__"].values():
            check_tree(value, tensors, depth + 1)
        return
    if keys == {"__handle__", "type"}:
        if type(tree["__handle__"]) is not int or \
                not (type(tree["type"]) is str and _TYPE_NAME.fullmatch(tree["type"])):
            raise _malformed("an object handle without an integer id and a type name")
        return
    raise _malformed(f"an entry with the keys {sorted(map(str, keys))[:5]}"[:300])


def _error_type(value) -> str:
    name = re.sub(r"[^\w.]", "_", value)[:100] if type(value) is str else ""
    return name if name and not name[0].isdigit() else "Exception"


def _identities(value) -> bool:
    """A list of [watched name, identity] pairs, an identity being None, an id, or a list of ids."""
    return type(value) is list and len(value) <= 1000 and all(
        type(p) is list and len(p) == 2 and type(p[0]) is str and _WATCHED_NAME.fullmatch(p[0])
        and (p[1] is None or type(p[1]) is int or (type(p[1]) is list and len(p[1]) <= 10000
                                                   and all(type(i) is int for i in p[1])))
        for p in value)


def check_reply(reply, tensors: dict[str, torch.Tensor], kind: str) -> dict:
    """The answer to a request of ``kind``, checked field by field; returns it with the kernel's text
    cleaned (control characters dropped, lengths capped: :func:`autograder.core.sanitize.student_text`).
    Raises ChannelTampered for anything :mod:`genlab.testing.server` would never send."""
    if type(reply) is not dict or type(reply.get("ok")) is not bool:
        raise _malformed("not an object with a boolean 'ok'")
    if not reply["ok"]:
        error = reply.get("error")
        if set(reply) != {"ok", "error"} or type(error) is not dict or \
                not set(error) <= {"type", "message", "traceback"}:
            raise _malformed("an error answer with unknown fields or no 'error' object")
        if not all(type(error.get(k, "")) is str for k in ("type", "message", "traceback")):
            raise _malformed("an error answer whose type, message or traceback is not a string")
        return {"ok": False, "error": {"type": _error_type(error.get("type", "Exception")),
                                       "message": student_text(error.get("message", ""), 4000),
                                       "traceback": student_text(error.get("traceback", ""), 6000)}}
    if not set(reply) <= {"ok", "result", "modes", "identities", "modified", "changed"} or "result" not in reply:
        raise _malformed("an answer with unknown fields or no 'result'")
    modified = reply.get("modified", [])
    if type(modified) is not list or len(modified) > 64 or not all(type(i) is int and 0 <= i < 64 for i in modified):
        raise _malformed("'modified' is not a list of argument positions")
    if "identities" in reply and not _identities(reply["identities"]):
        raise _malformed("the watched objects' identities after the measurement are not a list of [name, id] pairs")
    changed = reply.get("changed", [])
    if type(changed) is not list or len(changed) > 1000 or not all(
            type(c) is list and len(c) == 2 and _path(c[0]) and type(c[1]) is dict and "__tensor__" in c[1]
            for c in changed):
        raise _malformed("'changed' is not a list of [argument path, tensor] pairs")
    for _, tensor in changed:
        check_tree(tensor, tensors)
    result, modes = reply["result"], reply.get("modes", [])
    if type(modes) is not list or not all(type(m) is dict and all(type(v) is bool for v in m.values())
                                          for m in modes):
        raise _malformed("'modes' is not a list of objects of booleans")
    if kind == "integrity":
        if type(result) is not list or len(result) > 1000 or not all(
                type(n) is str and _WATCHED_NAME.fullmatch(n) for n in result):
            raise _malformed("the integrity check's answer is not a list of watched names")
    elif kind == "identities":
        if not _identities(result):
            raise _malformed("the watched objects' identities are not a list of [name, id] pairs")
    elif kind in ("timed_loop", "timed_prepare", "stage"):
        if result is not None:
            raise _malformed(f"the answer to a {kind} request carries a result")
    else:
        check_tree(result, tensors)
    checked = {"ok": True, "result": result, "modes": modes}
    if "identities" in reply:
        checked["identities"] = reply["identities"]
    if modified:
        checked["modified"] = modified
    if changed:
        checked["changed"] = changed
    return checked


def _path(value) -> bool:
    """Where an argument sits in a call: ["args", 0, ...] or ["kwargs", "name", ...], list indices and dict keys."""
    return type(value) is list and 2 <= len(value) <= MAX_DEPTH and value[0] in ("args", "kwargs") and all(
        (type(k) is int and 0 <= k < 10**6) or (type(k) is str and len(k) <= 200) for k in value[1:])
