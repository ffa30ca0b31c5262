"""Answers that cross the channel are verified, not trusted (issue 39; issue 41's class 1).

A reported gradient is checked against the function's own values by finite differences
(autograder.wall.gradcheck), and what a function does in place to its tensor arguments in the kernel is written
into the test's own tensors (remote._write_back), seen by bytes, never by the version counter. Here the kernel's
server runs in this process, behind the same channel checks as a real kernel's answers.
"""
from __future__ import annotations

import json
import sys

import pytest
import torch

from autograder.wall import gradcheck
from autograder.wall.channel import ChannelTampered, check_reply
from autograder.wall.remote import KeptRecorder, RemoteFunction, _header
from genlab.checks import CheckFailed, grad_of
from genlab.testing import server


class InProcess:
    """A kernel's server in this process: copies go in and out as on the wire; ``forge`` may rewrite answers."""

    def __init__(self, forge=None):
        self.forge, self.channel_evidence, self.kinds = forge, [], []

    def request(self, header, encoder):
        header = json.loads(json.dumps(header))
        self.kinds.append(header["kind"])
        reply, out = server.answer(header, {k: v.clone() for k, v in encoder.tensors.items()})
        reply, tensors = json.loads(json.dumps(reply)), {k: v.clone() for k, v in out.tensors.items()}
        if self.forge is not None:
            self.forge(header, reply, tensors)
        return check_reply(reply, tensors, header["kind"]), tensors

    def note_tampering(self, evidence):
        self.channel_evidence.append(evidence)
        return ChannelTampered(evidence)


@pytest.fixture
def kernel(monkeypatch):
    """Defines functions in the namespace the server resolves names in (no IPython here: __main__'s)."""
    namespace = sys.modules["__main__"].__dict__

    def define(**functions):
        for name, fn in functions.items():
            monkeypatch.setitem(namespace, name, fn)
    return define


def _proxy(session, name, activations=()):
    recorder = KeptRecorder()
    return RemoteFunction(session, name, recorder, differentiated={name: activations} if activations else {}), recorder


def reparameterize(mu, logvar, eps=None):
    if eps is None:
        eps = torch.randn_like(mu)
    return mu + torch.exp(0.5 * logvar) * eps


def wrong_reparameterize(mu, logvar, eps=None):   # the variance for the standard deviation
    if eps is None:
        eps = torch.randn_like(mu)
    return mu + torch.exp(logvar) * eps


def _args():
    g = torch.Generator().manual_seed(0)
    return torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g), torch.randn(5, 3, generator=g)


def test_a_true_gradient_is_accepted_in_float32_float64_and_with_random_draws(kernel):
    kernel(reparameterize=reparameterize)
    session = InProcess()
    fn, recorder = _proxy(session, "reparameterize", (0, 1))
    mu, logvar, eps = _args()
    for args in ((mu, logvar, eps), (mu.double(), logvar.double(), eps.double()), (mu, logvar)):
        got = grad_of(fn, *args, wrt=(0, 1))
        assert all(g is not None for g in got)
    assert recorder.contradicted == []
    assert session.kinds.count("call") >= 3 * (2 + 4 * gradcheck.DIRECTIONS)   # the checks did run


def _forge_to(right):
    """A hook on the kernel's send: each gradient answer's tensors replaced by ``right``'s gradients."""
    def forge(header, reply, tensors):
        if header["kind"] != "grad_of" or not reply.get("ok"):
            return
        mu, logvar, eps = _args()
        want = grad_of(right, mu, logvar, eps, wrt=(0, 1))
        for key, value in zip(sorted(tensors), want):
            tensors[key] = value.detach().clone()
    return forge


def test_a_gradient_rewritten_on_send_fails_its_test_and_its_control_fails_too(kernel):
    kernel(reparameterize=wrong_reparameterize)
    mu, logvar, eps = _args()
    want = grad_of(reparameterize, mu, logvar, eps, wrt=(0, 1))
    fn, recorder = _proxy(InProcess(forge=_forge_to(reparameterize)), "reparameterize", (0, 1))
    got = grad_of(fn, mu, logvar, eps, wrt=(0, 1))
    torch.testing.assert_close(got[1], want[1])   # the forged answer would pass the test's comparison
    assert len(recorder.contradicted) == 1 and "does not match the function's own values" in recorder.contradicted[0]
    # the control: the same wrong function, its own gradient, no forgery: wrong by the test's own comparison
    fn, recorder = _proxy(InProcess(), "reparameterize", (0, 1))
    got = grad_of(fn, mu, logvar, eps, wrt=(0, 1))
    assert not torch.allclose(got[1], want[1]) and recorder.contradicted == []


def float32_only(x):   # computes in float32 whatever it gets: checked in the test's own dtype
    return torch.tanh(x.float()).pow(3)


def with_a_kink(x):    # not smooth where x is 0: a direction across it is not used
    return torch.relu(x) * 2


def test_functions_that_are_not_float64_capable_or_not_smooth_are_not_marked_down(kernel):
    kernel(float32_only=float32_only, with_a_kink=with_a_kink)
    session = InProcess()
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    for name, arg in (("float32_only", x), ("float32_only", x.double()), ("with_a_kink", x),
                      ("with_a_kink", torch.tensor([0.0, 1.0, -2.0]))):
        fn, recorder = _proxy(session, name)
        grad_of(fn, arg)
        assert recorder.contradicted == [], (name, arg.dtype, recorder.contradicted)
    # and a wrong gradient of the float32 function is still found, in float32
    fn = lambda x: torch.tanh(x.float()).pow(3)  # noqa: E731
    (true,) = grad_of(fn, x)
    def ask(target, args, kwargs):
        return session.request(*_header("call", target, args, kwargs, seed=5))
    assert gradcheck.contradiction(ask, "float32_only", {"target": "float32_only"}, (x,), {}, (true,), 5) is None
    found = gradcheck.contradiction(ask, "float32_only", {"target": "float32_only"}, (x,), {}, (true * 1.3,), 5)
    assert found is not None and "does not match" in found


def drop_in_place(y, p):
    y[y % 3 == 0] = 10   # "labels dropped", in place
    return y


def test_an_argument_changed_in_place_in_the_kernel_is_changed_in_the_test_too(kernel):
    kernel(drop_in_place=drop_in_place)
    fn, _ = _proxy(InProcess(), "drop_in_place")
    y = torch.arange(9)
    before = y.clone()
    fn(y, 0.5)
    assert not torch.equal(y, before) and torch.equal(y, torch.where(before % 3 == 0, 10, before))
    # nested in a list, and a keyword argument
    kernel(add_one=lambda xs, *, w: [x.add_(1) for x in xs] and w.mul_(0))
    fn, _ = _proxy(InProcess(), "add_one")
    xs, w = [torch.zeros(2), torch.ones(3)], torch.ones(2)
    fn(xs, w=w)
    assert torch.equal(xs[0], torch.ones(2)) and torch.equal(xs[1], torch.full((3,), 2.0)) and not w.any()


def hidden_in_place(y):
    """Changes y in place, then sets its version counter back: seen by its bytes all the same."""
    with torch.no_grad():
        y.mul_(2)
    torch._C._autograd._unsafe_set_version_counter((y,), (0,))
    return y * 1


def test_a_version_counter_set_back_hides_nothing(kernel):
    kernel(hidden_in_place=hidden_in_place, honest=lambda y: y * 2)
    y = torch.ones(3)
    fn, _ = _proxy(InProcess(), "hidden_in_place")
    fn(y)
    assert torch.equal(y, torch.full((3,), 2.0))            # a plain argument: written back
    fn, _ = _proxy(InProcess(), "hidden_in_place", (0,))    # an activation (its gradient is tested): failed
    with pytest.raises(CheckFailed, match="changed its argument 0 in place"):
        fn(torch.ones(3))
    fn, _ = _proxy(InProcess(), "honest", (0,))              # the control: no change, no finding
    y = torch.ones(3)
    fn(y)
    assert torch.equal(y, torch.ones(3))


def test_a_forged_list_of_changed_arguments_is_tampering(kernel):
    kernel(honest=lambda y: y * 2)

    def forge(header, reply, tensors):
        if reply.get("ok") and header["kind"] == "call":
            key = next(iter(tensors))
            reply["changed"] = [[["args", 3], {"__tensor__": key}]]
    session = InProcess(forge=forge)
    fn, _ = _proxy(session, "honest")
    with pytest.raises(ChannelTampered):
        fn(torch.ones(3))
    with pytest.raises(ChannelTampered, match="changed"):
        check_reply({"ok": True, "result": None, "changed": [["args", 0]]}, {}, "call")


def norm_held_constant(w):   # DoRA's way: the norm is a constant for autograd, so the gradient is not dJ/dw
    return w / w.detach().norm()


def test_a_gradient_the_lab_itself_specifies_off_the_derivative_is_not_held_to_it(kernel):
    kernel(norm_held_constant=norm_held_constant)
    w = torch.randn(5, generator=torch.Generator().manual_seed(2))
    session = InProcess()
    fn, recorder = _proxy(session, "norm_held_constant")
    grad_of(fn, w)
    assert len(recorder.contradicted) == 1            # against its own values, it is not the derivative
    fn = RemoteFunction(session, "norm_held_constant", recorder := KeptRecorder(), reference=norm_held_constant)
    grad_of(fn, w)
    assert recorder.contradicted == []                 # and neither is the reference's: the lab means it so
    fn = RemoteFunction(session, "norm_held_constant", recorder := KeptRecorder(), reference=lambda w: w / w.norm())
    grad_of(fn, w)
    assert len(recorder.contradicted) == 1            # a reference whose gradient is its derivative: held to it


def drawn_elsewhere(x):   # random numbers from Python's generator: the values cannot be reproduced, nor checked
    import random
    return x * (1 + random.random())


def test_a_function_whose_values_are_not_reproducible_cannot_pass_off_a_gradient(kernel):
    kernel(drawn_elsewhere=drawn_elsewhere)
    fn, recorder = _proxy(InProcess(), "drawn_elsewhere")
    grad_of(fn, torch.ones(3))
    assert len(recorder.contradicted) == 1 and "different values for the same inputs" in recorder.contradicted[0]
