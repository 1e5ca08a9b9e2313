"""How the class hub holds a class: 30 learners' servers started (all at once, or ``--at-once N`` at
a time), their memory when idle, the idle culler taking them back (lesson: Instructor guide).

    python -m hvdcourse.course.hub.scale [--learners 30] [--idle-timeout 60] [--at-once N]
                                         [--record book/data/hub_scale.json]

As root. Makes ``--learners`` accounts (``hvdscale01``...) with homes in a temporary folder, starts a
hub for them on a free port (TLS, an idle timeout of ``--idle-timeout`` seconds), then
:func:`measure`: asks the hub's REST API for every server (at most ``--at-once`` starting at a
time), times until all are ready, checks that each answers through the proxy, reads each idle
server's memory, and waits for the idle culler to stop them all; then stops the hub and removes the
accounts. It fails (and writes no record) unless every server answered, the culler took them all and
no process was left. The figures, with the machine, the date and the load average, go to the record
the instructor guide reads (:func:`summary`; tests/hub/test_scale.py checks the committed one).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import pwd
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import psutil

from hvdcourse.course.hub import accounts, limits, private, server
from hvdcourse.course.hub.api import Hub
from hvdcourse.course.hub.setup import Install, State, free_port
from hvdcourse.runtime import machine, processes
from hvdcourse.runtime.errors import RunFailed, UsageError, run_cli
from hvdcourse.runtime.paths import BUILD, ROOT

DATA = os.path.join(ROOT, "book", "data", "hub_scale.json")
LEARNERS = 30
# seconds for every server of the class to be ready (in waves, on a busy machine)
START_TIMEOUT = 1200
LAST_LOG = os.path.join(BUILD, "hub-scale-last.log")  # the hub's log of the last run
# the culler's timeout for the run: a hub busy with 30 starts records the servers' activity late, and
# at 20 s (load 25-40) it culled a server that was up while the last ones were still starting
IDLE_TIMEOUT = 60


def _mb(nbytes: float) -> float:
    return round(nbytes / 2**20, 1)


def server_memory(hub: Hub, names: list, cgroups: str) -> dict:
    """Per idle learner: the resident (RSS) and unique (USS) memory of every process of their
    account (the server; no kernel is open) and what their cgroup is charged, in MiB."""
    users = hub.users()
    rss, uss, charged = [], [], []
    for name in names:
        pid = users[name]["servers"][""]["state"]["pid"]
        procs = processes.owned_by(pwd.getpwnam(name).pw_uid) or processes.by_pid([pid])
        infos = [p.memory_full_info() for p in procs]
        rss.append(sum(i.rss for i in infos))
        uss.append(sum(i.uss for i in infos))
        if cgroups != "none":
            charged.append(limits.usage(limits.groups(name, cgroups)))
    return {
        "rss_mb_median": _mb(statistics.median(rss)),
        "rss_mb_max": _mb(max(rss)),
        "uss_mb_median": _mb(statistics.median(uss)),
        "cgroup_mb_median": _mb(statistics.median(charged)) if charged else None,
        "rss_mb_all": _mb(sum(rss)),
    }


def _ask(hub: Hub, name: str) -> None:
    """Ask for ``name``'s server; a busy hub may answer after the request timed out: the wait for
    the servers sees whether it came."""
    try:
        hub.start(name, timeout=120)
    except OSError:  # (urllib's URLError and socket timeouts)
        pass


def _start_all(hub: Hub, names: list, at_once: int, pool, began: float) -> tuple:
    """Ask for the servers of ``names``, at most ``at_once`` starting at a time (a learner's server
    is asked for as soon as one that started before is ready); ``(seconds until the last was asked
    for, seconds until every one was ready)``, both from ``began``. A ready server is asked for its
    status every few seconds meanwhile, as its learner's open page would, so that the idle timeout
    does not cull the first ones while the last ones start."""
    pinged: dict = {}
    seen: set = set()
    waiting, asked = list(names), 0.0
    while time.monotonic() - began < START_TIMEOUT:
        servers = {n: u.get("servers", {}).get("") for n, u in hub.users().items() if n in names}
        ready = [n for n in names if (servers.get(n) or {}).get("ready")]
        gone = [n for n in seen if not servers.get(n)]
        seen.update(n for n in names if servers.get(n))
        if gone:
            raise RunFailed(
                f"{len(gone)} server(s) stopped before the class was up ({', '.join(gone[:5])}): "
                f"see the hub's log ({LAST_LOG} once the run has ended)"
            )
        if len(ready) == len(names):
            return asked, time.monotonic() - began
        starting = len(names) - len(waiting) - len(ready)
        batch, waiting = (
            waiting[: max(0, at_once - starting)],
            waiting[max(0, at_once - starting) :],
        )
        if batch:
            list(pool.map(_ask, [hub] * len(batch), batch))
            asked = time.monotonic() - began
        now = time.monotonic()
        due = [n for n in ready if now - pinged.get(n, 0) > 3]
        for name in due:
            pinged[name] = now
        list(pool.map(lambda n: hub.call("GET", f"/user/{n}/api/status", timeout=30), due))
        time.sleep(1)
    raise RunFailed(f"the class's servers were not all ready after {START_TIMEOUT} s")


def measure(hub: Hub, settings: dict, names: list, at_once: int = 0, say=print) -> dict:
    """Start every server of ``names`` through the REST API (at most ``at_once`` starting at a time;
    0: all at once), check them, read their memory, let the idle culler (the hub's,
    ``settings['idle_timeout']``) stop them; the figures."""
    at_once = at_once or len(names)
    load_before = machine.load_average()
    began = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        asked, all_ready = _start_all(hub, names, at_once, pool, began)
    say(
        f"[scale] {len(names)} servers asked for ({at_once} at a time) in {asked:.1f} s, "
        f"all ready in {all_ready:.1f} s"
    )
    refused = []
    for name in names:
        status, body = hub.call("GET", f"/user/{name}/api/status", timeout=30)
        if status != 200 or "kernels" not in body:
            refused.append(f"{name} ({status})")
    if refused:
        raise RunFailed(f"servers ready but not answering through the proxy: {', '.join(refused)}")
    memory = server_memory(hub, names, settings.get("cgroups", "none"))
    hub_procs = [
        p for p in server.members(settings) if p.uids().real == 0
    ]  # the hub, its proxy, the culler
    hub_rss = sum(p.memory_info().rss for p in hub_procs)
    available = psutil.virtual_memory().available
    say(
        f"[scale] idle: {memory['rss_mb_median']:.0f} MiB resident per learner (median), "
        f"{memory['uss_mb_median']:.0f} MiB of it their own; hub, proxy and culler {_mb(hub_rss):.0f} MiB"
    )
    idle_since = time.monotonic()  # the checks above were the last activity
    timeout = settings["idle_timeout"]
    deadline = idle_since + timeout + max(5, timeout // 4) + 120
    while time.monotonic() < deadline:
        running = [n for n, u in hub.users().items() if n in names and u.get("servers")]
        if not running:
            break
        time.sleep(1)
    else:
        raise RunFailed(
            f"the idle culler left {len(running)} server(s) running {deadline - idle_since:.0f} s "
            f"after their last activity (idle timeout {timeout} s): {', '.join(running[:5])}"
        )
    culled_after = time.monotonic() - idle_since
    uids = {pwd.getpwnam(n).pw_uid for n in names}
    left = [p for uid in uids for p in processes.owned_by(uid)]
    say(
        f"[scale] the idle culler stopped all {len(names)} in {culled_after:.0f} s; left: {len(left)}"
    )
    if left:
        raise RunFailed(
            f"{len(left)} process(es) of the learners outlived the culling of their servers: "
            + "; ".join(f"pid {pid} {cmd[:80]}" for pid, cmd in processes.describe(left[:5]))
        )
    return {
        **stamp(),
        "load_average_before": load_before,
        "load_average_after": machine.load_average(),
        "learners": len(names),
        "at_once": at_once,
        "spawner": settings.get("spawner", "local"),
        "cgroups": settings.get("cgroups", "none"),
        "tls": bool(settings.get("tls")),
        "start_all_s": round(all_ready, 1),
        "start_requests_s": round(asked, 1),
        **memory,
        "hub_proxy_culler_rss_mb": _mb(hub_rss),
        "available_gib_while_idle": round(available / 2**30, 1),
        "idle_timeout_s": timeout,
        "culled_all_after_s": round(culled_after, 1),
        "processes_left_after_cull": len(left),
    }


# every field of a record (:func:`measure`'s, and what :func:`run` adds): the instructor guide reads them
FIELDS = (
    "date",
    "machine",
    "load_average_before",
    "load_average_after",
    "learners",
    "at_once",
    "spawner",
    "cgroups",
    "tls",
    "start_all_s",
    "start_requests_s",
    "rss_mb_median",
    "rss_mb_max",
    "uss_mb_median",
    "cgroup_mb_median",
    "rss_mb_all",
    "hub_proxy_culler_rss_mb",
    "available_gib_while_idle",
    "idle_timeout_s",
    "culled_all_after_s",
    "processes_left_after_cull",
    "processes_left_after_hub_stop",
)


def stamp() -> dict:
    """The date and the machine a record was made on."""
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {
            "cpu": machine.cpu_model(),
            "cores": os.cpu_count(),
            "memory_gib": machine.memory_gib(),
        },
    }


def write_fields(record: dict, fields: tuple, path: str) -> None:
    """Write ``record`` to ``path`` as JSON if its fields are exactly ``fields`` (the code's)."""
    odd = sorted(set(fields) ^ set(record))
    if odd:
        raise RunFailed(f"the record's fields differ from the code's list: {', '.join(odd)}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(record, fh, indent=1)
        fh.write("\n")


def write_record(record: dict, path: str) -> None:
    """Write ``record`` (a whole run's: every field of :data:`FIELDS`, no other) to ``path``."""
    write_fields(record, FIELDS, path)


def summary(path: str = DATA) -> dict:
    """The record's figures for the instructor guide, with what 30 idle learners take in all."""
    with open(path, encoding="utf-8") as fh:
        record = json.load(fh)
    return {
        **record,
        "day": record["date"][:10],
        "load": record["load_average_before"][0],
        "loaded": record["load_average_before"][0] > record["machine"]["cores"],
        "per_learner_s": record["start_all_s"] / record["learners"],
    }


@dataclasses.dataclass
class TrialHub:
    """A running hub of :func:`temporary_hub`: its settings, learners, their homes, the roster file,
    the hub's state and the run's private folder (``base``, removed afterwards)."""

    settings: dict
    names: list
    homes: str
    roster: str
    state: State
    base: str


@contextlib.contextmanager
def temporary_hub(learners: int, idle_timeout: int, prefix: str = "hvdscale", say=print):
    """A hub of its own (TLS, on a free port) for ``learners`` new accounts ``PREFIX01``...; yields
    a :class:`TrialHub`; afterwards the hub is stopped, the accounts and their
    homes removed and the answer keys' modes put back."""
    server.require_root()
    base = tempfile.mkdtemp(prefix=f"{prefix}-")
    os.chmod(base, 0o755)
    homes, state = os.path.join(base, "homes"), State(os.path.join(base, "state"))
    os.makedirs(homes, mode=0o755)
    names = [f"{prefix}{i:02d}" for i in range(1, learners + 1)]
    clash = [n for n in names if _exists(n)]
    if clash:
        raise UsageError(
            f"the account {clash[0]} exists already: remove the last run's accounts first "
            f"(python -m hvdcourse.course.hub remove needs its state) or userdel -r {clash[0]}"
        )
    roster = os.path.join(base, "roster.csv")
    with open(roster, "w") as fh:
        fh.write("username\n" + "".join(f"{n}\n" for n in names))
    install = Install()
    saved = private.modes(private.places(ROOT, (private.kernel_package(install.kernel_python()),)))
    try:
        settings = server.start(
            roster,
            state,
            install,
            port=free_port(),
            homes=homes,
            idle_timeout=idle_timeout,
            say=say,
        )
        yield TrialHub(settings, names, homes, roster, state, base)
    finally:
        server.stop(state)
        if os.path.exists(state.log):  # kept for a failed run's diagnosis
            shutil.copyfile(state.log, LAST_LOG)
        for name in names:
            if _exists(name):
                accounts.remove(name, None)
        shutil.rmtree(base, ignore_errors=True)
        private.restore(saved)


def run(learners: int, idle_timeout: int, at_once: int = 0, say=print) -> dict:
    """A hub of its own for ``learners`` new accounts, :func:`measure`, then nothing left."""
    with temporary_hub(learners, idle_timeout, say=say) as trial:
        record = measure(Hub.of(trial.settings), trial.settings, trial.names, at_once, say)
        left = server.stop(trial.state, say=say)
        record["processes_left_after_hub_stop"] = left
        if left:
            raise RunFailed(f"{left} process(es) of the hub were left after it stopped")
        return record


def _exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hvdcourse.course.hub.scale",
        description="Start a class's servers on a hub of their own, measure, cull, record.",
    )
    parser.add_argument("--learners", type=int, default=LEARNERS, help=f"default {LEARNERS}")
    parser.add_argument(
        "--idle-timeout",
        type=int,
        default=IDLE_TIMEOUT,
        help=f"the culler's timeout in seconds (default {IDLE_TIMEOUT})",
    )
    parser.add_argument(
        "--at-once",
        type=int,
        default=0,
        help="at most this many servers starting at a time, the next asked for when one is ready "
        "(default 0: all at once)",
    )
    parser.add_argument("--record", default=None, help=f"write the figures here (e.g. {DATA})")
    args = parser.parse_args(argv)
    if not 1 <= args.learners <= 99 or args.idle_timeout < 10 or args.at_once < 0:
        raise UsageError(
            "--learners must be 1-99, --idle-timeout at least 10 s and --at-once 0 or more"
        )
    record = run(args.learners, args.idle_timeout, args.at_once)
    print(json.dumps(record, indent=1))
    if args.record:
        write_record(record, args.record)
        print(f"[scale] wrote {args.record}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
