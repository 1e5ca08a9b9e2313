"""Start and stop the class hub (lesson: Instructor guide).

:func:`start` closes the answer keys to learners (:mod:`hvdcourse.course.hub.private`), makes the
learners' accounts from the roster (:mod:`hvdcourse.course.hub.accounts`), writes the hub's files
(:mod:`hvdcourse.course.hub.setup`), starts JupyterHub as root in the background (it starts its
proxy, the idle culler, and each learner's server as that learner) and
waits until the hub answers through the proxy, on 127.0.0.1 only. A hub already running is left as it
is. :func:`stop` stops the hub, which stops every learner's server and the proxy; whatever still
carries the hub's marker, and whatever is left in a learner's cgroup, is then ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from hvdcourse.course.classroom.roster import read_roster
from hvdcourse.course.hub import accounts, limits, private
from hvdcourse.course.hub.api import Hub
from hvdcourse.course.hub.api import url_of as _url_of
from hvdcourse.course.hub.setup import (
    Install,
    State,
    check_port,
    free_port,
    new_settings,
    tls_files,
    write_files,
    write_settings,
)
from hvdcourse.runtime import processes
from hvdcourse.runtime.errors import RunFailed, UsageError

START_TIMEOUT = 90  # seconds for the hub to answer through its proxy
STOP_TIMEOUT = 40  # seconds for the hub to stop the learners' servers and its proxy


def _tail(path: str, n: int = 4000, start: int = 0) -> str:
    """The last ``n`` characters of ``path`` after offset ``start``."""
    try:
        with open(path, errors="replace") as fh:
            fh.seek(start)
            return fh.read()[-n:]
    except OSError:
        return ""


def hub_pid(state: State) -> int | None:
    """The pid of this state's hub if it runs (its marker checked), else None."""
    settings = state.read_settings()
    try:
        with open(state.pid) as fh:
            pid = int(fh.read().strip())
    except (OSError, ValueError):
        return None
    if settings is None:
        return None
    alive = {p.pid for p in processes.with_env(settings["marker"], settings["marker_value"])}
    return pid if pid in alive else None


def url_of(settings: dict) -> str:
    return _url_of(settings)


def require_root() -> None:
    if os.geteuid() != 0:
        raise UsageError(
            "the hub runs as root: it makes the learners' accounts and starts each learner's "
            "server as that learner; run 'sudo make hub'"
        )


def start(
    roster: str,
    state: State,
    install: Install,
    port: int = 8000,
    homes: str | None = None,
    spawner: str = "local",
    memory: int = 2 * 2**30,
    cpus: float = 1.0,
    procs: int = 512,
    idle_timeout: int = 3600,
    admins: tuple = (),
    slurm: dict | None = None,
    tls_cert: str = "",
    tls_key: str = "",
    plain_http: bool = False,
    say=print,
) -> dict:
    """Start the hub (or find it running); returns its settings. ``say`` prints progress lines.
    The hub serves HTTPS with ``tls_cert`` and ``tls_key`` (neither: a self-signed pair), or plain
    HTTP with ``plain_http``, for a reverse proxy on this machine that serves TLS."""
    require_root()
    names = read_roster(roster)
    accounts.check_names(names)
    unknown = [a for a in admins if a not in names]
    if unknown:
        raise UsageError(f"--admin {unknown[0]!r} is not on the roster {roster}; add them to it")
    install.check()
    running = hub_pid(state)
    if running:
        settings = state.read_settings()
        say(f"[hub] already running (pid {running}): {url_of(settings)}")
        say("[hub] to change its settings: make hub-stop, then make hub again")
        return settings
    check_port(port, "127.0.0.1")
    state.make()
    served = {} if plain_http else tls_files(state, tls_cert, tls_key)
    closed = private.close(python=install.kernel_python())
    say(
        f"[hub] closed to learners ({len(closed)} folders): the solutions, the exercise sources, "
        "the tests, the git history and the grader's keys"
    )
    state.make()
    made = accounts.ensure(names, state.passwords, homes)
    say(
        f"[hub] {len(names)} learners: {len(made['created'])} accounts made, "
        f"{len(made['existing'])} kept; each home has lessons/ and exercises/"
    )
    if made["created"]:
        say(f"[hub] their first passwords: {state.passwords} (root only; hand them out)")
    how = limits.mode() if spawner == "local" else "none"
    wanted = limits.Limits(memory, cpus, procs)
    settings = new_settings(
        install,
        state,
        ip="127.0.0.1",
        port=port,
        learners=names,
        admins=list(admins),
        spawner=spawner,
        limits={"memory": memory, "cpus": cpus, "procs": procs},
        cgroups=how,
        idle_timeout=idle_timeout,
        slurm=slurm or {},
        tls=served,
    )
    for attempt in range(3):
        proc, log_start = _launch(install, state, settings)
        hub = Hub.of(settings)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None and not hub.version():
            time.sleep(0.5)
        if proc.poll() is None and hub.version():
            break
        log = _tail(state.log, start=log_start)
        taken = "in use" in log or "EADDRINUSE" in log
        if proc.poll() is not None and taken and attempt < 2:
            # a port taken by another program since it was chosen: new ports, once more
            stop(state)
            settings.update(hub_port=free_port(), proxy_api_port=free_port())
            continue
        stop(state)
        if proc.poll() is None:
            raise RunFailed(
                f"JupyterHub did not answer within {START_TIMEOUT} s; see its log {state.log}"
            )
        raise RunFailed(
            f"JupyterHub exited at start (code {proc.returncode}); its log {state.log} ends "
            f"with: {log[-800:]}"
        )
    say(f"[hub] JupyterHub for the class: {url_of(settings)} (127.0.0.1 only)")
    if served.get("self_signed"):
        say(
            f"[hub] TLS with a self-signed certificate ({served['cert']}): browsers ask once to "
            "accept it; --tls-cert/--tls-key serve your site's"
        )
    elif not served:
        say(
            "[hub] plain HTTP (--no-tls): only behind a reverse proxy on this machine that serves TLS"
        )
    slurm_line = "spawner: Slurm (batchspawner), limits asked of Slurm"
    say(f"[hub] {slurm_line if spawner == 'slurm' else limits.describe(wanted, how)}")
    say(
        f"[hub] idle servers are stopped after {idle_timeout} s; log: {state.log}; "
        "make hub-stop stops it"
    )
    return settings


def _launch(install: Install, state: State, settings: dict) -> tuple:
    """Write the hub's files and start JupyterHub in the background: ``(Popen, log offset)``."""
    write_files(install, state, settings)
    env = {**os.environ, settings["marker"]: settings["marker_value"]}
    env["PATH"] = os.pathsep.join([os.path.join(install.hub_venv, "bin"), "/usr/bin", "/bin"])
    for key in ("PYTHONPATH", "VIRTUAL_ENV", "JUPYTER_PATH", "JUPYTER_CONFIG_DIR"):
        env.pop(key, None)
    with open(state.log, "a") as log:
        offset = log.tell()
        proc = subprocess.Popen(
            [install.jupyterhub, "-f", state.config],
            cwd=state.folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C in the instructor's terminal does not reach it
        )
    with open(state.pid, "w") as fh:
        fh.write(f"{proc.pid}\n")
    return proc, offset


def members(settings: dict) -> list:
    """The processes of this hub still running (hub, proxy, culler, learners' servers, kernels)."""
    return processes.with_env(settings["marker"], settings["marker_value"])


def stop(state: State, say=lambda line: None) -> int:
    """Stop the hub of ``state`` and everything it started; idempotent. Returns how many processes
    could not be ended (normally 0)."""
    settings = state.read_settings()
    if settings is None:
        say(f"[hub] no hub was started from {state.folder}: nothing to stop")
        return 0
    pid = hub_pid(state)
    if pid:
        say(f"[hub] stopping the hub (pid {pid}), its proxy and the learners' servers ...")
        os.kill(pid, signal.SIGTERM)
        if processes.wait_gone(processes.by_pid([pid]), STOP_TIMEOUT):
            processes.end(processes.by_pid([pid]), grace=5, groups=[pid])
    left = processes.wait_gone(members(settings), 5)
    processes.end(left, grace=5)
    processes.end_all(lambda: members(settings))
    how = settings.get("cgroups", "none")
    for name in settings.get("learners", []):
        limits.release(limits.groups(name, how))
    limits.remove_parents(how)
    if os.path.exists(state.pid):
        os.remove(state.pid)
    return len(members(settings))


def remove_learners(state: State, names: list, archive: str | None, say=lambda line: None) -> list:
    """Take learners of this hub away at the end of the course: stop their server and forget them
    (when the hub runs), end what they still run, archive their home into ``archive`` or delete it
    (None), delete their account, and drop them from the hub's settings and first passwords.
    Returns ``[(name, archive file or None)]``."""
    require_root()
    settings = state.read_settings()
    if settings is None:
        raise UsageError(
            f"no hub was started from {state.folder}: --state names the hub's state folder"
        )
    strangers = [n for n in names if n not in settings.get("learners", [])]
    if strangers:
        raise UsageError(
            f"{strangers[0]!r} is not a learner of the hub in {state.folder} (its roster has "
            f"{len(settings.get('learners', []))} names): only the hub's learners are removed here"
        )
    hub = Hub.of(settings) if hub_pid(state) else None
    done = []
    for name in names:
        if hub is not None and name in hub.users():
            hub.stop(name)
            hub.wait_stopped([name], timeout=STOP_TIMEOUT)
            hub.delete_user(name)
        how = settings.get("cgroups", "none")
        limits.release(limits.groups(name, how))
        outcome = accounts.remove(name, archive)
        settings["learners"] = [n for n in settings["learners"] if n != name]
        settings["admins"] = [n for n in settings.get("admins", []) if n != name]
        write_settings(state, settings)
        accounts.forget_password(state.passwords, name)
        kept = f"home archived to {outcome['archive']}" if archive else "home deleted"
        say(f"[hub] {name} removed: server stopped, {kept}, account deleted")
        done.append((name, outcome["archive"]))
    say(
        "[hub] take them off the roster too: a later 'make hub' with them on it makes new, "
        "empty accounts"
    )
    return done
