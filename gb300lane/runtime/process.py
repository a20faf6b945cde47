"""The process runtime: each container is a local subprocess with a record in the state directory.

A record (`<state>/runtime/process/<name>.json`, written atomically) holds the
argv, env, labels, pid and log file, so a later CLI invocation can report,
stop or restart what an earlier one started. A stopped container keeps its
record and log ("kept"), exactly like a stopped Docker container.

Bind mounts (`source:target`) have no namespace to live in: an env value
naming a path under a target is handed to the process as the path under the
source, and `host_path` maps the same way, so a recipe whose cache root is a
mounted host directory uses that directory on either runtime.

Process facts come from psutil, so the runtime works wherever psutil does.
Liveness is decided honestly and survives the wall clock: a pid counts as ours
only while its start in clock ticks since boot (`/proc/<pid>/stat` field 22,
on the same boot) is the one recorded, since pids get reused; a wall-clock step
(NTP, a resume, `date -s`) moves psutil's `create_time()` but never the ticks.
A record with only a wall-clock start (written before ticks were, or on a
system without `/proc`) is ambiguous once the clock may have moved: the
process's command line decides, so a process still running what was started is
never declared dead. A zombie counts as exited.
Stopping signals the session's process group and every descendant psutil can
see (a child that left the group is not orphaned).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal

from pydantic import Field, ValidationError

from gb300lane import paths
from gb300lane.errors import BootError, StateError, StorageError
from gb300lane.fsio import atomic_write, dumps_json
from gb300lane.models import FrozenModel
from gb300lane.redact import DIGEST_PREFIX, digest, redact, redact_argv
from gb300lane.runtime.base import ContainerInfo, Runtime, SpecLike, label_filter, tail_lines

if TYPE_CHECKING:  # psutil loads when a process is looked at: `status` with no process instance never does
    import psutil

#: Names passed through from the invoking environment: the process runtime's
#: equivalent of an image's default env (PATH and friends). Everything else
#: comes from the recipe, so the env check compares like with like.
BASE_ENV_NAMES = (
    "PATH", "HOME", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    "VIRTUAL_ENV", "PYTHONPATH", "VLLM_CACHE_ROOT", "XDG_CACHE_HOME",
)  # fmt: skip


def _mounts(volumes: Sequence[str] | None) -> list[tuple[PurePosixPath, str]]:
    """(target, host source) of each bind mount, most specific target first; named volumes have no host path."""
    out = []
    for vol in volumes or ():
        parts = vol.split(":")
        if len(parts) >= 2 and parts[0].startswith("/"):
            out.append((PurePosixPath(parts[1]), parts[0]))
    return sorted(out, key=lambda m: len(m[0].parts), reverse=True)


def mounted_path(volumes: Sequence[str] | None, container_path: str) -> str | None:
    """The host path a bind mount gives `container_path`, None when no mount covers it."""
    if not container_path.startswith("/"):
        return None
    path = PurePosixPath(container_path)
    for target, source in _mounts(volumes):
        if path == target or target in path.parents:
            return str(PurePosixPath(source) / path.relative_to(target))
    return None


def mounted_env(env: Mapping[str, str], volumes: Sequence[str] | None) -> dict[str, str]:
    """The spec's env as a plain process must see it: a value naming a path under a volume target names the host source.

    A process has no mount namespace, so a bind mount `src:/cache/vllm` can only
    mean that `/cache/vllm/...` is `src/...` on the host; an env value is the
    one place a recipe hands such a path to the process (VLLM_CACHE_ROOT). The
    boot checks expect this mapped env, so the env check stays exact.
    """
    return {str(k): mounted_path(volumes, str(v)) or str(v) for k, v in env.items()}


def _mounted_json(value: object, volumes: Sequence[str] | None) -> object:
    if isinstance(value, str):
        return mounted_path(volumes, value) or value
    if isinstance(value, list):
        return [_mounted_json(v, volumes) for v in value]
    if isinstance(value, dict):
        return {k: _mounted_json(v, volumes) for k, v in value.items()}
    return value


def mounted_argv(argv: Sequence[str], volumes: Sequence[str] | None) -> list[str]:
    """The spec's args as a plain process must see them: a path under a volume target names the host source.

    The same rule as `mounted_env`, for the model a recipe mounts (`/models/...`): an argument that is such a
    path, or a JSON object argument (`--speculative-config`, whose `model` names the draft) holding one, is
    rewritten; everything else is passed as it is. JSON is written back with sorted keys and no spaces, as
    `recipes.compact_json` renders it, so the flag checks still compare byte for byte.
    """
    out = []
    for arg in argv:
        if arg.startswith("{") and arg.endswith("}"):
            try:
                parsed = json.loads(arg)
            except ValueError:
                out.append(arg)
                continue
            mapped = _mounted_json(parsed, volumes)
            out.append(
                arg
                if mapped == parsed
                else json.dumps(mapped, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            )
        else:
            out.append(mounted_path(volumes, arg) or arg)
    return out


# Children started by this interpreter, kept so they are reaped (no zombies)
# and their exit status is known; a later invocation sees only the record.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}
# The env this interpreter created each container with (record path -> env), in memory only: a start in the same
# process needs no secret handed back; a later invocation gets them from the recipe (`start(secrets=...)`).
_CREATED_ENV: dict[str, dict[str, str]] = {}
# Likewise the argv in clear (a secret flag value, `--api-key`, is recorded as its digest).
_CREATED_ARGV: dict[str, list[str]] = {}


class ProcessRecord(FrozenModel):
    """One process-runtime container as recorded on disk."""

    schema_version: Literal[1] = Field(default=1, description="Record format version.")
    name: str = Field(description="Container name.")
    argv: tuple[str, ...] = Field(description="Command line run, program first (python3 resolved).")
    env: dict[str, str] = Field(description="The full environment the process is given.")
    base_env: dict[str, str] = Field(description="The part of `env` passed through from the creating shell.")
    labels: dict[str, str] = Field(description="Labels from the spec.")
    image: str = Field(default="", description="The spec's image, kept for reference only.")
    cwd: str = Field(description="Working directory of the process.")
    log_path: str = Field(description="File receiving stdout and stderr.")
    state: Literal["created", "running", "exited"] = Field(description="Last known state.")
    pid: int | None = Field(default=None, description="Pid while running.")
    pid_created: float | None = Field(
        default=None, description="The pid's creation time (psutil, seconds since the epoch): guards pid reuse."
    )
    pid_start_ticks: int | None = Field(
        default=None,
        description="The pid's start in clock ticks since boot (/proc/<pid>/stat field 22): what identifies the "
        "process, since no wall-clock step moves it; None where the system has no /proc.",
    )
    pid_boot_id: str | None = Field(
        default=None, description="The boot the ticks count from (/proc/sys/kernel/random/boot_id)."
    )
    started_at: float | None = Field(default=None, description="Unix time of the last start.")
    starting_since: float | None = Field(
        default=None,
        description="Set (Unix time) just before a start's process is made, cleared once its pid is recorded: a "
        "record killed in between still finds its process (the session leader writing its log) and owns it.",
    )
    exit_code: int | None = Field(default=None, description="Exit status when it was observed.")
    starts: tuple[tuple[float, int], ...] = Field(default=(), description="(start time, log offset) per start.")
    detail: str = Field(default="", description="Why the state is what it is.")


#: Two creation times closer than this are the same process (psutil derives them from clock ticks).
_SAME_START_S = 0.05


def start_ticks(pid: int) -> int | None:
    """The start of `pid` in clock ticks since boot (/proc/<pid>/stat field 22); None without /proc or the pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        # The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
        return int(stat[stat.rindex(")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def boot_id() -> str | None:
    """This boot's id (ticks count from it); None where the system does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


class Identity(FrozenModel):
    """What says a pid is still the process a record started: ticks (exact), else the wall-clock start and argv."""

    pid: int = Field(description="The pid.")
    ticks: int | None = Field(default=None, description="Start in clock ticks since boot.")
    boot: str | None = Field(default=None, description="The boot the ticks count from.")
    created: float | None = Field(default=None, description="psutil's create_time() when recorded (wall clock).")
    argv: tuple[str, ...] | None = Field(default=None, description="The command line started.")


def identity_of(rec: ProcessRecord) -> Identity | None:
    if rec.pid is None:
        return None
    return Identity(
        pid=rec.pid, ticks=rec.pid_start_ticks, boot=rec.pid_boot_id, created=rec.pid_created, argv=rec.argv
    )


def same_process(proc: psutil.Process, ident: Identity) -> bool:
    """True when `proc` is the process `ident` recorded: by ticks where both sides have them (a clock step
    cannot move them), else by the wall-clock start, and where that differs (a clock step or a later process)
    by the command line: the process is never declared dead while it runs what was started."""
    if ident.ticks is not None:
        now_boot = boot_id()
        if ident.boot is not None and now_boot is not None and ident.boot != now_boot:
            return False  # the machine rebooted since: nothing recorded before runs any more
        ticks = start_ticks(proc.pid)
        if ticks is not None:
            return ticks == ident.ticks
    if ident.created is None or abs(proc.create_time() - ident.created) <= _SAME_START_S:
        return True
    if ident.argv is None:
        return False
    cmdline = tuple(proc.cmdline())
    return cmdline == tuple(ident.argv) or tuple(redact_argv(cmdline)) == tuple(ident.argv)


def _live(pid: int, ident: Identity | None = None) -> psutil.Process | None:
    """The running process `pid` (the one `ident` recorded, when given); None when it is gone, a zombie or a later
    process given the same pid."""
    import psutil

    try:
        proc = psutil.Process(pid)
        if ident is not None and not same_process(proc, ident):
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.NoSuchProcess:  # ZombieProcess included
        return None
    except psutil.AccessDenied:
        return None  # another user's process: not one this runtime started
    return proc


def _log_writer(log: Path) -> psutil.Process | None:
    """The live session leader whose stdout is `log` (how a start this runtime began is found without its pid)."""
    leaders = [p for p in _log_writers(log) if _leads_session(p.pid)]
    return leaders[0] if leaders else None


def _leads_session(pid: int) -> bool:
    try:
        return os.getsid(pid) == pid  # start_new_session: the engine leads its own session; its children do not
    except OSError:
        return False


def _log_writers(log: Path) -> list[psutil.Process]:
    """Every live process whose stdout is `log`: the container's process and whatever it started that kept its
    stdout, even one that left its session and whose parent exited (no longer a descendant)."""
    import psutil

    target = os.path.realpath(log)
    found = []
    for proc in psutil.process_iter():
        try:
            try:
                stdout = os.readlink(f"/proc/{proc.pid}/fd/1")
            except OSError:
                stdout = next((f.path for f in proc.open_files() if f.fd == 1), "")
            if stdout == target and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (OSError, psutil.Error):
            continue
    return found


def _gone(proc: psutil.Process) -> bool:
    import psutil

    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        return False


class ProcessRuntime(Runtime):
    """Containers as local subprocesses (`start_new_session`, so Ctrl-C never reaches them)."""

    name = "process"

    def __init__(self, root: Path | None = None) -> None:
        self._root = root

    @property
    def root(self) -> Path:
        return self._root or paths.state_dir() / "runtime" / "process"

    def _record_path(self, name: str) -> Path:
        return self.root / f"{name}.json"

    def _load(self, name: str) -> ProcessRecord | None:
        path = self._record_path(name)
        try:
            return ProcessRecord.model_validate_json(path.read_text())
        except FileNotFoundError:
            return None
        except (ValidationError, ValueError, OSError) as exc:
            raise StateError(
                f"{path}: unreadable process record ({exc.__class__.__name__}); the process it started may still "
                f"be running and serving its port (`gb300lane status` names what holds the lane's ports): restore "
                f"the file from a backup, or stop that process first and only then move the file aside to forget "
                f"container {name}"
            ) from exc

    def _save(self, rec: ProcessRecord) -> ProcessRecord:
        atomic_write(self._record_path(rec.name), dumps_json(rec.model_dump(mode="json")))
        return rec

    def base_env(self, name: str | None = None) -> dict[str, str]:
        rec = self._load(name) if name else None
        if rec is not None:
            return dict(rec.base_env)
        return {k: os.environ[k] for k in BASE_ENV_NAMES if k in os.environ}

    def image_env(self, image: str) -> dict[str, str]:
        return {}

    def image_present(self, image: str) -> bool | None:
        return None

    def host_path(self, spec: SpecLike, container_path: str) -> Path | None:
        """Through the spec's bind mounts when one covers the path; otherwise the path is the host's own."""
        return Path(mounted_path(spec.volumes, container_path) or container_path)

    def create(self, spec: SpecLike) -> ContainerInfo:
        existing = self._load(spec.name)
        if existing is not None:
            raise BootError(
                f"process container {spec.name} already exists ({self._record_path(spec.name)}); "
                f"remove it first with `gb300lane down`"
            )
        argv = mounted_argv(spec.argv, spec.volumes)
        if argv and argv[0] in ("python3", "python"):
            argv[0] = sys.executable
        base = self.base_env()
        env = dict(base)
        env.update(mounted_env(dict(spec.env), spec.volumes))
        if spec.device_ids:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in spec.device_ids)
        self.root.mkdir(parents=True, exist_ok=True)
        # A secret (by name or by value) is recorded as its keyed digest, never in clear: `start` is handed the
        # value again (from the recipe) and checks it against the digest.
        rec = ProcessRecord(
            name=spec.name,
            argv=tuple(redact_argv(argv)),
            env={k: redact(k, v) for k, v in env.items()},
            base_env={k: redact(k, v) for k, v in base.items()},
            labels=dict(spec.labels),
            image=spec.image or "",
            cwd=str(self.root),
            log_path=str(self.root / f"{spec.name}.log"),
            state="created",
        )
        self._save(rec)
        _CREATED_ENV[str(self._record_path(spec.name))] = env
        _CREATED_ARGV[str(self._record_path(spec.name))] = list(argv)
        return self._info(rec)

    def start(self, name: str, *, secrets: Mapping[str, str] | None = None) -> ContainerInfo:
        rec = self._require(name)
        current = self._refresh(rec)
        if current.state == "running":
            return self._info(current)
        env = self._with_secrets(rec, {**(secrets or {}), **_CREATED_ENV.get(str(self._record_path(name)), {})})
        argv = self._argv_with_secrets(rec, secrets or {})
        log_path = Path(rec.log_path)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        offset = log_path.stat().st_size if log_path.exists() else 0
        before = rec
        # Recorded before the process exists: a kill at any instant after leaves a record that finds it.
        began = time.time()
        rec = self._save(rec.model_copy(update={"starting_since": began, "starts": (*rec.starts, (began, offset))}))
        with open(log_path, "ab") as log:
            try:
                proc = subprocess.Popen(
                    argv,
                    env=env,
                    cwd=rec.cwd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                self._save(before)
                raise BootError(f"{name}: cannot start {rec.argv[0]!r}: {exc}; check the recipe's argv") from exc
        _CHILDREN[proc.pid] = proc
        live = _live(proc.pid)
        rec = self._save(self._running(rec, proc.pid, live, began))
        return self._info(rec)

    @staticmethod
    def _running(rec: ProcessRecord, pid: int, live: psutil.Process | None, began: float) -> ProcessRecord:
        ticks = start_ticks(pid)
        return rec.model_copy(
            update={
                "state": "running",
                "pid": pid,
                "pid_created": live.create_time() if live else None,
                "pid_start_ticks": ticks,
                "pid_boot_id": boot_id() if ticks is not None else None,
                "started_at": began,
                "starting_since": None,
                "exit_code": None,
                "detail": "",
            }
        )

    def _adopt(self, rec: ProcessRecord) -> ProcessRecord:
        """A record whose start was begun but whose pid was never recorded (the starter was killed in between):
        the process found (the session leader whose stdout is this record's log) becomes the record's."""
        if rec.state == "running" or rec.starting_since is None:
            return rec
        proc = _log_writer(Path(rec.log_path))
        if proc is None:
            return rec
        try:
            return self._save(self._running(rec, proc.pid, proc, rec.starting_since))
        except StorageError:
            return self._running(rec, proc.pid, proc, rec.starting_since)

    def start_problem(self, name: str, *, secrets: Mapping[str, str] | None = None) -> str | None:
        rec = self._load(name)
        if rec is None:
            return None
        try:
            self._with_secrets(rec, {**(secrets or {}), **_CREATED_ENV.get(str(self._record_path(name)), {})})
            self._argv_with_secrets(rec, secrets or {})
        except BootError as exc:
            return str(exc)
        return None

    def _with_secrets(self, rec: ProcessRecord, given: Mapping[str, str]) -> dict[str, str]:
        """The environment to start with: the record's, each secret digest replaced by the value it digests.

        `given` holds the values this process created the record with (exact: mounted paths already mapped)
        over the ones handed in again from the recipe (for a record an earlier process made).
        """
        env = dict(rec.env)
        for key, stored in rec.env.items():
            if not stored.startswith(DIGEST_PREFIX):
                continue
            value = given.get(key) if key in given else os.environ.get(key) if key in rec.base_env else None
            if value is None:
                raise BootError(
                    f"{rec.name}: {self._record_path(rec.name)} keeps {key} only as a keyed digest (secrets are never "
                    f"stored in clear); start it with `gb300lane`, which reads the value from the recipe again"
                )
            if digest(value) != stored:
                raise BootError(
                    f"{rec.name}: {key} is not the value it was created with (its digest differs: the recipe or the "
                    f"shell changed it since); boot it again with `gb300lane up` to use the new value"
                )
            env[key] = value
        return env

    def _argv_with_secrets(self, rec: ProcessRecord, given: Mapping[str, str]) -> list[str]:
        """The argv to start: each arg recorded as a keyed digest is the value given (any key) whose digest it is."""
        created = _CREATED_ARGV.get(str(self._record_path(rec.name)))
        if created is not None and len(created) == len(rec.argv):
            return list(created)
        values = {v for v in given.values() if isinstance(v, str)}
        values |= {v.partition("=")[2] for v in values if v.startswith("--") and "=" in v}
        pool = {digest(v): v for v in values if v and not v.startswith(DIGEST_PREFIX)}
        out = []
        for arg in rec.argv:
            flag, eq, stored = arg.partition("=") if arg.startswith("--") else ("", "", arg)
            if not stored.startswith(DIGEST_PREFIX):
                out.append(arg)
                continue
            value = pool.get(stored)
            if value is None:
                raise BootError(
                    f"{rec.name}: {self._record_path(rec.name)} keeps an argument{' of ' + flag if flag else ''} only as "
                    f"a keyed digest (secrets are never stored in clear) and the recipe no longer gives a value with "
                    f"that digest; boot it again with `gb300lane up` to use the recipe's value"
                )
            out.append(f"{flag}={value}" if eq else value)
        return out

    def stop(self, name: str, *, timeout_s: float = 10.0) -> ContainerInfo:
        rec = self._refresh(self._require(name))
        if rec.state != "running" or rec.pid is None:
            return self._info(rec)
        code = self._terminate(rec.pid, identity_of(rec), timeout_s, log=Path(rec.log_path))
        rec = rec.model_copy(
            update={"state": "exited", "exit_code": code, "pid": None, "detail": "stopped by gb300lane"}
        )
        self._save(rec)
        return self._info(rec)

    def _terminate(self, pid: int, ident: Identity | None, timeout_s: float, *, log: Path | None = None) -> int | None:
        """SIGTERM the process group and every descendant, SIGKILL after the timeout; the exit status when observable."""
        import psutil

        leader = _live(pid, ident)
        tree: list[psutil.Process] = []
        if leader is not None:
            try:
                tree = leader.children(recursive=True)
            except psutil.Error:
                tree = []
        if leader is not None and log is not None:
            # What left the tree and the group (a setsid child whose parent exited) still writes the log.
            seen = {pid, *(p.pid for p in tree)}
            tree.extend(p for p in _log_writers(log) if p.pid not in seen)
        # A group outlives its leader, and its id is not given to a new process while it does: signal it unless
        # the pid now names a later process.
        group = leader is not None or not psutil.pid_exists(pid)
        for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 5.0)):
            if group:
                try:
                    os.killpg(pid, sig)  # start_new_session: the group id is the leader's pid
                except (ProcessLookupError, PermissionError):
                    pass
            for proc in tree:
                try:
                    proc.send_signal(sig)  # psutil checks it is still the same process
                except psutil.Error:
                    pass
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if not self._alive(pid, ident) and all(_gone(p) for p in tree):
                    break
                time.sleep(0.02)
            else:
                continue
            break
        child = _CHILDREN.pop(pid, None)
        if child is not None:
            try:
                return child.wait(timeout=5)
            except subprocess.TimeoutExpired:
                return None
        return None

    def _alive(self, pid: int, ident: Identity | None) -> bool:
        child = _CHILDREN.get(pid)
        if child is not None:
            return child.poll() is None
        return _live(pid, ident) is not None

    def remove(self, name: str) -> None:
        rec = self._load(name)
        if rec is None:
            return
        self.stop(name)
        import psutil

        # A process the container started that outlived it (its own session, its parent gone) and still writes the
        # log is the container's too: it ends before the record that finds it goes.
        stray = _log_writers(Path(rec.log_path))
        for proc in stray:
            try:
                proc.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(stray, timeout=5)
        self._record_path(name).unlink(missing_ok=True)
        Path(rec.log_path).unlink(missing_ok=True)

    def inspect(self, name: str) -> ContainerInfo:
        rec = self._load(name)
        if rec is None:
            return ContainerInfo(name=name, runtime=self.name, state="missing")
        return self._info(self._refresh(rec))

    def _require(self, name: str) -> ProcessRecord:
        rec = self._load(name)
        if rec is None:
            raise StateError(f"no process container named {name} under {self.root}; see `gb300lane status`")
        return rec

    def _refresh(self, rec: ProcessRecord) -> ProcessRecord:
        """Reconcile a `running` record with the kernel; save the change if it died."""
        rec = self._adopt(rec)
        if rec.state != "running" or rec.pid is None:
            return rec
        child = _CHILDREN.get(rec.pid)
        code: int | None = None
        if child is not None:
            code = child.poll()
            gone = code is not None
            if gone:
                _CHILDREN.pop(rec.pid, None)
        else:
            gone = _live(rec.pid, identity_of(rec)) is None
        if not gone:
            return rec
        detail = (
            f"exited with status {code}"
            if code is not None
            else f"pid {rec.pid} is gone (exited while no gb300lane command was watching; status unknown)"
        )
        rec = rec.model_copy(update={"state": "exited", "exit_code": code, "pid": None, "detail": detail})
        try:
            return self._save(rec)
        except StorageError:
            return rec  # a read (status) on a full or read-only disk still reports; the record catches up later

    def _info(self, rec: ProcessRecord) -> ContainerInfo:
        import psutil

        argv, env = rec.argv, rec.env
        if rec.state == "running" and rec.pid is not None:
            # The kernel's view is the evidence; the record is only the fallback.
            proc = _live(rec.pid, identity_of(rec))
            if proc is not None:
                try:
                    with proc.oneshot():
                        live_argv, live_env = proc.cmdline(), proc.environ()
                except psutil.Error:
                    pass  # exited meanwhile, or a platform that hides the environment: keep the record's
                else:
                    if live_argv:
                        argv = tuple(live_argv)
                    env = dict(live_env)
        return ContainerInfo(
            name=rec.name,
            runtime=self.name,
            state=rec.state,
            argv=tuple(argv),
            env=dict(env),
            labels=dict(rec.labels),
            image=rec.image,
            pid=rec.pid,
            exit_code=rec.exit_code,
            started_at=rec.started_at,
            detail=rec.detail,
        )

    def logs(self, name: str, *, tail: int | None = None, since: float | None = None) -> str:
        # The log file has no per-line times: `since` selects from the first start at or after it.
        rec = self._require(name)
        offset = 0
        if since is not None:
            for start_time, start_offset in rec.starts:
                if start_time >= since - 1e-6:
                    offset = start_offset
                    break
            else:
                offset = rec.starts[-1][1] if rec.starts else 0
        try:
            with open(rec.log_path, "rb") as fh:
                fh.seek(offset)
                text = fh.read().decode("utf-8", "replace")
        except FileNotFoundError:
            text = ""
        return tail_lines(text, tail)

    def follow(self, name: str, *, tail: int | None = None) -> Iterator[str]:
        rec = self._require(name)
        with open(rec.log_path, "rb") as fh:
            if tail is not None:
                yield from self.logs(name, tail=tail).splitlines()
                fh.seek(0, os.SEEK_END)
            buf = b""
            while True:
                chunk = fh.readline()
                if chunk:
                    buf += chunk
                    if buf.endswith(b"\n"):
                        yield buf.decode("utf-8", "replace").rstrip("\n")
                        buf = b""
                    continue
                if self.inspect(name).state != "running":
                    if buf:
                        yield buf.decode("utf-8", "replace")
                    return
                time.sleep(0.1)

    def list(self, labels: Mapping[str, str] | None = None) -> list[ContainerInfo]:
        if not self.root.is_dir():
            return []
        out = []
        for path in sorted(self.root.glob("*.json")):
            rec = self._load(path.stem)
            if rec is not None and label_filter(rec.labels, labels):
                out.append(self._info(self._refresh(rec)))
        return out
