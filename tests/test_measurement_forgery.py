"""Measurements made by the kernel's server (issue 22) give a student's function nothing to key on.

Timed loops: every call gets its own inputs (own objects, own storage, values a few units in the last place
apart), made before the clock starts, so a cache keyed on the inputs cannot make calls 2..n free. Plain, gradient
and timed calls come to the function through the same frames, under the same grad mode, so it cannot tell
which kind of request it is in. The samples ``lab1_attack_timing_cache``, ``lab1_attack_timing_value_cache`` and
``lab1_attack_grad_frame`` check the same through the whole grader.
"""
from __future__ import annotations

import inspect

import pytest
import torch

from genlab.checks import grad_of
from genlab.testing import server


def _request(fn, kind: str, *args, **kwargs):
    return server._run({"kind": kind, "handle": server._keep(fn), "n": kwargs.pop("n", 1)}, args, kwargs)


def _timed(fn, n: int, *args, offset: float = 0.3, **kwargs):
    server._run({"kind": "timed_prepare", "n": n, "offset": offset}, args, kwargs)
    assert server._run({"kind": "timed_loop", "handle": server._keep(fn), "n": n}, (), {}) is None


def test_each_timed_call_gets_its_own_inputs_with_their_own_storage_and_values():
    seen = []

    def fn(mu, logvar, eps=None, scale=1):
        seen.append((id(mu), mu.data_ptr(), float(mu.sum()), float(logvar.sum()), id(eps), eps.data_ptr(), scale))
        return mu + torch.exp(0.5 * logvar) * eps

    torch.manual_seed(0)
    mu, logvar, eps = torch.randn(64, 8), torch.randn(64, 8), torch.randn(64, 8)
    _timed(fn, 50, mu, logvar, eps=eps, scale=3)
    assert len(seen) == 50
    for column in range(6):  # ids, storage and values all differ from call to call
        assert len({s[column] for s in seen}) == 50, column
    assert {s[6] for s in seen} == {3}, "plain values are passed as they are"
    assert mu.data_ptr() not in {s[1] for s in seen}, "the sent tensor itself is never reused"
    sums = {s[2] for s in seen}
    seen.clear()
    _timed(fn, 50, mu, logvar, eps=eps, scale=3, offset=0.7)
    assert not sums & {s[2] for s in seen}, "another loop (another offset) gets other values"
    assert float(mu.sum()) not in sums, "and no copy has the values sent (a test's own call may have cached them)"


def test_timed_copies_stay_within_a_fraction_of_a_percent_and_keep_dtype_shape_and_integers():
    """Shrunk by under 2**-7: values in [0, 1] stay there, positive ones positive, signs as they were."""
    x = torch.randn(32, 4, dtype=torch.float64)
    labels = torch.arange(32)
    half = torch.randn(8, dtype=torch.float16)
    copies = server._copies((x, labels, half), {}, 20000, 0.5)
    for (a, b, c), _ in copies[:: 997]:
        assert a.dtype == x.dtype and a.shape == x.shape and torch.allclose(a, x, rtol=2 ** -7, atol=0)
        assert torch.equal(b, labels) and torch.equal(c, half)
    assert not torch.equal(copies[1][0][0], x), "a float64 copy is perturbed"


def test_a_reference_timed_against_itself_does_the_same_work_on_both_sides():
    """Both kernels run this same code on the same request: the copies are equal, call for call."""
    x = torch.randn(16, 16)
    one, two = server._copies((x,), {}, 30, 0.25), server._copies((x,), {}, 30, 0.25)
    assert all(torch.equal(a[0][0], b[0][0]) for a, b in zip(one, two))


def test_a_timed_loop_without_prepared_inputs_is_refused():
    server._prepared.clear()
    with pytest.raises(RuntimeError, match="prepared"):
        server._run({"kind": "timed_loop", "handle": server._keep(lambda: None), "n": 3}, (), {})


def _caller_view():
    """What a function can see of the frames that called it, short of reading their values."""
    frames = inspect.stack()[1:4]
    return ([(f.function, f.filename, sorted(f.frame.f_locals)) for f in frames], torch.is_grad_enabled(),
            any(f.function == "grad_of" or f.filename.endswith("gradients.py") for f in inspect.stack()))


def test_plain_gradient_and_timed_calls_look_the_same_from_the_function():
    views = {}

    def fn(mu, logvar, eps):
        views.setdefault(kind[0], _caller_view())
        return mu + torch.exp(0.5 * logvar) * eps

    args = torch.randn(5, 3), torch.randn(5, 3), torch.randn(5, 3)
    kind = ["call"]
    with torch.no_grad():  # a notebook that switched gradients off does not change what the function sees
        _request(fn, "call", *args)
        kind[0] = "grad_of"
        grads = _request(fn, "grad_of", *args, wrt=(0, 1), grad_output=None)
        kind[0] = "timed_loop"
        _timed(fn, 3, *args)
    assert views["call"] == views["grad_of"] == views["timed_loop"], views
    assert views["call"][1] is True and views["call"][2] is False
    expected = grad_of(lambda m, v, e: m + torch.exp(0.5 * v) * e, *args, wrt=(0, 1))
    assert all(torch.allclose(g, e) for g, e in zip(grads, expected))


def test_a_function_that_cuts_the_graph_outside_grad_of_is_caught():
    def sneaky(mu, logvar, eps):
        z = mu + torch.exp(0.5 * logvar) * eps
        return z if _caller_view()[2] else z.detach()

    args = torch.randn(5, 3), torch.randn(5, 3), torch.randn(5, 3)
    assert grad_of(sneaky, *args, wrt=(0,))[0] is not None, "called locally, grad_of is its caller"
    with pytest.raises(Exception, match="not connected"):
        _request(sneaky, "grad_of", *args, wrt=(0, 1), grad_output=None)


def test_gradient_inputs_are_activations_not_the_callers_tensors():
    mu = torch.randn(4, 2)
    args, leaves = __import__("genlab.checks.gradients", fromlist=["x"]).grad_inputs((mu, 3), wrt=(0,))
    assert args[0].requires_grad and not args[0].is_leaf and leaves[0].is_leaf
    assert not mu.requires_grad and mu.grad is None and args[1] == 3


def _input_view(t):
    """What a function can read of one input without looking at its values."""
    return (t.requires_grad, t.is_leaf, type(t.grad_fn).__name__, [type(f).__name__ for f, _ in
                                                                  (t.grad_fn.next_functions if t.grad_fn else ())])


def test_every_call_of_a_differentiated_function_gets_the_same_kind_of_inputs():
    """Issue 22: a function whose gradient a test takes cannot tell a gradient call from a value, timed or
    measured one by its inputs (requires_grad, grad_fn): all get activations at the positions a test
    differentiates, the others as sent."""
    views = {}

    def fn(mu, logvar, eps):
        views.setdefault(kind[0], []).append((_input_view(mu), _input_view(logvar), _input_view(eps)))
        return mu + torch.exp(0.5 * logvar) * eps

    def request(what, *args, **kwargs):
        header = {"kind": what, "handle": server._keep(fn), "n": kwargs.pop("n", 1), "activations": [0, 1],
                  "offset": kwargs.pop("offset", 0.0)}
        return server._run({**header, **kwargs.pop("header", {})}, args, kwargs)

    args = torch.randn(5, 3), torch.randn(5, 3), torch.randn(5, 3)
    kind = ["call"]
    out = request("call", *args)
    kind[0] = "grad_of"
    grads = request("grad_of", *args, wrt=(0,), grad_output=None)
    kind[0] = "timed_loop"
    request("timed_prepare", *args, n=3, offset=0.4)
    request("timed_loop", n=3)
    kind[0] = "peak_memory"
    request("peak_memory", *args)
    kind[0] = "staged"
    request("stage", *args)
    request("call", header={"staged": True, "discard": True})
    first = views["call"][0]
    assert first[0] == first[1] == (True, False, "CloneBackward0", ["AccumulateGrad"]) and not first[2][0]
    assert all(view == first for calls in views.values() for view in calls), views
    assert out.requires_grad and not args[0].requires_grad, "the test's own tensors are left alone"
    expected = grad_of(lambda m, v, e: m + torch.exp(0.5 * v) * e, *args, wrt=(0,))
    assert len(grads) == 1 and torch.allclose(grads[0], expected[0])


def test_the_positions_a_test_differentiates_are_read_from_the_lab_and_objects_are_followed():
    from genlab.testing.notebook import differentiated_positions

    tests = ["check_grad_reaches(f, a, b, wrt=(0, 1))\ngrad_of(f, a, b, c, wrt=(2,))\ngrad_of(reference.f, a)",
             "m = Block(4, 2).double()\nm.train(False)\nprint(grad_of(m, x)[0])\ngrad_of(g, x)\n%time g(x)",
             "grad_of(lambda x: f(x), x)\nh(x)"]
    assert differentiated_positions(tests, ["f", "g", "h", "Block"]) == {"f": (0, 1, 2), "Block()": (0,), "g": (0,)}
    with pytest.raises(ValueError, match="literal"):
        differentiated_positions(["grad_of(f, x, wrt=where)"], ["f"])


def test_a_reference_is_measured_with_the_inputs_the_students_function_gets():
    """The memory a graph keeps alive counts on both sides: the student's (activations, in the kernel) and the
    reference's (the same, in the grader's process), so a memory ratio compares like with like."""
    from genlab.checks import peak_memory
    from genlab.testing.calls import WithActivations

    def fn(mu, logvar, eps):
        return mu + torch.exp(0.5 * logvar) * eps    # exp's output is kept for backward only under a graph

    args = torch.randn(256, 256), torch.randn(256, 256), torch.randn(256, 256)
    plain = peak_memory(fn, *args)
    wrapped = WithActivations(fn, "fn", (0, 1))
    assert peak_memory(wrapped, *args) == _request_peak(fn, args, [0, 1]) > plain
    assert torch.equal(wrapped(*args), fn(*args)) and not wrapped(*args).requires_grad, "plain calls are the function"


def _request_peak(fn, args, activations):
    return server._run({"kind": "peak_memory", "handle": server._keep(fn), "activations": activations}, args, {})


def test_replacing_how_the_server_makes_calls_is_tampering():
    import genlab.checks.gradients as gradients

    server.install()
    real_copies, real_grads = server._copies, gradients.grads_from
    try:
        server._copies = lambda args, kwargs, n: [(args, kwargs)] * n
        gradients.grads_from = lambda *a, **k: ()
        assert {"genlab.testing.server._copies", "genlab.checks.gradients.grads_from"} <= set(server.integrity())
    finally:
        server._copies, gradients.grads_from = real_copies, real_grads
    assert server.integrity() == []


def test_a_code_swapped_in_place_is_tampering_though_the_function_keeps_its_id():
    from genlab.checks import memory

    server.install()
    count = memory._StorageTracker._count
    real = count.__code__
    try:
        count.__code__ = (lambda self, storage: None).__code__
        assert "genlab.checks.memory._StorageTracker._count" in server.integrity()
    finally:
        count.__code__ = real
    assert server.integrity() == []


def test_a_measured_calls_answer_carries_the_watched_objects_identities_taken_right_after_the_call():
    import genlab.checks as checks
    from genlab.testing import wire

    server.install()
    real = checks.peak_memory
    seen = {}

    def fn(x):   # what a notebook's thread could do while the request runs
        checks.peak_memory = lambda *a, **k: 0
        return x * 2

    handle = server._keep(fn)
    encoder = wire.Encoder()
    header = {"kind": "peak_memory", "handle": handle, "args": encoder.encode((torch.ones(4),)),
              "kwargs": encoder.encode({})}
    try:
        reply, _ = server.answer(header, encoder.tensors)
        seen = dict((name, ident) for name, ident in reply["identities"])
    finally:
        checks.peak_memory = real
    assert reply["ok"], reply
    assert seen["genlab.checks.peak_memory"] != list(server._identity(real))   # the fake, not the real one
    plain = {"kind": "call", "handle": handle, "args": header["args"], "kwargs": header["kwargs"]}
    assert "identities" not in server.answer(plain, encoder.tensors)[0]   # a plain call carries none
    checks.peak_memory = real


def test_the_loop_length_is_capped_by_the_memory_its_copies_take():
    from autograder.wall.remote import PREPARED_BYTES, calibrate, max_timed_calls

    big = torch.zeros(PREPARED_BYTES // 4 // 100)  # 1% of the budget per call
    assert max_timed_calls((big,), {}) == 100
    assert max_timed_calls((), {"scale": 2}) == 1_000_000
    assert calibrate(lambda n: 0.01 + n * 1e-9, min_loop_s=0.05, max_n=100) == 100


def test_in_a_loop_of_5000_calls_every_nonzero_float32_element_differs_from_copy_to_copy():
    """What the trust model (docs/trust-model.md) promises of value-keyed caches."""
    x = torch.cat([torch.randn(60), torch.tensor([1e-30, 3e38, -1.0, 0.5])])
    stacked = torch.stack([c[0][0] for c in server._copies((x,), {}, 5000, 0.123)])
    for j in range(x.numel()):
        assert stacked[:, j].unique().numel() == 5000, (j, float(x[j]))


def test_an_activation_changed_in_place_is_reported_and_fails_the_call_in_the_grader_and_in_process():
    """The lab's tables say a differentiated argument is left as it was; its version counter says if it was not."""
    from autograder.wall.channel import check_reply
    from genlab.checks import CheckFailed
    from genlab.testing import wire
    from genlab.testing.calls import LocalFunction, Recorder

    def kl_in_place(mu, logvar):
        return -0.5 * torch.sum(1 + logvar - mu.pow_(2) - logvar.exp(), dim=-1)

    mu, logvar = torch.randn(4, 3), torch.randn(4, 3)
    encoder = wire.Encoder()
    header = {"kind": "call", "handle": server._keep(kl_in_place), "activations": [0, 1],
              "args": encoder.encode((mu, logvar)), "kwargs": encoder.encode({})}
    reply, answer = server.answer(header, encoder.tensors)
    assert reply["ok"] and reply["modified"] == [0], reply
    assert check_reply(json_roundtrip(reply), answer.tensors, "call")["modified"] == [0]
    with pytest.raises(Exception, match="argument positions"):
        check_reply(dict(json_roundtrip(reply), modified="everything"), answer.tensors, "call")
    clean = dict(header, handle=server._keep(lambda mu, logvar: mu * 2))
    assert "modified" not in server.answer(clean, encoder.tensors)[0]
    with pytest.raises(CheckFailed, match="changed its argument 0 in place"):
        LocalFunction(kl_in_place, "gaussian_kl", Recorder(), (0, 1))(mu, logvar)
    assert LocalFunction(kl_in_place, "gaussian_kl", Recorder())(mu.clone(), logvar) is not None, \
        "a function whose gradient no test takes is called as before"


def json_roundtrip(reply):
    import json

    return json.loads(json.dumps(reply))
