"""The sandbox a student's kernel runs in: an allowlisted filesystem, an unprivileged user, an allowlisted
environment, bubblewrap namespaces and resource limits.

What a kernel can see is *built*, not what is left after hiding: :func:`visible_paths` lists it, once, from
``sys.prefix`` and the packages the kernel imports. Inside there is

- the system (``/usr`` and the ``/bin``, ``/lib*`` links to it, and a few named files of ``/etc``), read-only;
- the Python environment: ``sys.base_prefix``, ``sys.prefix``, and the folders ``genlab``, ``torch`` and the
  packages whose data ``genlab.data`` loads (scikit-learn, RDKit) import from, read-only;
- its own scratch folder, writable, as ``HOME``, ``TMPDIR`` and working directory: a tmpfs of at most
  ``scratch_bytes`` and ``scratch_files`` (see :func:`launcher`), not the host's disk;
- inside it, ``.kernel``: the folder of the kernel's channel files (its connection file and ZMQ sockets), the one
  folder of the host's disk it writes to, and only while it starts where the grader is root (see
  :func:`channel_folder`);
- ``/dev`` (the null, zero, random and tty devices; GPUs where the grader has them) and its own ``/proc``.

Nothing else: no ``/root``, ``/home``, ``/srv``, no other folder of ``/tmp`` (earlier runs' outputs and caches,
other kernels' scratch), no course folder beside ``genlab``'s own package, no output folder.

Who it runs as: a grader started as root first drops to the dedicated user ``genlab-kernel`` (created by
``.ci/system-deps.sh`` and the Dockerfile) and only then enters bubblewrap, so the kernel's uid *outside*
the sandbox is that user's, never 0; inside it is :data:`SANDBOX_UID`. A grader that is not root runs its
kernels as itself (it is unprivileged already). The paths that user cannot reach on its own are bound for
it by the root side first (see :data:`STAGE`), so no folder's permissions are widened for it.

Its environment is :func:`kernel_environment`, nothing else (bubblewrap starts from an empty one).

Limits: ``prlimit`` caps address space, file size, core dumps and processes (``RLIMIT_NPROC``, counted per
kernel: each kernel has its own user namespace); per-kernel cgroups (cgroups.py), where the machine allows
them, add a real memory limit and ``pids.max``; the scratch folder is a tmpfs of a fixed size (and, as root,
number of files). No network, its own PID namespace (it cannot see or signal
the grader), and everything it starts dies with it.

Without bubblewrap, or as root without the kernel user, the grader refuses to run unless told ``--unsafe``
(see :func:`require`).
"""
from __future__ import annotations

import importlib.util
import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from autograder.wall import cgroups

KERNEL_USER = os.environ.get("GENLAB_KERNEL_USER", "genlab-kernel")
SANDBOX_UID = 1000                     # the uid a kernel sees for itself, inside
ADDRESS_HEADROOM = 4 * 2**30
# Where, in a mount namespace of its own, the root-side shell binds the paths the kernel user cannot reach
# (its scratch folder inside the grader's mode-700 scratch, a Python installed under /root) before dropping
# to that user; bubblewrap binds them on from there to their own paths. No folder's permissions are widened.
STAGE = Path("/mnt")

# Packages whose folders the kernel imports from, or reads data from (genlab.data: scikit-learn's digits and
# sample images, RDKit's Data/NCI/first_5K.smi). Everything else it imports lies in sys.prefix.
KERNEL_PACKAGES = ("genlab", "torch", "sklearn", "rdkit")
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Of /etc only what the dynamic loader, time zones and fonts read: no passwd, no hosts, no configuration.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "fonts", "mime.types")
# The environment a kernel gets, and nothing else (see kernel_environment).
MMAP_THRESHOLD_BYTES = 4 * 2**20
TRIM_THRESHOLD_BYTES = 2**30   # fits the int that mallopt takes
THREADS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")
PASSED_ON = ("LANG", "LC_ALL", "TZ",                                     # the grader's locale and zone
             "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER",  # GPU graders
             "GENLAB_GPU_CHECKS")                                        # genlab's own switch for GPU checks


@dataclass
class SandboxConfig:
    memory_bytes: int = 4 * 2**30          # address space; torch alone maps about 1 GiB
    max_processes: int = 64
    max_file_bytes: int = 256 * 2**20
    scratch_bytes: int = 512 * 2**20       # the scratch folder's tmpfs: its size ...
    scratch_files: int = 10_000            # ... and its inodes (files and folders)
    hide: list[Path] = field(default_factory=list)   # folders covered even if they lie inside a visible one
    # "bubblewrap" (this module's launcher) or "container" (autograder.wall.container: where bubblewrap cannot
    # create namespaces, in a platform's grading container)
    mode: str = "bubblewrap"
    uid: int | None = None   # container mode: the unprivileged uid this run's kernels run as (container.draw_uid)


class SandboxUnavailable(RuntimeError):
    pass


# -- who the kernel runs as ---------------------------------------------------------------------------------
def kernel_account() -> tuple[int, int] | None:
    """(uid, gid) the kernels run as outside the sandbox when the grader is root; None when it is not root
    (kernels then run as the grader's own, unprivileged, user). Raises KeyError when root has no kernel user."""
    if os.geteuid() != 0:
        return None
    entry = pwd.getpwnam(KERNEL_USER)
    if entry.pw_uid == 0:
        raise KeyError(f"{KERNEL_USER} is uid 0")
    return entry.pw_uid, entry.pw_gid


# -- what the kernel sees ------------------------------------------------------------------------------------
def _package_folder(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations))).resolve()
    return Path(spec.origin).resolve().parent if spec.origin else None


@lru_cache(maxsize=1)
def visible_paths() -> tuple[Path, ...]:
    """The folders and files a kernel sees read-only, besides the system and its scratch folder: the Python
    environment and the packages in :data:`KERNEL_PACKAGES`; a path inside another listed one is dropped."""
    paths = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve(), Path(sys.prefix),
             Path(sys.executable).resolve().parent.parent}
    paths |= {p for p in map(_package_folder, KERNEL_PACKAGES) if p is not None}
    paths |= {Path("/etc", name) for name in ETC if Path("/etc", name).exists()}
    system = [Path(p) for p in SYSTEM if Path(p).exists() and not Path(p).is_symlink()]
    kept = sorted(p for p in paths if p.exists() and not any(p != q and p.is_relative_to(q) for q in paths)
                  and not any(p.is_relative_to(s) for s in system))
    return tuple(kept)


def _reachable(path: Path, uid: int, gid: int) -> bool:
    """Whether ``uid`` (with only group ``gid``) can reach ``path`` through every folder above it."""
    for folder in [*reversed(path.parents), path]:
        try:
            st = os.stat(folder)
        except OSError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            continue
        shift = 6 if st.st_uid == uid else 3 if st.st_gid == gid else 0
        if not (st.st_mode >> shift) & 0o1:
            return False
    return True


def kernel_environment(workdir: Path, extra: dict | None = None) -> dict[str, str]:
    """The kernel's whole environment: an allowlist. No secret the grader holds (``GENLAB_DB``, cloud keys, CI
    tokens) is in it, whatever the grader's own environment holds."""
    workdir = str(Path(workdir).resolve())
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
           "HOME": workdir, "TMPDIR": workdir, "LANG": "C.UTF-8",
           "GENLAB_GRADER": "1",   # genlab.check only says that the grader runs the tests (no lab notebook here)
           # One thread per kernel: graders run several kernels on few cores, and oversubscribed OpenMP pools
           # make timings swing by 10x. Student and reference kernels get the same, so timing ratios stay fair.
           **{name: "1" for name in THREADS},
           # A fixed mmap threshold: every allocation of 4 MiB or more is a mapping of its own, charged to the
           # kernel's cgroup when touched and returned when freed, so the OS sees it on every call (glibc's
           # default threshold rises to the largest block freed, up to 32 MiB, after which equal blocks come
           # from a heap it keeps: invisible). The grader's memory check rests on that (autograder.wall.remote).
           "MALLOC_MMAP_THRESHOLD_": str(MMAP_THRESHOLD_BYTES),
           # And a heap that is never trimmed: smaller blocks come from the heap, which an honest function can
           # fragment into growing on every call (Lab 5's float64 extract_features: 9-11 MB over a 2.2 MB count,
           # measured, each call, because glibc gave the top back after each one). Kept, the heap grows once, in
           # the counted call before the watched ones; blocks of 4 MiB or more stay mappings of their own.
           "MALLOC_TRIM_THRESHOLD_": str(TRIM_THRESHOLD_BYTES),
           **{name: os.environ[name] for name in PASSED_ON if name in os.environ},
           **(extra or {}),
           "MPLBACKEND": "Agg", "PYDEVD_DISABLE_FILE_VALIDATION": "1", "PYTHONNOUSERSITE": "1"}
    return env


# -- starting it ---------------------------------------------------------------------------------------------
# What the probe runs as the kernel user: the packages a kernel needs are found and their files readable.
# Found, not imported: importing torch would cost the probe a second of CPU at every grading run's start.
REACHABLE = """import importlib.util
for name in ("genlab", "torch", "ipykernel"):
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin, f"{name} is not importable by the kernel user"
    open(spec.origin, "rb").close()"""


@lru_cache(maxsize=1)
def probe() -> str:
    """'' when a kernel can be sandboxed here, else why not (no bubblewrap, no kernel user, user namespaces
    refused, the Python environment out of the kernel user's reach, ...)."""
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed: apt-get install bubblewrap"
    try:
        kernel_account()
    except KeyError:
        return (f"the grader runs as root and there is no unprivileged user {KERNEL_USER!r} to run kernels as: "
                "run .ci/system-deps.sh as root (it creates it), or useradd --system --user-group "
                f"--no-create-home --shell /usr/sbin/nologin {KERNEL_USER}")
    with tempfile.TemporaryDirectory(prefix="genlab-probe-") as tmp:
        work = Path(tmp) / "k"
        work.mkdir()
        prepare_workdir(work)
        try:
            argv = launcher(SandboxConfig(), work) + [sys.executable, "-c", REACHABLE]
            run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired, RuntimeError) as exc:
            return f"bubblewrap could not start: {exc}"
    if run.returncode != 0:
        return f"bubblewrap cannot start a kernel here: {run.stderr.strip()[-300:]}"
    return ""


def require(unsafe: bool) -> bool:
    """True when grading is sandboxed; raises when it cannot be and ``unsafe`` was not given."""
    why = probe()
    if not why:
        return True
    if unsafe:
        return False
    raise SandboxUnavailable(f"refusing to grade without a sandbox: {why}. Student code could then read the "
                             "hidden tests and write the gradebook. Install bubblewrap, or pass --unsafe to "
                             "grade trusted notebooks anyway.")


def _gpu_devices() -> list[str]:
    return sorted(str(p) for p in Path("/dev").glob("nvidia*") if p.is_char_device())


def launcher(config: SandboxConfig, workdir: Path) -> list[str]:
    """The command prefix that starts the kernel inside the sandbox, in ``workdir``.

    As root: ``unshare`` gives the kernel a mount namespace of its own, where ``/bin/sh`` (still root) gives
    the scratch folder to the kernel user, binds the paths that user cannot reach under :data:`STAGE`, and
    execs ``setpriv`` to drop to that user with no capabilities and no_new_privs, which execs bubblewrap."""
    workdir = Path(workdir).resolve()
    account = kernel_account()
    bwrap = shutil.which("bwrap") or "bwrap"
    argv = [bwrap, "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--clearenv"]
    for name in SYSTEM:
        path = Path(name)
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), name]   # merged /usr: /lib -> usr/lib
        elif path.is_dir():
            argv += ["--ro-bind", name, name]
    staged: list[Path] = []     # paths the kernel user cannot reach, bound into STAGE by the root-side shell

    def bind(path: Path, writable: bool = False):
        source = path
        if account is not None and not _reachable(path, *account):
            source = STAGE / str(len(staged))
            staged.append(path)
        argv.extend(["--bind" if writable else "--ro-bind", str(source), str(path)])

    for path in visible_paths():
        bind(path)
    for path in config.hide:   # only matters where a hidden folder lies inside a visible one
        path = Path(path).resolve()
        if any(path.is_relative_to(v) for v in visible_paths()):
            argv += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    argv += ["--dev", "/dev", "--tmpfs", "/dev/shm", "--proc", "/proc"]
    for device in _gpu_devices():
        argv += ["--dev-bind", device, device]
    if _gpu_devices():
        argv += ["--ro-bind", "/sys", "/sys"]   # the CUDA driver reads the PCI topology there
    # The scratch folder is a tmpfs, not the host's disk (issue 39: sample lab1_attack_fill_scratch wrote
    # 1.88 GiB and 200,000 files there in 39 s, on a loaded 2-core machine). As root, the root-side shell mounts
    # it, in the kernel's own mount namespace (it goes with the kernel), with an inode limit too: bubblewrap's
    # --size sets the size only, and without root bubblewrap mounts it so. Its pages are memory: where the
    # kernel has a memory cgroup they are charged to it, so scratch counts against its memory limit.
    if account is not None:
        argv += ["--bind", str(STAGE / "scratch"), str(workdir)]
    else:
        argv += ["--perms", "0700", "--size", str(config.scratch_bytes), "--tmpfs", str(workdir)]
    bind(channel_folder(workdir), writable=True)   # over the tmpfs: the ZMQ sockets the grader connects to
    # The sandbox's own root (where the folders above the bound paths were made) is read-only too: the
    # scratch folder and /dev/shm are the only places a kernel writes.
    argv += ["--remount-ro", "/", "--chdir", str(workdir)]
    for name, value in kernel_environment(workdir).items():
        argv += ["--setenv", name, value]
    argv += [
        # Address space: with cgroups (autograder/wall/cgroups.py) the memory limit is the cgroup's, and this cap
        # only stops absurd single allocations; torch alone maps about 1.5 GiB it never touches.
        # Processes: RLIMIT_NPROC counts this kernel's user namespace only, and works because the kernel's
        # uid is not root outside; pids.max (cgroups) caps the same where the machine allows cgroups.
        "prlimit", f"--as={config.memory_bytes + (ADDRESS_HEADROOM if cgroups.usable() else 0)}",
        f"--fsize={config.max_file_bytes}", "--core=0", f"--nproc={config.max_processes}", "--"]
    if account is None:
        return argv
    uid, gid = account
    q = shlex.quote
    channel = q(str(channel_folder(workdir)))
    stage = "".join(f" && mkdir {STAGE / str(i)} && mount --bind {q(str(path))} {STAGE / str(i)}"
                    for i, path in enumerate(staged))
    # The channel's folder stays root's: the kernel user writes in it through its group, and the grader takes
    # that away once the kernel has made its sockets (KernelSession.start), so that no file of the kernel's can
    # be made on the host's disk after its boot. Its connection file is readable by that group.
    script = (f"chown -R 0:{gid} {channel} && chmod 770 {channel} && chmod -R g+r {channel}"
              f" && mount -t tmpfs -o mode=755,size=64k genlab-stage {STAGE}"
              f" && mkdir {STAGE / 'scratch'} && mount -t tmpfs -o mode=700,uid={uid},gid={gid},"
              f"size={config.scratch_bytes},nr_inodes={config.scratch_files} genlab-scratch {STAGE / 'scratch'}"
              + stage
              + f' && exec {shutil.which("setpriv") or "setpriv"} --reuid={uid} --regid={gid} --clear-groups '
                '--inh-caps=-all --bounding-set=-all --no-new-privs -- "$@"')
    # unshare: the staging mounts live in a mount namespace of this kernel's own, invisible to the machine.
    return [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private",
            "/bin/sh", "-c", script, "genlab-sandbox", *argv]


def channel_folder(workdir: Path) -> Path:
    """Where a kernel's channel files are (its connection file and its ZMQ sockets): a folder of the host's disk
    that both the grader and the kernel reach, bound into the kernel's scratch tmpfs."""
    return Path(workdir) / ".kernel"


def prepare_workdir(workdir: Path) -> None:
    """A kernel's folder on the host: mode 700, with its channel's folder (the launcher gives that one to the
    kernel user's group; the scratch folder the kernel sees at the same path is a tmpfs)."""
    Path(workdir).chmod(0o700)
    channel_folder(workdir).mkdir(mode=0o700, exist_ok=True)
