"""The grader's end of the request channel, written as if the kernel at the other end were hostile.

Requests and answers are files in ``.genlab_rpc``, a folder of the kernel's scratch folder (see
:mod:`genlab.testing.server`). The kernel owns that scratch folder, so it can replace anything in it at any
moment: the folder by a link to a host folder, an answer by a link to a host file, by a named pipe, by a
file of gigabytes or by JSON of the wrong shape. The grader (often root) therefore

- reaches the folder only through a descriptor of the kernel's scratch folder (whose parent is the grader's
  own), opened with ``O_DIRECTORY | O_NOFOLLOW``, and only when it is the very folder the grader created
  (same device and inode) with the owner it had when the kernel started; every file is then opened
  relative to that descriptor (``dir_fd=``), so no path the kernel controls is ever resolved;
- writes its request files only there, with ``O_CREAT | O_EXCL | O_NOFOLLOW``, and removes them, and the
  answer's files, by name in that folder when the request is over;
- opens an answer only when it is a regular file (``lstat`` first, then ``O_NOFOLLOW | O_NONBLOCK`` and
  ``fstat`` again: no link is followed and no pipe or device is ever opened for reading), with one link, of
  the kernel's owner, under a size limit, read within a time limit;
- checks every answer's structure (:func:`check_reply`) before anything uses it.

An answer or folder that breaks these rules raises :class:`ChannelTampered`, whose message says what was
wrong in words, naming only the entry in the channel's folder (never a host path, nor whether a host path
exists). The pipeline makes the test ``tampered`` with that evidence. An answer that is simply missing (the
kernel wrote none) raises :class:`ChannelLost`, a kind of :class:`~autograder.kernel.KernelLost`.
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat
import time
from pathlib import Path

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from autograder.sanitize import student_text

FOLDER = ".genlab_rpc"
ANSWER = "-answer"          # genlab.testing.server writes <request>-answer.json and <request>-answer.safetensors
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_KINDS = {stat.S_IFREG: "a file", stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a named pipe",
          stat.S_IFDIR: "a folder", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}


class ChannelTampered(Exception):
    """The channel's folder or an answer broke the channel's rules: evidence that the notebook interferes."""


class ChannelLost(Exception):
    """No answer came back (the kernel wrote none, or its folder for them is gone). Subclassed by kernel.py
    as a KernelLost, so that a missing answer is graded as it always was (status killed)."""


def _kind(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


class RpcFolder:
    """``workdir/.genlab_rpc``, created by the grader before the kernel starts and verified at every use."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.path = self.workdir / FOLDER
        self.identity: tuple[int, int] | None = None   # (st_dev, st_ino) of the folder the grader made
        self.owner: int | None = None                  # its owner once the kernel started (the kernel's user)

    # -- the folder --------------------------------------------------------------------------------------
    def _workdir_fd(self) -> int:
        # The scratch folder's parent is the grader's own (mode 700): the kernel cannot replace the scratch
        # folder itself, only what is inside it.
        return os.open(self.workdir, _DIR_FLAGS)

    def create(self) -> None:
        wfd = self._workdir_fd()
        try:
            os.mkdir(FOLDER, 0o700, dir_fd=wfd)
            st = os.stat(FOLDER, dir_fd=wfd, follow_symlinks=False)
        finally:
            os.close(wfd)
        self.identity, self.owner = (st.st_dev, st.st_ino), None

    def settle(self, owners: set[int]) -> None:
        """Once the kernel has started (the sandbox gave the scratch folder to the kernel's user): records the
        folder's owner, which must be one of ``owners``; it may not change afterwards."""
        self.owner = None
        fd = self.open(owners)
        try:
            self.owner = os.fstat(fd).st_uid
        finally:
            os.close(fd)

    def open(self, owners: set[int] | None = None) -> int:
        """A descriptor of the verified folder (the caller closes it)."""
        if self.identity is None:
            raise ChannelLost("the grader's request folder was never created")
        wfd = self._workdir_fd()
        try:
            try:
                fd = os.open(FOLDER, _DIR_FLAGS, dir_fd=wfd)
            except OSError:
                try:
                    st = os.stat(FOLDER, dir_fd=wfd, follow_symlinks=False)
                except FileNotFoundError:
                    raise ChannelLost(f"the grader's request folder {FOLDER} was removed from the kernel's "
                                      "folder; something in the notebook interfered with the grader") from None
                raise ChannelTampered(f"the grader's request folder {FOLDER} was replaced by "
                                      f"{_kind(st.st_mode)}") from None
        finally:
            os.close(wfd)
        st = os.fstat(fd)
        problem = ""
        if (st.st_dev, st.st_ino) != self.identity:
            problem = "was replaced by another folder"
        elif self.owner is not None and st.st_uid != self.owner:
            problem = "changed owner"
        elif owners is not None and st.st_uid not in owners:
            problem = "has an unexpected owner"
        if problem:
            os.close(fd)
            raise ChannelTampered(f"the grader's request folder {FOLDER} {problem}")
        return fd

    # -- requests ----------------------------------------------------------------------------------------
    def write_request(self, name: str, header: dict, tensors: dict[str, torch.Tensor],
                      dir_fd: int | None = None) -> Path:
        """Writes ``name.safetensors`` then ``name.json`` into the verified folder (``dir_fd``, from :meth:`open`,
        or opened here); returns the request's path as the kernel sees it (the sandbox binds the scratch folder
        at the same path)."""
        blob, text = save_tensors(tensors), json.dumps(header).encode()
        fd = self.open() if dir_fd is None else dir_fd
        try:
            for entry, data in ((name + ".safetensors", blob), (name + ".json", text)):
                try:
                    out = os.open(entry, _WRITE_FLAGS, 0o644, dir_fd=fd)
                except FileExistsError:
                    raise ChannelTampered(f"a file named like the grader's next request ({entry}) was already "
                                          f"in {FOLDER}") from None
                try:
                    os.fchmod(out, 0o644)   # the kernel runs as another user: it must read what root wrote
                    view = memoryview(data)
                    while view:
                        view = view[os.write(out, view):]
                finally:
                    os.close(out)
        finally:
            if dir_fd is None:
                os.close(fd)
        return self.path / name

    def cleanup(self, name: str, dir_fd: int | None = None) -> None:
        """Removes a request's files and its answer's, by name, in the verified folder (links are removed,
        never followed). Given the ``dir_fd`` the request was written with, that folder is cleaned wherever
        the kernel moved it; without one, a folder that fails verification is left alone."""
        if dir_fd is None:
            try:
                fd = self.open()
            except (ChannelTampered, ChannelLost, OSError):
                return
        else:
            fd = dir_fd
        try:
            for suffix in (".json", ".safetensors", ".json.tmp", ANSWER + ".json", ANSWER + ".safetensors",
                           ANSWER + ".json.tmp"):
                try:
                    os.unlink(name + suffix, dir_fd=fd)
                except OSError:   # absent, or a folder the kernel put there (the scratch folder goes anyway)
                    pass
        finally:
            if dir_fd is None:
                os.close(fd)

    # -- answers -----------------------------------------------------------------------------------------
    def read_answer(self, name: str, *, max_json_bytes: int, max_tensor_bytes: int, timeout_s: float,
                    dir_fd: int | None = None) -> tuple[object, dict[str, torch.Tensor]]:
        """The answer to request ``name``: its JSON (parsed, not yet checked: see :func:`check_reply`) and its
        tensors, read in the folder ``dir_fd`` (or the folder, verified again). Raises ChannelTampered or
        ChannelLost."""
        deadline = time.monotonic() + timeout_s
        fd = self.open() if dir_fd is None else dir_fd
        try:
            text = self._read(fd, name + ANSWER + ".json", max_json_bytes, deadline, missing_ok=True)
            if text is None:
                raise ChannelLost("the kernel sent no answer; something in the notebook interfered with the "
                                  "grader")
            blob = self._read(fd, name + ANSWER + ".safetensors", max_tensor_bytes, deadline)
        finally:
            if dir_fd is None:
                os.close(fd)
        try:
            reply = json.loads(text)
        except (ValueError, RecursionError):
            raise ChannelTampered("the kernel's answer is not valid JSON") from None
        try:
            tensors = load_tensors(blob)
        except Exception:  # noqa: BLE001 - safetensors' own error type, or anything a forged file triggers
            raise ChannelTampered("the kernel's answer has a tensor file that is not valid safetensors") from None
        return reply, tensors

    def _read(self, fd: int, entry: str, limit: int, deadline: float, missing_ok: bool = False) -> bytes | None:
        # Named without the request's own (random) name, so that one forgery repeated is one line of evidence.
        what = "the JSON file of the kernel's answer" if entry.endswith(".json") else \
            "the tensor file of the kernel's answer"
        try:
            st = os.stat(entry, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            if missing_ok:
                return None
            raise ChannelTampered(f"{what} is missing while the rest of the answer is there") from None
        if not stat.S_ISREG(st.st_mode):
            raise ChannelTampered(f"{what} is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise ChannelTampered(f"{what} is {_mib(st.st_size)}; an answer may be at most {_mib(limit)}")
        try:
            f = os.open(entry, _READ_FLAGS, dir_fd=fd)
        except OSError as exc:   # swapped since the lstat: ELOOP for a link
            why = "a symbolic link" if exc.errno == errno.ELOOP else \
                f"unreadable ({errno.errorcode.get(exc.errno, 'error')})"
            raise ChannelTampered(f"{what} is {why}") from None
        try:
            st = os.fstat(f)
            if not stat.S_ISREG(st.st_mode):
                raise ChannelTampered(f"{what} is {_kind(st.st_mode)}, not a regular file")
            if st.st_nlink != 1:
                raise ChannelTampered(f"{what} has {st.st_nlink} names (a hard link)")
            if self.owner is not None and st.st_uid != self.owner:
                raise ChannelTampered(f"{what} is not the kernel's own file")
            if st.st_size > limit:
                raise ChannelTampered(f"{what} is {_mib(st.st_size)}; an answer may be at most {_mib(limit)}")
            chunks, total = [], 0
            while True:
                if time.monotonic() > deadline:
                    raise ChannelTampered(f"{what} took longer than the time limit to read")
                chunk = os.read(f, min(1 << 20, limit + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
                if total > limit:
                    raise ChannelTampered(f"{what} grew past the limit of {_mib(limit)} while it was read")
            return b"".join(chunks)
        finally:
            os.close(f)


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


def check_reply(reply, tensors: dict[str, torch.Tensor], kind: str) -> dict:
    """The answer to a request of ``kind``, checked field by field; returns it with the kernel's text
    cleaned (control characters dropped, lengths capped: :func:`autograder.sanitize.student_text`).
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
    if not set(reply) <= {"ok", "result", "modes"} or "result" not in reply:
        raise _malformed("an answer with unknown fields or no 'result'")
    result, modes = reply["result"], reply.get("modes", [])
    if type(modes) is not list or not all(type(m) is dict and all(type(v) is bool for v in m.values())
                                          for m in modes):
        raise _malformed("'modes' is not a list of objects of booleans")
    if kind == "integrity":
        if type(result) is not list or len(result) > 1000 or not all(
                type(n) is str and _WATCHED_NAME.fullmatch(n) for n in result):
            raise _malformed("the integrity check's answer is not a list of watched names")
    elif kind in ("timed_loop", "timed_prepare"):
        if result is not None:
            raise _malformed("a timed loop's answer carries a result")
    else:
        check_tree(result, tensors)
    return {"ok": True, "result": result, "modes": modes}
