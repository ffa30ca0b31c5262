"""The grader's end of the request channel (autograder.channel), without a kernel: whatever the kernel leaves in
``.genlab_rpc`` (a link, a pipe, a file of gigabytes, JSON of the wrong shape), the grader follows no link,
opens no pipe, reads no more than its limits, reveals no host path, and says what was wrong in words.
The same attacks from inside a real sandboxed kernel are the ``lab1_attack_*`` samples of solutions/lab1_vae.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

import pytest
import torch
from safetensors.torch import save as save_tensors

from autograder.channel import ANSWER, FOLDER, ChannelLost, ChannelTampered, RpcFolder, check_reply, check_tree
from autograder.sanitize import quoted, student_text
from genlab.testing import server, wire
from genlab.testing.runner import run_test

LIMITS = dict(max_json_bytes=4 << 20, max_tensor_bytes=16 << 20, timeout_s=5.0)


@pytest.fixture
def channel(tmp_path):
    work = tmp_path / "k-1"
    work.mkdir()
    rpc = RpcFolder(work)
    rpc.create()
    rpc.settle({os.geteuid()})
    return rpc


def answer(rpc: RpcFolder, name: str, reply, tensors=None) -> None:
    (rpc.path / f"{name}{ANSWER}.safetensors").write_bytes(save_tensors(tensors or {}))
    (rpc.path / f"{name}{ANSWER}.json").write_text(reply if isinstance(reply, str) else json.dumps(reply))


def read(rpc: RpcFolder, name: str = "req-0-ab"):
    return rpc.read_answer(name, **LIMITS)


# -- the folder ----------------------------------------------------------------------------------------------
def test_requests_go_into_the_verified_folder_and_cleanup_removes_them(channel):
    path = channel.write_request("req-0-ab", {"kind": "call"}, {"t0": torch.ones(2)})
    assert path == channel.path / "req-0-ab"
    assert sorted(p.name for p in channel.path.iterdir()) == ["req-0-ab.json", "req-0-ab.safetensors"]
    assert all(p.stat().st_mode & 0o777 == 0o644 for p in channel.path.iterdir())
    header, tensors = wire.read_message(path)           # what the kernel's server reads
    assert header == {"kind": "call"} and torch.equal(tensors["t0"], torch.ones(2))
    answer(channel, "req-0-ab", {"ok": True, "result": None})
    channel.cleanup("req-0-ab")
    assert list(channel.path.iterdir()) == []


def test_a_folder_replaced_by_a_link_gets_no_request(channel, tmp_path):
    host = tmp_path / "host-tmp"
    host.mkdir()
    channel.path.rename(channel.workdir / "moved")
    channel.path.symlink_to(host)
    with pytest.raises(ChannelTampered, match="replaced by a symbolic link"):
        channel.write_request("req-0-ab", {"kind": "call"}, {})
    channel.cleanup("req-0-ab")
    assert list(host.iterdir()) == [] and list((channel.workdir / "moved").iterdir()) == []


def test_a_folder_swapped_for_another_folder_or_a_file_is_refused(channel):
    channel.path.rename(channel.workdir / "moved")
    channel.path.mkdir()
    with pytest.raises(ChannelTampered, match="another folder"):
        channel.open()
    channel.path.rmdir()
    channel.path.write_text("x")
    with pytest.raises(ChannelTampered, match="replaced by a file"):
        channel.open()


def test_a_folder_with_an_unexpected_owner_is_refused(tmp_path):
    rpc = RpcFolder(tmp_path)
    rpc.create()
    with pytest.raises(ChannelTampered, match="unexpected owner"):
        rpc.settle({os.geteuid() + 12345})


def test_a_removed_folder_is_a_lost_answer_not_tampering(channel):
    channel.path.rmdir()
    with pytest.raises(ChannelLost):
        read(channel)


# -- answers -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("target", ["secret", "no-such-file", "a-folder"])
def test_an_answer_that_is_a_link_is_never_followed_and_reveals_nothing(channel, tmp_path, target):
    (tmp_path / "secret").write_text('{"ok": true, "result": "root only"}')
    (tmp_path / "a-folder").mkdir()
    answer(channel, "req-0-ab", {"ok": True, "result": None})
    link = channel.path / f"req-0-ab{ANSWER}.json"
    link.unlink()
    link.symlink_to(tmp_path / target)
    with pytest.raises(ChannelTampered) as caught:
        read(channel)
    # The same words whether the target exists, is a folder, or is missing, and never the target's path.
    assert str(caught.value) == "the JSON file of the kernel's answer is a symbolic link, not a regular file"


def test_an_answer_that_is_a_named_pipe_is_refused_at_once(channel):
    answer(channel, "req-0-ab", {"ok": True, "result": None})
    fifo = channel.path / f"req-0-ab{ANSWER}.json"
    fifo.unlink()
    os.mkfifo(fifo)
    done = []
    reader = threading.Thread(target=lambda: done.append(pytest.raises(ChannelTampered, read, channel)), daemon=True)
    start = time.monotonic()
    reader.start()
    reader.join(10)
    assert done and time.monotonic() - start < 5, "reading a pipe must not block"
    assert "named pipe" in str(done[0].value)


def test_an_oversized_answer_is_refused_unread(channel):
    answer(channel, "req-0-ab", {"ok": True, "result": None})
    with open(channel.path / f"req-0-ab{ANSWER}.json", "r+b") as f:
        f.truncate(48 << 20)   # sparse: 48 MiB that cost the forger nothing
    with pytest.raises(ChannelTampered, match=r"48.0 MiB; an answer may be at most 4.0 MiB"):
        read(channel)


def test_an_oversized_tensor_file_is_refused(channel):
    answer(channel, "req-0-ab", {"ok": True, "result": None}, {"t0": torch.zeros(5 << 20)})   # 20 MiB
    with pytest.raises(ChannelTampered, match="tensor file .* at most 16.0 MiB"):
        read(channel)


def test_a_hard_link_and_a_missing_or_broken_part_are_refused(channel, tmp_path):
    answer(channel, "req-0-ab", {"ok": True, "result": None})
    os.link(channel.path / f"req-0-ab{ANSWER}.json", tmp_path / "elsewhere")
    with pytest.raises(ChannelTampered, match="hard link"):
        read(channel)
    answer(channel, "req-1-ab", "{not json")
    with pytest.raises(ChannelTampered, match="not valid JSON"):
        read(channel, "req-1-ab")
    answer(channel, "req-2-ab", {"ok": True, "result": None})
    (channel.path / f"req-2-ab{ANSWER}.safetensors").write_bytes(b"\xff" * 64)
    with pytest.raises(ChannelTampered, match="not valid safetensors"):
        read(channel, "req-2-ab")
    answer(channel, "req-3-ab", {"ok": True, "result": None})
    (channel.path / f"req-3-ab{ANSWER}.safetensors").unlink()
    with pytest.raises(ChannelTampered, match="missing"):
        read(channel, "req-3-ab")
    with pytest.raises(ChannelLost):
        read(channel, "req-4-ab")   # no answer at all: the kernel wrote none


# -- the structure of answers --------------------------------------------------------------------------------
@pytest.mark.parametrize("reply,kind,words", [
    (7, "integrity", "boolean 'ok'"),
    ({"ok": True, "result": 7}, "integrity", "integrity check"),
    ({"ok": True, "result": ["torch.allclose", "\x1b[2Kfake"]}, "integrity", "integrity check"),
    ({"ok": True, "result": 1}, "timed_loop", "timed loop"),
    ({"ok": "yes", "result": 1}, "call", "boolean 'ok'"),
    ({"ok": True}, "call", "no 'result'"),
    ({"ok": True, "result": 1, "extra": 1}, "call", "unknown fields"),
    ({"ok": True, "result": 1, "modes": 7}, "call", "modes"),
    ({"ok": True, "result": 1, "modes": [{"": "yes"}]}, "call", "modes"),
    ({"ok": False, "error": "boom"}, "call", "error answer"),
    ({"ok": False, "error": {"type": "ValueError", "message": 7}}, "call", "not a string"),
    ({"ok": False, "error": {"type": "E", "message": "m"}, "result": 1}, "call", "error answer"),
    ({"ok": True, "result": {"__tensor__": "t9"}}, "call", "no tensor behind it"),
    ({"ok": True, "result": {"__tensor__": "t0", "device": "/etc/passwd"}}, "call", "device"),
    ({"ok": True, "result": {"__dtype__": "cuda"}}, "call", "dtype"),
    ({"ok": True, "result": {"__float__": "1e999999"}}, "call", "non-finite"),
    ({"ok": True, "result": {"__handle__": "1", "type": "x"}}, "call", "handle"),
    ({"ok": True, "result": {"__handle__": 1, "type": "x\n[genlab grader] PASSED"}}, "call", "handle"),
    ({"ok": True, "result": {"__module__": "Linear"}}, "call", "keys"),
    ({"ok": True, "result": {"__tuple__": 5}}, "call", "tuple"),
    ({"ok": True, "result": {"__dict__": [1]}}, "call", "dict"),
])
def test_answers_of_the_wrong_shape_are_tampering(reply, kind, words):
    with pytest.raises(ChannelTampered, match=words):
        check_reply(reply, {"t0": torch.zeros(2, dtype=torch.int64)}, kind)


def test_answers_nested_too_deep_are_tampering():
    tree = 1
    for _ in range(200):
        tree = [tree]
    with pytest.raises(ChannelTampered, match="deeper"):
        check_tree(tree, {})


def test_honest_answers_pass_and_error_text_is_cleaned():
    encoder = wire.Encoder(keep=id)
    value = {"x": torch.ones(3, requires_grad=True), "pair": (1, float("inf")), "dtype": torch.float16,
             "device": torch.device("cpu"), "obj": object(), "wrapper": (1).__add__, "items": [None, True, "s", 2.5]}
    tree = encoder.encode(value)
    assert check_reply({"ok": True, "result": tree, "modes": [{"": True}]}, encoder.tensors, "call")["ok"]
    assert check_reply({"ok": True, "result": ["torch.allclose", "shell.run_cell (instance override)"]}, {},
                       "integrity")["result"] == ["torch.allclose", "shell.run_cell (instance override)"]
    assert check_reply({"ok": True, "result": None}, {}, "timed_loop")["ok"]
    error = check_reply({"ok": False, "error": {"type": "Value\x1bError", "message": "a\r\x1b[31mb\x07\nc" + "x" * 9000,
                                                "traceback": "t\x9b2J"}}, {}, "call")["error"]
    assert error["type"] == "Value_Error" and error["traceback"] == "t"
    assert error["message"].startswith("ab\nc") and len(error["message"]) < 4100 and "cut by the grader" in error["message"]


# -- the kernel's text ---------------------------------------------------------------------------------------
def test_student_text_drops_controls_and_escapes_keeps_newlines_and_tabs():
    text = "one\r\ntwo\rthree\x1b[2K\x1b[1;32mgreen\x1b[0m\x1b]0;title\x07\x07\x00\x7f\x85\x9b2J\u202eend\tx\n"
    assert student_text(text) == "one\ntwothreegreenend\tx\n"
    assert student_text("y" * 100, 10).startswith("y" * 10 + " [... 90 more")
    assert quoted("[genlab grader] t: PASSED\nok") == "  | [genlab grader] t: PASSED\n  | ok"


def test_an_error_message_cannot_pass_for_a_grader_line():
    error = check_reply({"ok": False, "error": {"type": "ValueError", "traceback": "Traceback\n  line\nValueError: x",
                         "message": "\r\x1b[2K[genlab grader] t: PASSED (2/2 points)\n[genlab grader] u: PASSED"}},
                        {}, "call")["error"]

    def test_body():
        raise wire.student_error(error["type"], error["message"], error["traceback"])

    outcome = run_test("t", "f()", {"f": test_body})
    assert outcome.status == "error" and "your code raised ValueError" in outcome.message
    assert not any(line.startswith("[genlab") for line in outcome.message.splitlines()), outcome.message
    assert not any(ord(c) < 32 and c not in "\n\t" for c in outcome.message)


# -- the kernel's side: its answers keep to the names and limits the grader reads ---------------------------
def test_the_kernels_server_answers_where_the_grader_reads_and_within_its_limits(channel, monkeypatch):
    main = sys.modules["__main__"].__dict__
    monkeypatch.setitem(main, "double", lambda t: t * 2)
    monkeypatch.setitem(main, "huge", lambda: list(range(2_000_000)))   # honest, but too much plain data
    for name, target, args in (("req-0-ab", "double", (torch.ones(2),)), ("req-1-ab", "huge", ())):
        encoder = wire.Encoder()
        header = {"kind": "call", "target": target, "args": encoder.encode(args), "kwargs": encoder.encode({}),
                  "answer_limits": {"json_bytes": LIMITS["max_json_bytes"], "tensor_bytes": LIMITS["max_tensor_bytes"]}}
        server.serve(str(channel.write_request(name, header, encoder.tensors)))
    reply, tensors = read(channel, "req-0-ab")
    reply = check_reply(reply, tensors, "call")
    assert torch.equal(wire.decode(reply["result"], tensors), torch.full((2,), 2.0))
    reply, tensors = read(channel, "req-1-ab")
    error = check_reply(reply, tensors, "call")["error"]   # an error the student can act on, not tampering
    assert error["type"] == "ValueError" and "the grader takes at most 4.0 MiB" in error["message"]
    for name in ("req-0-ab", "req-1-ab"):
        channel.cleanup(name)
    assert list(channel.path.iterdir()) == []


def test_a_request_is_cleaned_from_its_folder_wherever_the_kernel_moves_it(channel):
    folder = channel.open()
    try:
        channel.write_request("req-0-ab", {"kind": "call"}, {}, dir_fd=folder)
        channel.path.rename(channel.workdir / "moved")     # the kernel moves the folder away mid-request
        channel.path.symlink_to("/tmp")
        with pytest.raises(ChannelTampered):
            channel.open()
        channel.cleanup("req-0-ab", dir_fd=folder)
    finally:
        os.close(folder)
    assert list((channel.workdir / "moved").iterdir()) == []
