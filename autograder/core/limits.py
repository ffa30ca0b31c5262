"""Every limit a grading run works under, in one type, read from one file (``autograder/course.toml``).

``Limits()`` is the course's defaults; ``Limits.load(course_toml, cell_timeout_s=...)`` applies a course's
own file and then the flags of one run (a flag left at None keeps the file's value).
"""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path

COURSE_TOML = Path(__file__).resolve().parents[1] / "course.toml"


def _read(path: Path) -> dict:
    return tomllib.loads(Path(path).read_text()).get("limits", {})


_DEFAULTS = _read(COURSE_TOML)


@dataclass(frozen=True)
class Limits:
    cell_timeout_s: float = _DEFAULTS["cell_timeout_s"]
    notebook_timeout_s: float = _DEFAULTS["notebook_timeout_s"]
    test_timeout_s: float = _DEFAULTS["test_timeout_s"]
    interrupt_grace_s: float = _DEFAULTS["interrupt_grace_s"]
    memory_gib: float = _DEFAULTS["memory_gib"]
    max_processes: int = _DEFAULTS["max_processes"]
    max_file_mib: float = _DEFAULTS["max_file_mib"]
    max_scratch_mib: float = _DEFAULTS["max_scratch_mib"]
    max_scratch_files: int = _DEFAULTS["max_scratch_files"]
    output_bytes_per_cell: int = _DEFAULTS["output_bytes_per_cell"]
    max_notebook_mib: float = _DEFAULTS["max_notebook_mib"]
    max_answer_json_mib: float = _DEFAULTS["max_answer_json_mib"]
    max_answer_tensor_mib: float = _DEFAULTS["max_answer_tensor_mib"]
    answer_read_timeout_s: float = _DEFAULTS["answer_read_timeout_s"]
    max_kept_calls_mib: float = _DEFAULTS["max_kept_calls_mib"]
    full_run: bool = _DEFAULTS["full_run"]
    # Students graded without the policy for graded code (course.toml [policy]), for one run only (`genlab grade
    # --without-policy NAME`): the sandbox, the channel and the watched objects still hold. The sample submissions
    # that test those walls are graded so (their spec says "policy": "off").
    policy_exempt: tuple[str, ...] = ()

    @classmethod
    def load(cls, course_toml: Path | None = None, **overrides) -> "Limits":
        names = {f.name for f in fields(cls)}
        given = {**(_read(course_toml) if course_toml and Path(course_toml).exists() else {}),
                 **{k: v for k, v in overrides.items() if v is not None}}
        unknown = sorted(set(given) - names)
        if unknown:
            raise ValueError(f"unknown limits {unknown} in {course_toml or 'the flags'}: "
                             f"the limits are {sorted(names)}")
        return replace(cls(), **given)

    @property
    def memory_bytes(self) -> int:
        return int(self.memory_gib * 2**30)

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mib * 2**20)

    @property
    def max_scratch_bytes(self) -> int:
        return int(self.max_scratch_mib * 2**20)

    @property
    def max_notebook_bytes(self) -> int:
        return int(self.max_notebook_mib * 2**20)

    @property
    def max_answer_json_bytes(self) -> int:
        return int(self.max_answer_json_mib * 2**20)

    @property
    def max_answer_tensor_bytes(self) -> int:
        return int(self.max_answer_tensor_mib * 2**20)

    @property
    def max_kept_calls_bytes(self) -> int:
        return int(self.max_kept_calls_mib * 2**20)
