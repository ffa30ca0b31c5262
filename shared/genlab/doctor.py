"""``genlab doctor``: check that this machine can run the labs, and say what to fix.

Run it first when something behaves oddly::

    python -m genlab.doctor          # or: genlab doctor
    # in a notebook:
    from genlab.doctor import print_report; print_report()

Each check returns a :class:`Finding` with one of four statuses:

* ``ok``    - present and usable;
* ``note``  - an optional extra is absent; the labs skip the parts that need it;
* ``warn``  - a lab (or the grader) needs it; that lab will fail until you fix it;
* ``error`` - blocks the labs altogether (no torch, torch < 2.4, Python < 3.10,
  or GPU checks were requested with ``GENLAB_GPU_CHECKS=1`` but no GPU is visible).

Only ``error`` findings make :func:`exit_code` (and so the command) non-zero,
so CI can run the doctor as a gate without tripping over optional extras.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import sys
from dataclasses import dataclass

__all__ = ["Finding", "doctor", "print_report", "exit_code", "main", "MIN_TORCH", "MIN_PYTHON"]

MIN_TORCH = (2, 4)  # torch.nn.attention.sdpa_kernel, torch.amp.GradScaler("cuda"), ...
MIN_PYTHON = (3, 10)  # matches requires-python in pyproject.toml

STATUSES = ("ok", "note", "warn", "error")


@dataclass(frozen=True)
class Finding:
    """One line of the report.

    Attributes:
        name: what was checked, e.g. ``"torch"``.
        status: ``"ok"``, ``"note"``, ``"warn"`` or ``"error"`` (see module docstring).
        detail: what was found, e.g. a version string or ``"not installed"``.
        fix: what to do about it ("" when nothing needs doing).
    """

    name: str
    status: str
    detail: str
    fix: str = ""

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"Finding.status must be one of {STATUSES}, got {self.status!r}.")

    @property
    def blocking(self) -> bool:
        return self.status == "error"


def _version_tuple(version: str) -> tuple[int, ...]:
    """``"2.13.0+cpu"`` -> ``(2, 13, 0)``; ignores local and pre-release suffixes."""
    match = re.match(r"(\d+(?:\.\d+)*)", version)
    return tuple(int(p) for p in match.group(1).split(".")) if match else ()


def _dist_version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


# ---------------------------------------------------------------------------
# Individual checks
# ---------------------------------------------------------------------------

def _check_python() -> Finding:
    version = platform.python_version()
    if sys.version_info[:2] < MIN_PYTHON:
        need = ".".join(map(str, MIN_PYTHON))
        return Finding("python", "error", version, f"genlab needs Python >= {need}; create a new env, "
                       f"e.g. `conda env create -f environment.yml` (Python 3.11).")
    return Finding("python", "ok", f"{version} ({sys.executable})")


def _check_torch() -> list[Finding]:
    """torch itself, then what it can see: CUDA, the GPU, bf16."""
    try:
        import torch
    except Exception as err:  # ImportError, or a broken install raising OSError
        return [Finding("torch", "error", f"not importable ({type(err).__name__}: {err})",
                        "pip install -r requirements/ci.txt  (CPU), or see environment.yml for a CUDA build.")]

    findings = []
    need = ".".join(map(str, MIN_TORCH))
    if _version_tuple(torch.__version__)[:2] < MIN_TORCH:
        findings.append(Finding("torch", "error", f"{torch.__version__} (too old)",
                                f"the labs need torch >= {need}: pip install --upgrade 'torch>={need}'"))
    else:
        findings.append(Finding("torch", "ok", torch.__version__))

    gpu_requested = os.environ.get("GENLAB_GPU_CHECKS", "") == "1"
    if torch.cuda.is_available():
        findings.append(Finding("cuda", "ok", f"available, CUDA {torch.version.cuda}, "
                                f"{torch.cuda.device_count()} device(s)"))
        props = torch.cuda.get_device_properties(0)
        findings.append(Finding("gpu", "ok", f"{props.name}, {props.total_memory / 2**30:.1f} GiB, "
                                f"compute capability {props.major}.{props.minor}"))
        if torch.cuda.is_bf16_supported():
            findings.append(Finding("bf16", "ok", "supported"))
        else:
            # Pre-Ampere GPUs (compute capability < 8.0, e.g. T4, V100) lack native bf16.
            findings.append(Finding("bf16", "note", "not supported on this GPU",
                                    "use float16 autocast with a GradScaler instead of bfloat16."))
        return findings

    # No usable GPU: say *why*, since the fix differs.
    if torch.version.cuda is None:
        detail = "not available (this torch is a CPU-only build)"
        fix = ("fine for every lab on CPU. For a GPU, install a CUDA wheel: "
               "pip install torch --index-url https://download.pytorch.org/whl/cu128")
    else:
        detail = f"torch built for CUDA {torch.version.cuda}, but no GPU is visible"
        fix = "check `nvidia-smi` and CUDA_VISIBLE_DEVICES; the NVIDIA driver may be older than this CUDA build."
    if gpu_requested:
        findings.append(Finding("cuda", "error", detail + " (GENLAB_GPU_CHECKS=1 asks for GPU checks)",
                                fix + " Or unset GENLAB_GPU_CHECKS to run the CPU checks only."))
    else:
        findings.append(Finding("cuda", "note", detail, fix))
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        findings.append(Finding("mps", "ok", "Apple GPU available (device='mps'); CUDA-only checks are skipped"))
    findings.append(Finding("bf16", "note", "n/a without CUDA", "bf16 checks run only on a CUDA GPU."))
    return findings


# name shown, import name, distribution name, status if missing, what to do.
_OPTIONAL_PACKAGES = (
    ("rdkit", "rdkit", "rdkit", "warn",
     "pip install rdkit  (needed by the molecule/SMILES lab and genlab.data.load_smiles)"),
    ("peft", "peft", "peft", "note",
     "pip install peft  (optional: a reference to compare your own LoRA against; those checks skip without it)"),
    ("torchmetrics", "torchmetrics", "torchmetrics", "note",
     "pip install torchmetrics  (optional: a reference for your metric implementations; checks skip without it)"),
    ("diffusers", "diffusers", "diffusers", "note",
     "pip install diffusers  (optional: used only to cross-check your scheduler; pip install -e .[test])"),
    ("nbgrader", "nbgrader", "nbgrader", "note",
     "pip install -e .[grader]  (only instructors/the grading image need nbgrader)"),
    ("flash_attn", "flash_attn", "flash-attn", "note",
     "flash-attn is optional: it needs a CUDA GPU and a compiler "
     "(pip install flash-attn --no-build-isolation); the lab skips flash-attn checks without it."),
)


def _check_package(name: str, module: str, dist: str, missing_status: str, fix: str) -> Finding:
    if importlib.util.find_spec(module) is None:
        return Finding(name, missing_status, "not installed", fix)
    version = _dist_version(dist) or "unknown version"
    if module == "flash_attn":
        # flash-attn is a compiled extension tied to one torch/CUDA build; the usual
        # failure is "installed but won't import" (undefined symbol), so really import it.
        try:
            importlib.import_module(module)
        except Exception as err:
            return Finding(name, "note", f"{version} installed but not importable ({type(err).__name__}: {err})",
                           "reinstall it against this torch: pip install --force-reinstall --no-build-isolation "
                           "flash-attn; the lab skips flash-attn checks meanwhile.")
    return Finding(name, "ok", version)


def _check_bwrap() -> Finding:
    path = shutil.which("bwrap")
    if path:
        return Finding("bubblewrap", "ok", path)
    return Finding("bubblewrap", "note", "`bwrap` not on PATH",
                   "only the autograder needs it (it sandboxes submissions): sudo apt install bubblewrap "
                   "(Linux), or grade inside the Docker image.")


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------

def doctor() -> list[Finding]:
    """Run every check and return the findings (prints nothing)."""
    findings = [_check_python()]
    findings += _check_torch()
    findings += [_check_package(*spec) for spec in _OPTIONAL_PACKAGES]
    findings.append(_check_bwrap())
    return findings


def exit_code(findings: list[Finding]) -> int:
    """1 if any finding blocks the labs, else 0."""
    return int(any(f.blocking for f in findings))


def print_report(findings: list[Finding] | None = None, file=None) -> list[Finding]:
    """Print a readable report (running :func:`doctor` if needed) and return the findings."""
    findings = doctor() if findings is None else findings
    out = file or sys.stdout
    width = max(len(f.name) for f in findings)
    print("genlab doctor", file=out)
    for f in findings:
        print(f"  [{f.status:<5}] {f.name:<{width}}  {f.detail}", file=out)
        if f.fix and f.status != "ok":
            print(f"  {'':7} {'':<{width}}  -> {f.fix}", file=out)
    blocking = [f.name for f in findings if f.blocking]
    if blocking:
        print(f"{len(blocking)} blocking problem(s): {', '.join(blocking)}. Fix these first.", file=out)
    else:
        print("No blocking problems: the labs can run here.", file=out)
    return findings


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``genlab doctor`` / ``python -m genlab.doctor``; returns the exit status."""
    return exit_code(print_report())


if __name__ == "__main__":
    sys.exit(main())
