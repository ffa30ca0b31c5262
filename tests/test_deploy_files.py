"""deploy/: the Slurm array and the Kubernetes Indexed Job both run `genlab grade --shard I/N --db URL`."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SBATCH = ROOT / "deploy" / "slurm" / "grade-array.sbatch"
JOB = ROOT / "deploy" / "k8s" / "grade-job.yaml"
URL = "postgresql://genlab:secret@db.example:5432/genlab"


def _k8s_command() -> list[str]:
    try:
        import yaml
    except ImportError:  # no PyYAML: the command's lines, as written in the file
        text = JOB.read_text()
        assert "completionMode: Indexed" in text and "secretKeyRef" in text and "persistentVolumeClaim" in text
        return re.findall(r"^\s+- (\S+)$", text.split("command:")[1].split("env:")[0], re.M)
    job = yaml.safe_load(JOB.read_text())
    assert job["kind"] == "Job" and job["spec"]["completionMode"] == "Indexed"
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["GENLAB_DB"]["valueFrom"]["secretKeyRef"]["name"]
    assert int(env["GENLAB_SHARDS"]["value"]) == job["spec"]["completions"], "completions != GENLAB_SHARDS"
    assert any("persistentVolumeClaim" in v for v in pod["volumes"])
    return container["command"]


def test_k8s_job_grades_its_shard_into_the_shared_db():
    cmd = _k8s_command()
    assert cmd[:2] == ["genlab", "grade"]
    args = dict(zip(cmd[3::2], cmd[4::2]))
    assert args["--shard"] == "$(JOB_COMPLETION_INDEX)/$(GENLAB_SHARDS)"
    assert args["--db"] == "$(GENLAB_DB)"
    assert "$(JOB_COMPLETION_INDEX)" in args["--out"]


def test_sbatch_is_an_array_grading_its_shard():
    text = SBATCH.read_text()
    assert re.search(r"^#SBATCH --array=0-\d+", text, re.M)
    grade = next(line for line in text.splitlines() if "genlab grade" in line)
    for needle in ("--shard", "$SLURM_ARRAY_TASK_ID/$N", "--db", "$GENLAB_DB", "--out", "--workers"):
        assert needle in grade


def _fake(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("runtime", ["apptainer", "docker"])
def test_sbatch_runs_genlab_grade_with_the_task_shard(runtime, tmp_path):
    """Runs the script with fake apptainer/docker/genlab: checks the arguments genlab gets in the container."""
    if not shutil.which("bash"):
        pytest.skip("no bash")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    got = tmp_path / "args"
    _fake(bin_dir / "genlab", f'printf "%s\\n" "$@" > {got}\n')
    # apptainer: the container sees only the APPTAINERENV_ variables, without the prefix.
    _fake(bin_dir / "apptainer", 'while [ "$1" != bash ]; do shift; done\n'
                                 'exec env -i PATH="$PATH" $(env | sed -n "s/^APPTAINERENV_//p") "$@"\n')
    _fake(bin_dir / "docker", 'while [ "$1" != bash ]; do shift; done\nexec "$@"\n')
    (tmp_path / "db").write_text(URL + "\n")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path), "GENLAB_RUNTIME": runtime,
           "GENLAB_DATA": str(tmp_path / "data"), "GENLAB_DB_FILE": str(tmp_path / "db"),
           "SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "8", "SLURM_CPUS_PER_TASK": "4"}
    subprocess.run(["bash", str(SBATCH)], env=env, cwd=tmp_path, check=True, timeout=30)
    assert got.read_text().split("\n")[:-1] == [
        "grade", "/data/submitted", "--out", "/data/out/shard-3", "--shard", "3/8", "--db", URL,
        "--workers", "4"]


def test_sbatch_refuses_to_run_without_a_db(tmp_path):
    env = {"PATH": os.environ["PATH"], "SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "2"}
    done = subprocess.run(["bash", str(SBATCH)], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode != 0 and "GENLAB_DB" in done.stderr
