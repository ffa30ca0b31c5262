"""Allow-listed torch.nn modules sent by a test to the student's kernel: rebuilt from data, never unpickled."""
from __future__ import annotations

import socket
import threading
from collections import OrderedDict

import pytest
import torch
import torch.nn as nn

from genlab.testing import wire


def _through_a_socket(header: dict, encoder: wire.Encoder):
    grader, kernel = socket.socketpair()
    with grader, kernel:   # sent from a thread: a frame larger than the socket's buffer would block this one
        sender = threading.Thread(target=grader.sendall, args=(wire.pack_frame("0" * 16, header, encoder.tensors),))
        sender.start()
        _, _, header, tensors = wire.read_frame(kernel)
        sender.join()
    return header, tensors


def _round_trip(value, tmp_path):
    """What the kernel's side sees when the grader sends ``value`` (through a real frame on a socket)."""
    encoder = wire.Encoder()  # the grader's encoder: no ``keep``, so nothing stays behind as a handle
    tree = encoder.encode(value)
    header, tensors = _through_a_socket({"args": tree}, encoder)
    return wire.decode(header["args"], tensors, handle_factory=lambda i, t: ("handle", i, t), modules={})


def test_a_small_model_arrives_with_its_weights_flags_and_names(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(OrderedDict([
        ("attn", nn.Sequential(OrderedDict([("q_proj", nn.Linear(6, 6)), ("k_proj", nn.Linear(6, 6, bias=False))]))),
        ("act", nn.GELU(approximate="tanh")), ("norm", nn.LayerNorm(6)), ("drop", nn.Dropout(0.25)),
        ("head", nn.Linear(6, 3).to(torch.bfloat16))]))
    model.attn.q_proj.weight.requires_grad_(False)
    model.drop.eval()
    rng_before = torch.random.get_rng_state()
    got = _round_trip(model, tmp_path)
    assert torch.equal(torch.random.get_rng_state(), rng_before), "rebuilding must not draw random numbers"
    assert type(got) is nn.Sequential and [n for n, _ in got.named_modules()] == [n for n, _ in model.named_modules()]
    for (name, p), (_, q) in zip(model.named_parameters(), got.named_parameters()):
        assert type(q) is nn.Parameter and q.dtype == p.dtype and torch.equal(q, p), name
        assert q.requires_grad == p.requires_grad, name
    assert got.attn.k_proj.bias is None and got.act.approximate == "tanh" and got.drop.p == 0.25
    assert got.drop.training is False and got.head.training is True
    x = torch.randn(2, 6)
    assert torch.equal(got[:4](x), model[:4](x))


def test_tied_parameters_stay_one_parameter(tmp_path):
    emb, head = nn.Embedding(5, 4), nn.Linear(4, 5, bias=False)
    head.weight = emb.weight
    got = _round_trip(nn.Sequential(emb, head), tmp_path)
    assert got[0].weight is got[1].weight
    assert len(list(got.parameters())) == 1


def test_only_allow_listed_modules_cross(tmp_path):
    class Custom(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

    with pytest.raises(TypeError, match="cannot send a Custom"):
        wire.Encoder().encode(Custom())
    with pytest.raises(TypeError, match="cannot send a Custom"):
        wire.Encoder().encode(nn.Sequential(Custom()))
    # a forged spec naming another class is refused on the kernel's side
    with pytest.raises(ValueError, match="not an allowed"):
        wire.decode({"__module__": "Module"}, {}, modules={})
    with pytest.raises(ValueError, match="malformed module spec"):
        wire.decode({"__module__": "Linear", "init": {"in_features": {"x": 1}}}, {}, modules={})


def test_the_grader_never_rebuilds_a_module_from_a_reply():
    with pytest.raises(ValueError, match="only data may come back"):
        wire.decode({"__module__": "Linear", "init": {"in_features": 2, "out_features": 2}}, {})


def test_the_kernel_still_keeps_modules_it_returns_as_handles():
    kept = []
    encoder = wire.Encoder(keep=lambda obj: kept.append(obj) or 7)
    assert encoder.encode(nn.Linear(2, 2))["__handle__"] == 7 and isinstance(kept[0], nn.Linear)


def test_an_object_the_kernel_returned_goes_back_as_its_handle():
    class Returned:  # what autograder.wall.remote.RemoteObject holds
        def __init__(self):
            self._handle = wire.Handle(42, "__main__.LoRALinear")

    assert wire.Encoder().encode([Returned()]) == [{"__handle__": 42, "type": "__main__.LoRALinear"}]


def test_the_digit_feature_network_crosses_with_its_batchnorm_statistics(tmp_path):
    """Lab 5's extract_features is tested with the course's feature network: convolutions, BatchNorm buffers and
    each submodule's mode arrive, and rebuilding it draws nothing from the kernel's random generator."""
    from genlab.features import load_feature_net

    net = load_feature_net()
    net.bn2.train()
    rng_before = torch.random.get_rng_state()
    got = _round_trip(net, tmp_path)
    assert torch.equal(torch.random.get_rng_state(), rng_before), "rebuilding must not draw random numbers"
    assert type(got) is type(net) and got.conv1.padding == net.conv1.padding
    for name, value in net.state_dict().items():
        assert torch.equal(got.state_dict()[name], value), name
    assert wire.modes(got) == wire.modes(net) and got.bn2.training and not got.bn1.training
    x = torch.rand(3, 64)
    got.eval(), net.eval()
    assert torch.equal(got(x), net(x))


def test_lab6s_step_functions_cross_as_their_settings(tmp_path):
    """Lab 6's overfit_one_batch(model, batch, step_fn) is tested with step functions that are genlab modules:
    AdamStep (a real Adam step) and LossScript (scripted losses, NaN and infinity included) arrive with their
    settings and a fresh state, and AdamStep trains the model the test sent."""
    from genlab.models import AdamStep, LossScript

    step, script = _round_trip([AdamStep(lr=0.05, loss="ce"), LossScript(start=float("inf"), ratio=0.25,
                                                                          nan_at=2, as_tensor=True)], tmp_path)
    assert type(step) is AdamStep and step.config == {"lr": 0.05, "loss": "ce"}
    assert type(script) is LossScript and script.calls == 0
    assert [float(script(None, None)) for _ in range(3)][:1] == [float("inf")] and script.calls == 3
    assert float(_round_trip(LossScript(start=3.0, ratio=0.5), tmp_path)(None, None)) == 3.0
    torch.manual_seed(0)
    model, x, y = nn.Linear(4, 3), torch.randn(6, 4), torch.randint(0, 3, (6,))
    first, second = float(step(model, (x, y))), float(step(model, (x, y)))
    assert second < first
    with pytest.raises(ValueError, match="'mse' or 'ce'"):
        AdamStep(loss="l1")


def test_a_mode_the_kernel_switched_comes_back_to_the_callers_module(tmp_path):
    """model.eval() inside a student's function is seen by the test, as it would be in the notebook."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5))
    args = (torch.zeros(1), [model])
    encoder = wire.Encoder()
    tree = encoder.encode(args)
    header, tensors = _through_a_socket({"args": tree}, encoder)
    rebuilt = wire.decode(header["args"], tensors, modules={})
    [kernel_copy] = wire.sent_modules(header["args"], rebuilt)
    kernel_copy.eval()                                       # what the student's function did
    kernel_copy[0].train()
    reported = [wire.modes(m) for m in wire.sent_modules(header["args"], rebuilt)]
    wire.apply_modes(wire.sent_modules(tree, args), reported)
    assert not model.training and model[0].training and not model[1].training
    wire.apply_modes([model], [{"": "yes", "1": 1}])             # only plain booleans are taken
    assert not model.training and not model[1].training


def test_a_call_in_this_process_lists_its_modules_in_the_order_the_wire_sends_them(tmp_path):
    """A student's self-check (LocalFunction) and the grader report modes_after for the same modules."""
    a, b, c = nn.Linear(1, 1), nn.Dropout(0.1), nn.BatchNorm2d(2)
    args, kwargs = (torch.zeros(1), [a, (b,)]), {"x": 1, "extra": {"net": c}}
    encoder = wire.Encoder()
    header = {"args": encoder.encode(args), "kwargs": encoder.encode(kwargs)}
    assert wire.modules_in((args, kwargs)) == wire.call_modules(header, args, kwargs) == [a, b, c]


# -- generators and the default dtype (what lets a test check `generator=` and `dtype=None` in the kernel) ----
def test_a_generator_travels_as_its_state_and_only_towards_the_kernel():
    g = torch.Generator().manual_seed(7)
    encoder = wire.Encoder()
    tree = encoder.encode((g,))
    (rebuilt,) = wire.decode(tree, encoder.tensors, modules={})
    assert rebuilt is not g and torch.equal(torch.rand(5, generator=rebuilt), torch.rand(5, generator=g))
    with pytest.raises(ValueError, match="generator"):  # never rebuilt from what a kernel sends back
        wire.decode(tree, encoder.tensors)


def test_a_recorded_generator_replays_what_the_call_drew():
    from genlab.testing.calls import detached

    g = torch.Generator().manual_seed(3)
    kept = detached(g)
    first = torch.rand(4, generator=g)
    assert torch.equal(torch.rand(4, generator=detached(kept)), first)
    assert torch.equal(torch.rand(4, generator=detached(kept)), first), "each replay starts from the call's state"


def test_the_default_dtype_is_applied_for_the_block_only():
    before = torch.get_default_dtype()
    with wire.default_dtype("float64"):
        assert torch.empty(1).dtype == torch.float64
    assert torch.get_default_dtype() == before
    with pytest.raises(ValueError):
        with wire.default_dtype("int64"):
            pass


def test_a_module_kept_in_the_kernel_is_measured_there_through_its_handle():
    """grad_of(module, x) on a module the student's code built: one request on the path every call takes."""
    import pytest

    from autograder.wall.remote import RemoteObject
    from genlab.checks import grad_of
    from genlab.testing.calls import Recorder

    sent = {}

    class Session:  # stands for the kernel: records the request, answers nothing
        def request(self, header, encoder):
            sent.update(header)
            raise RuntimeError("no kernel here")

    module = RemoteObject(Session(), wire.Handle(7, "__main__.CausalSelfAttention"), Recorder(), "m")
    with pytest.raises(RuntimeError, match="no kernel"):
        grad_of(module, torch.randn(2, 5, 16))
    assert sent["kind"] == "grad_of" and sent["handle"] == 7 and "target" not in sent and "method" not in sent


def test_a_parameters_gradient_crosses_with_it_and_a_missing_one_stays_none():
    """Lab 6's grad_norms_by_module reads .grad after a backward pass: a gradient crosses with its parameter, a
    parameter that received none arrives without one, and a recorded call keeps both as they were."""
    from genlab.testing.calls import detached

    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    model[0].requires_grad_(False)
    model(torch.randn(4, 3)).sum().backward()
    encoder = wire.Encoder()
    tree = encoder.encode(model)
    rebuilt = wire.decode(tree, encoder.tensors, modules={})
    assert rebuilt[0].weight.grad is None and rebuilt[0].bias.grad is None
    torch.testing.assert_close(rebuilt[1].weight.grad, model[1].weight.grad)
    torch.testing.assert_close(rebuilt[1].bias.grad, model[1].bias.grad)
    recorded = detached(model)
    torch.testing.assert_close(recorded[1].weight.grad, model[1].weight.grad)
    assert recorded[0].weight.grad is None
