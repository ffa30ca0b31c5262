"""The grader's end of the request channel (autograder.wall.channel), without a kernel: whatever the kernel writes
into its end of the socket (an answer to another request, one announcing gigabytes, one that stalls halfway,
JSON of the wrong shape), the grader reads no more than its limits, waits no longer than its time limits, and
says what was wrong in words. The kernel's side (genlab.testing.server) is run here on threads of this process.
The same attacks from inside a real sandboxed kernel are the ``lab1_attack_*`` samples of solutions/lab1_vae.
"""
from __future__ import annotations

import os
import secrets
import socket
import sys
import time
from pathlib import Path

import pytest
import torch

from autograder.wall.channel import (AnswerTimeout, ChannelLost, ChannelTampered, RequestChannel, SendTimeout, check_reply,
                                     check_tree)
from autograder.core.sanitize import quoted, student_text
from genlab.testing import server, wire
from genlab.testing.runner import run_test

LIMITS = dict(max_json_bytes=4 << 20, max_tensor_bytes=16 << 20, read_s=0.5)
RID = "0123456789abcdef"


@pytest.fixture
def channel():
    rpc = RequestChannel()
    kernel_end = socket.socket(fileno=os.dup(rpc.kernel_fd))
    rpc.launched()
    yield rpc, kernel_end
    kernel_end.close()
    rpc.close()


def receive(rpc: RequestChannel, request_id: str = RID, wait_s: float = 2.0, **kw):
    return rpc.receive(request_id, wait_s=wait_s, **{**LIMITS, **kw})


# -- frames ---------------------------------------------------------------------------------------------------
def test_a_request_reaches_the_kernel_and_its_answer_comes_back(channel):
    rpc, kernel = channel
    rpc.send(RID, {"kind": "call"}, {"t0": torch.ones(2)})
    magic, request_id, header, tensors = wire.read_frame(kernel)         # what the kernel's server reads
    assert (magic, request_id, header) == (wire.MAGIC, RID, {"kind": "call"})
    assert torch.equal(tensors["t0"], torch.ones(2))
    kernel.sendall(wire.pack_frame(RID, {"ok": True, "result": None}, {"t1": torch.zeros(3)}))
    reply, tensors = receive(rpc)
    assert reply == {"ok": True, "result": None} and torch.equal(tensors["t1"], torch.zeros(3))


def test_an_answer_to_another_request_is_tampering_and_the_channel_stays_broken(channel):
    rpc, kernel = channel
    kernel.sendall(wire.pack_frame("f" * 16, {"ok": True, "result": None}, {}))
    with pytest.raises(ChannelTampered, match="a request the grader did not make"):
        receive(rpc)
    kernel.sendall(wire.pack_frame(RID, {"ok": True, "result": None}, {}))
    with pytest.raises(ChannelTampered, match="a request the grader did not make"):   # out of step for good
        receive(rpc)
    with pytest.raises(ChannelTampered):
        rpc.send(RID, {"kind": "call"}, {})


def test_an_oversized_answer_is_refused_from_its_header_unread(channel):
    rpc, kernel = channel
    kernel.sendall(wire.FRAME.pack(wire.MAGIC, RID.encode(), 48 << 20, 0))   # announces 48 MiB, sends none
    start = time.monotonic()
    with pytest.raises(ChannelTampered, match=r"JSON of the kernel's answer is 48.0 MiB; an answer may be at most 4.0 MiB"):
        receive(rpc)
    assert time.monotonic() - start < 0.4, "refused from the header, without waiting for the body"


def test_an_oversized_tensor_part_is_refused(channel):
    rpc, kernel = channel
    kernel.sendall(wire.FRAME.pack(wire.MAGIC, RID.encode(), 2, 20 << 20))
    with pytest.raises(ChannelTampered, match="tensors of the kernel's answer is 20.0 MiB; .* at most 16.0 MiB"):
        receive(rpc)


def test_an_answer_that_stalls_halfway_is_refused_within_the_time_to_read(channel):
    rpc, kernel = channel
    kernel.sendall(wire.FRAME.pack(wire.MAGIC, RID.encode(), 4096, 0) + b'{"ok": true')
    start = time.monotonic()
    with pytest.raises(ChannelTampered, match="did not arrive within the time limit"):
        receive(rpc)
    assert time.monotonic() - start < 2.0


@pytest.mark.parametrize("frame,words", [
    (wire.FRAME.pack(b"HTTP", RID.encode(), 2, 0) + b"{}", "does not start as the server's answers do"),
    (wire.FRAME.pack(wire.MAGIC, RID.encode(), 9, 0) + b"{not json", "not valid JSON"),
    (wire.FRAME.pack(wire.MAGIC, RID.encode(), 2, 64) + b"{}" + b"\xff" * 64, "not valid safetensors"),
])
def test_a_broken_answer_is_tampering(channel, frame, words):
    rpc, kernel = channel
    kernel.sendall(frame)
    with pytest.raises(ChannelTampered, match=words):
        receive(rpc)


def test_a_closed_channel_is_a_lost_answer_not_tampering(channel):
    rpc, kernel = channel
    kernel.sendall(wire.FRAME.pack(wire.MAGIC, RID.encode(), 100, 0) + b"{")
    kernel.close()
    with pytest.raises(ChannelLost, match="in the middle of an answer"):
        receive(rpc)


def test_no_answer_is_a_timeout_and_a_dead_kernel_is_lost(channel):
    rpc, _ = channel
    start = time.monotonic()
    with pytest.raises(AnswerTimeout):
        receive(rpc, wait_s=0.3)
    assert 0.25 < time.monotonic() - start < 1.5
    with pytest.raises(ChannelLost, match="died"):
        receive(rpc, wait_s=5.0, alive=lambda: False)


def test_a_kernel_that_stops_reading_holds_a_send_no_longer_than_its_deadline(channel):
    """A request larger than the socket's buffer waits for the kernel's reader; one that never reads (issue 39:
    a test held 150 s against a 60 s limit) costs the deadline, no more."""
    rpc, _ = channel   # the kernel's end reads nothing
    start = time.monotonic()
    with pytest.raises(SendTimeout, match="no more within the time limit"):
        rpc.send(RID, {"kind": "call"}, {"t0": torch.ones(2 << 20)}, deadline=start + 0.5)   # 8 MiB
    assert 0.45 < time.monotonic() - start < 1.5


class _Stalled:
    """A kernel manager whose kernel is alive and reads nothing from its end of the channel."""
    killed = False

    def is_alive(self):
        return not self.killed

    def shutdown_kernel(self, now=False):
        self.killed = True


def _stalled_session(limits):
    from autograder.wall.kernel import KernelSession

    session = KernelSession(Path("/nonexistent"), limits)
    session.channel, session.km, session.started_at = RequestChannel(), _Stalled(), time.monotonic()
    kernel_end = socket.socket(fileno=os.dup(session.channel.kernel_fd))
    session.channel.launched()
    return session, kernel_end


@pytest.mark.parametrize("size,words", [(2 << 20, r"\(time limit per call\): the kernel read \d+ of the"),
                                        (2, "the call ignored the interrupt")])
def test_a_stalled_kernel_makes_the_call_a_timeout_and_is_stopped(size, words):
    """The grader's whole request under one deadline: a request too large for the socket's buffer (8 MiB) that
    the kernel never reads, or a small one never answered, then an interrupt never answered: status timeout
    (RemoteTimeout), within the limit per call and the grace, and the kernel is stopped."""
    from autograder.core.limits import Limits
    from autograder.wall.kernel import RemoteTimeout

    session, kernel_end = _stalled_session(Limits(test_timeout_s=1, interrupt_grace_s=0.5))
    try:
        encoder = wire.Encoder()
        header = {"kind": "call", "target": "f", "args": encoder.encode((torch.ones(size),)),
                  "kwargs": encoder.encode({})}
        start = time.monotonic()
        with pytest.raises(RemoteTimeout, match=words):
            session.request(header, encoder)
        assert time.monotonic() - start < 3.0
        assert session.dead_of_timeout and session.km.killed
    finally:
        kernel_end.close()
        session.channel.close()


# -- the structure of answers --------------------------------------------------------------------------------
@pytest.mark.parametrize("reply,kind,words", [
    (7, "integrity", "boolean 'ok'"),
    ({"ok": True, "result": 7}, "integrity", "integrity check"),
    ({"ok": True, "result": ["torch.allclose", "\x1b[2Kfake"]}, "integrity", "integrity check"),
    ({"ok": True, "result": 1}, "timed_loop", "timed_loop request carries a result"),
    ({"ok": True, "result": 1}, "stage", "stage request carries a result"),
    ({"ok": True, "result": [["torch.allclose", "140"]]}, "identities", "identities"),
    ({"ok": True, "result": [["torch.allclose", 1, 2]]}, "identities", "identities"),
    ({"ok": True, "result": [["x\n[genlab grader]", 1]]}, "identities", "identities"),
    ({"ok": True, "result": 0, "identities": [["torch.allclose", "1"]]}, "peak_memory", "after the measurement"),
    ({"ok": True, "result": 0, "identities": {"torch.allclose": 1}}, "peak_memory", "after the measurement"),
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


def test_a_watched_object_replaced_while_a_measurement_ran_is_tampering():
    """A measured call's answer carries the watched objects' identities as they were right after the call; the
    grader compares them with what the kernel reported at its boot (KernelSession.check_measured)."""
    from autograder.wall.kernel import KernelSession

    session = KernelSession.__new__(KernelSession)
    session.baseline, session.channel_evidence = {"genlab.checks.peak_memory": [1, 2, 3, 4], "torch.equal": 7}, []
    reply = check_reply({"ok": True, "result": 0, "identities": [["genlab.checks.peak_memory", [1, 2, 3, 4]],
                                                                   ["torch.equal", 7]]}, {}, "peak_memory")
    session.check_measured(reply)   # unchanged: nothing to say
    reply["identities"][0][1] = [1, 9, 3, 4]   # the same function, its code swapped
    with pytest.raises(ChannelTampered, match="replaced while a measurement ran: genlab.checks.peak_memory"):
        session.check_measured(reply)
    assert session.channel_evidence == ["replaced while a measurement ran: genlab.checks.peak_memory"]


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
    assert check_reply({"ok": True, "result": server.identities()}, {}, "identities")["ok"]
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
def _serve_here():
    """The kernel's server on threads of this process, on a fresh channel: (grader's end, a request function)."""
    rpc = RequestChannel()
    fd = os.dup(rpc.kernel_fd)
    rpc.launched()
    server.install(fd)

    def request(kind, target, *args, wait_s=5.0):
        encoder = wire.Encoder()
        request_id = secrets.token_hex(8)
        header = {"kind": kind, "target": target, "args": encoder.encode(args), "kwargs": encoder.encode({}),
                  "answer_limits": {"json_bytes": LIMITS["max_json_bytes"], "tensor_bytes": LIMITS["max_tensor_bytes"]}}
        rpc.send(request_id, header, encoder.tensors)

        def result():
            reply, tensors = receive(rpc, request_id, wait_s=wait_s)
            return check_reply(reply, tensors, kind), tensors
        return request_id, result
    return rpc, request


def test_the_kernels_server_answers_on_its_own_thread_within_the_grader_limits(monkeypatch):
    main = sys.modules["__main__"].__dict__
    monkeypatch.setitem(main, "double", lambda t: t * 2)
    monkeypatch.setitem(main, "huge", lambda: list(range(2_000_000)))   # honest, but too much plain data
    monkeypatch.setitem(main, "where", lambda: __import__("threading").current_thread().name)
    rpc, request = _serve_here()
    try:
        _, result = request("call", "double", torch.ones(2))
        reply, tensors = result()
        assert torch.equal(wire.decode(reply["result"], tensors), torch.full((2,), 2.0))
        _, result = request("call", "huge")
        error = result()[0]["error"]   # an error the student can act on, not tampering
        assert error["type"] == "ValueError" and "the grader takes at most 4.0 MiB" in error["message"]
        _, result = request("call", "where")
        assert result()[0]["result"] == "genlab-server", "requests run on the server's thread, not in a cell"
    finally:
        rpc.close()


def test_an_interrupt_stops_a_call_that_runs_too_long(monkeypatch):
    main = sys.modules["__main__"].__dict__

    def spin():
        while True:
            pass
    monkeypatch.setitem(main, "spin", spin)
    rpc, request = _serve_here()
    try:
        request_id, result = request("call", "spin", wait_s=0.3)
        with pytest.raises(AnswerTimeout):
            result()
        rpc.interrupt(request_id)
        reply = check_reply(*receive(rpc, request_id, wait_s=5.0), "call")
        assert reply["error"]["type"] == "KeyboardInterrupt"
        request_id, result = request("call", "spin", wait_s=0.3)   # the server takes the next request as before
        with pytest.raises(AnswerTimeout):
            result()
        rpc.interrupt(request_id)   # and stops it too: no thread keeps spinning in this test process
        assert check_reply(*receive(rpc, request_id, wait_s=5.0), "call")["error"]["type"] == "KeyboardInterrupt"
    finally:
        rpc.close()


def test_answers_past_the_notebooks_budget_reach_their_test_and_are_not_kept():
    """Issue 39: every answer may be 256 MiB, and all of a notebook's calls were kept for diagnosis until its
    end (a grader grew to 1.7 GiB). Calls are kept within max_kept_calls_mib; the rest still reach the test."""
    from autograder.wall.remote import KeptCalls, KeptRecorder, RemoteFunction

    class Answers:   # a kernel whose function answers 1 MiB of zeros
        def request(self, header, encoder):
            return {"ok": True, "result": {"__tensor__": "t0"}}, {"t0": torch.zeros(1 << 18)}

    kept = KeptCalls(limit_bytes=3 << 20)
    recorder = KeptRecorder(kept=kept)
    f = RemoteFunction(Answers(), "f", recorder)
    results = [f(torch.ones(2)) for _ in range(5)]
    assert all(r.shape == (1 << 18,) for r in results), "every answer reaches its test"
    assert len(recorder.calls) == 2 and kept.kept_bytes <= 3 << 20
    assert kept.dropped == {"f": [3, 3 * ((1 << 20) + 8)]}
