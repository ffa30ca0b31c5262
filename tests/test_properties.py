"""Generated inputs (genlab.testing.properties): the domain language, derandomized draws, shrunk failures."""
from __future__ import annotations

import pytest
import torch

from genlab.checks import CheckFailed
from genlab.testing.properties import DEFAULT_EXAMPLES, DomainError, check_generated, domain_of, parse_domain

KL = "mu, logvar: real[B, D] in [-5, 5] at 0; B: 1..7; D: 1..9; dtype: float32, float64"


def kl(mu, logvar):
    return 0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).sum(-1)


def test_the_domain_language_is_read():
    d = parse_domain("x: real[*S, T, 2*H] float64 in [-1, 2] at 0, 1; t: int[B] in [0, T-1]; t_prev: int[B] in "
                     "[-1, T-2] below t; beta?: float in [0, 8]; kind: choice of linear, cosine; _a: real[T] in "
                     "[0, 1]; y: from _a + 1; *S: 0..2 dims of 1..3; T: 1..5; H: 1..2; B: T..9; examples: 7; "
                     "dtype: float32; layout: contiguous, transposed")
    assert [a.name for a in d.args] == ["x", "t", "t_prev", "beta", "kind", "_a", "y"]
    assert d.args[0].dtype == torch.float64 and d.args[0].at == (0.0, 1.0) and d.args[2].below == "t"
    assert d.args[3].optional and not d.args[3].tensor and d.args[4].choices == ("linear", "cosine")
    assert d.sizes == {"T": (1, 5), "H": (1, 2), "B": ("T", 9)} and d.batches == {"S": (0, 2, 1, 3)}
    assert d.examples == 7 and d.dtypes == (torch.float32,) and d.layouts == ("contiguous", "transposed")
    with pytest.raises(DomainError, match="size Q"):
        parse_domain("x: real[Q]")
    assert domain_of("**nothing.** prose. Generated inputs: none (it trains a model).") is None
    assert domain_of(f"**nothing.** Generated inputs: `{KL}`.").args[0].name == "mu"


def test_a_correct_function_passes_and_the_draws_do_not_depend_on_luck():
    torch.manual_seed(123)
    n = check_generated(kl, kl, "gaussian_kl", domain=KL)
    torch.manual_seed(456)
    assert check_generated(kl, kl, "gaussian_kl", domain=KL) == n >= DEFAULT_EXAMPLES


def test_a_failure_shows_the_shrunk_input_and_both_results():
    def wrong(mu, logvar):   # the sum over the latent dimensions taken as a mean
        return 0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).mean(-1)

    messages = []
    for _ in range(2):
        with pytest.raises(CheckFailed) as failed:
            check_generated(wrong, kl, "gaussian_kl", domain=KL)
        messages.append(str(failed.value))
    assert messages[0] == messages[1]          # derandomized: the same shrunk example every time
    text = messages[0]
    assert text.startswith("your gaussian_kl on this input gave tensor(") and ", expected tensor(" in text
    # shrunk: one example of two dimensions (a mean differs from a sum only then), small values
    assert "the input: gaussian_kl(tensor([[" in text and text.count("tensor(") <= 6, text


def test_an_error_is_shown_as_raised_and_a_grader_failure_is_not_shrunk():
    def raises(mu, logvar):
        raise ValueError("no")

    with pytest.raises(CheckFailed, match=r"your gaussian_kl on this input raised ValueError: no"):
        check_generated(raises, kl, "gaussian_kl", domain=KL)

    class KernelLost(Exception):     # what the grader raises when the student's kernel dies: not a verdict
        pass

    KernelLost.__module__ = "autograder.wall.kernel"
    calls = []

    def dies(mu, logvar):
        calls.append(1)
        raise KernelLost("the kernel died")

    with pytest.raises(KernelLost):
        check_generated(dies, kl, "gaussian_kl", domain=KL)
    assert len(calls) == 1                     # passed through at once, never shrunk


def test_a_domain_wider_than_the_reference_is_the_labs_mistake():
    def strict(mu, logvar):
        if mu.shape[0] < 2:
            raise ValueError("a batch of one")
        return kl(mu, logvar)

    with pytest.raises(DomainError, match="wider than the reference accepts"):
        check_generated(kl, strict, "gaussian_kl", domain=KL)


def test_the_grader_hands_over_the_table_it_loaded_wherever_it_runs(tmp_path, monkeypatch):
    """A platform's grader runs in /autograder with the course in /autograder/source: the hidden tests' domains
    come from the notebook the grader loaded, not from a course found from the working directory."""
    from pathlib import Path

    from autograder.grading.pipeline import Lab
    from genlab.testing import properties

    root = Path(__file__).resolve().parents[1]
    lab = Lab.load(root, "lab1_vae")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GENLAB_ROOT", raising=False)
    monkeypatch.setattr(properties, "_TABLES", {})
    with pytest.raises(FileNotFoundError, match="no course folder"):
        properties.lab_domain("gaussian_kl", "lab1_vae")
    lab.test_globals()
    assert [a.name for a in properties.lab_domain("gaussian_kl", "lab1_vae").args] == ["mu", "logvar"]
    with pytest.raises(DomainError, match="declares no 'Generated inputs:' domain for beta_sweep"):
        properties.lab_domain("beta_sweep", "lab1_vae")


def test_an_error_relayed_from_the_kernel_is_a_verdict_and_shrunk():
    """The grader's kernel relays a student's IndexError as a StudentError subclass named IndexError (defined in
    genlab.testing.wire): a verdict on the code, shrunk and shown with its input, not a grader failure."""
    from genlab.testing.wire import student_error

    def single_value_fails(mu, logvar):
        if mu.shape[0] == 1:
            raise student_error("IndexError", "index 1 is out of bounds for dimension 0 with size 1")
        return kl(mu, logvar)

    with pytest.raises(CheckFailed, match=r"(?s)raised IndexError: index 1 is out of bounds.*the input: gaussian_kl"):
        check_generated(single_value_fails, kl, "gaussian_kl", domain=KL)


def test_hypothesis_writes_nothing_in_the_working_directory(tmp_path, monkeypatch):
    """nbval runs a lab's notebook in solutions/<lab>: hypothesis's own cache (.hypothesis/constants) appeared there
    while the suite graded, and the every-sample test saw a file under solutions/ change."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HYPOTHESIS_STORAGE_DIRECTORY", raising=False)
    check_generated(kl, kl, "gaussian_kl", domain=KL)
    assert not (tmp_path / ".hypothesis").exists()


def test_hypothesis_files_are_in_a_folder_of_this_process_that_nobody_could_plant(tmp_path):
    """Issue 41: a folder of a guessable name in the temporary directory (genlab-hypothesis-<uid>) could be made
    first by anybody on the machine, with constants that hypothesis would mix into every later grader's draws."""
    import subprocess
    import sys

    probe = ("import os, stat, sys\n"
             "from genlab.testing import properties\n"
             "from hypothesis import configuration\n"
             "properties._keep_hypothesis_files_private()\n"
             "home = configuration.storage_directory(intent_to_write=False).home_directory\n"
             "mode = stat.S_IMODE(os.stat(home).st_mode)\n"
             "print(home, oct(mode), home.parent == __import__('pathlib').Path(os.environ['TMPDIR']))\n")
    env = {k: v for k, v in __import__("os").environ.items() if k != "HYPOTHESIS_STORAGE_DIRECTORY"}
    env["TMPDIR"] = str(tmp_path)
    homes = [subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                            check=True).stdout.split() for _ in range(2)]
    assert homes[0][0] != homes[1][0], "two processes shared hypothesis's folder"
    assert all(mode == "0o700" and in_tmp == "True" for _, mode, in_tmp in homes), homes
    assert not list(tmp_path.iterdir()), "a process left its folder behind"


def test_the_next_notebook_is_checked_on_the_inputs_hypothesis_draws(monkeypatch):
    """The grader keeps the inputs (and expected answers) of a run that passed and checks the next notebook on
    them without drawing (properties._PASSED): they must be exactly those hypothesis draws, in order, with their
    dtypes and layouts; a change the function makes in place must not reach the next notebook; and a notebook
    that fails gets the very message hypothesis gives it without the kept inputs."""
    from genlab.testing import properties

    domain = KL + "; layout: contiguous, transposed"

    def recording(into, in_place=False):
        def f(mu, logvar):
            into.append([(t.clone(), t.dtype, t.stride()) for t in (mu, logvar)])
            out = kl(mu, logvar)
            if in_place:
                mu.add_(1.0)       # a change in place: the grader writes it back into the test's tensors
            return out
        return f

    def same(a, b):
        return len(a) == len(b) and all(
            all(x[1] == y[1] and x[2] == y[2] and torch.equal(x[0], y[0]) for x, y in zip(ca, cb)) for ca, cb in zip(a, b))

    monkeypatch.setattr(properties, "_PASSED", {})
    drawn, replayed, again = [], [], []
    n = check_generated(recording(drawn, in_place=True), kl, "gaussian_kl", domain=domain)
    assert len(properties._PASSED) == 1 and n == properties._PASSED[next(iter(properties._PASSED))][0]
    assert check_generated(recording(replayed), kl, "gaussian_kl", domain=domain) == n
    monkeypatch.setattr(properties, "_PASSED", {})
    check_generated(recording(again), kl, "gaussian_kl", domain=domain)
    assert same(drawn, again) and same(replayed, again), "the kept inputs are not those hypothesis draws"

    def wrong(mu, logvar):
        return 0.5 * (mu.pow(2) + logvar.exp() - 1 - logvar).mean(-1)

    messages = []
    for kept in ({}, properties._PASSED):   # without, then with the kept inputs of a passing run
        monkeypatch.setattr(properties, "_PASSED", kept)
        with pytest.raises(CheckFailed) as failed:
            check_generated(wrong, kl, "gaussian_kl", domain=domain)
        messages.append(str(failed.value))
    assert messages[0] == messages[1]


def test_a_kept_input_that_fails_fails_even_if_hypothesis_draws_otherwise(monkeypatch):
    """The kept inputs are in the domain: a function wrong on one of them is wrong, whatever a later draw finds."""
    from genlab.testing import properties

    monkeypatch.setattr(properties, "_PASSED", {})
    check_generated(kl, kl, "gaussian_kl", domain=KL)
    (key, (n, kept)), = properties._PASSED.items()
    first = kept[0][0][0]

    def wrong_on_the_first(mu, logvar):     # wrong only on the first kept input
        out = kl(mu, logvar)
        return out + 1 if mu.shape == first.shape and torch.equal(mu, first) else out

    monkeypatch.setattr(properties, "_PASSED", {key: (n, kept)})
    # hypothesis, run again, draws the same inputs: it finds the failure and shrinks (it may shrink to it)
    with pytest.raises(CheckFailed, match="your gaussian_kl on this input gave"):
        check_generated(wrong_on_the_first, kl, "gaussian_kl", domain=KL)
    # kept inputs that hypothesis would not draw now (say, drawn in a process with other modules loaded)
    shifted = [(tuple(t + 0.125 for t in args), kwargs, kl(*(t.double() + 0.125 for t in args))) for args, kwargs, _ in kept]
    first = shifted[0][0][0]
    monkeypatch.setattr(properties, "_PASSED", {key: (n, shifted)})
    with pytest.raises(CheckFailed, match=r"(?s)gave tensor.*the input: gaussian_kl\(tensor"):
        check_generated(wrong_on_the_first, kl, "gaussian_kl", domain=KL)
