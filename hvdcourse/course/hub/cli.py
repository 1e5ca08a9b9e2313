"""``python -m hvdcourse.course.hub``: the class hub on one machine (lesson: Instructor guide).

    python -m hvdcourse.course.hub start --roster roster.csv [--port 8000] [--memory 2G] [--cpus 1]
                                         [--procs 512] [--idle-timeout 3600] [--spawner local|slurm]
                                         [--tls-cert FILE --tls-key FILE | --no-tls]
    python -m hvdcourse.course.hub status
    python -m hvdcourse.course.hub stop
    python -m hvdcourse.course.hub remove NAME [NAME ...] (--archive DIR | --delete-home)

``make hub ROSTER=roster.csv`` installs the hub (tools/setup_hub.sh) and runs ``start``;
``make hub-stop`` runs ``stop``. Run as root.
"""

from __future__ import annotations

import argparse
import os
import sys

from hvdcourse.course.hub import limits, server
from hvdcourse.course.hub.api import Hub
from hvdcourse.course.hub.setup import PREFIX, STATE, Install, State
from hvdcourse.runtime.errors import RunFailed, UsageError, run_cli


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--state", default=STATE, help=f"the hub's state folder (default {STATE})")
    common.add_argument(
        "--prefix", default=PREFIX, help=f"where tools/setup_hub.sh installed it (default {PREFIX})"
    )
    top = argparse.ArgumentParser(
        prog="python -m hvdcourse.course.hub",
        description="JupyterHub for a class on this machine: one account per learner of the "
        "roster, each learner's server as that learner, within limits, on 127.0.0.1.",
    )
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    start = sub.add_parser("start", parents=[common], help="make the accounts, start the hub")
    start.add_argument(
        "--roster", required=True, help="CSV/TSV with a 'username' column (as hvdcourse-class)"
    )
    start.add_argument("--port", type=int, default=8000, help="the hub's port (default 8000)")
    start.add_argument(
        "--homes", default=None, help="new accounts' homes are DIR/<username> (default /home)"
    )
    start.add_argument(
        "--spawner",
        choices=("local", "slurm"),
        default="local",
        help="local: servers on this machine (default); slurm: each server is a Slurm job",
    )
    start.add_argument("--memory", default="2G", help="memory per learner (default 2G)")
    start.add_argument("--cpus", type=float, default=1.0, help="CPU cores per learner (default 1)")
    start.add_argument(
        "--procs", type=int, default=512, help="processes and threads per learner (default 512)"
    )
    start.add_argument(
        "--idle-timeout",
        type=int,
        default=3600,
        help="seconds after which an idle server is stopped (default 3600; at least 10)",
    )
    start.add_argument(
        "--tls-cert",
        default="",
        help="the site's certificate (PEM) the hub serves HTTPS with (default: a self-signed one, "
        "made once in the state folder)",
    )
    start.add_argument("--tls-key", default="", help="the key of --tls-cert (PEM)")
    start.add_argument(
        "--no-tls",
        action="store_true",
        help="plain HTTP on 127.0.0.1, only behind a reverse proxy on this machine that serves TLS",
    )
    start.add_argument(
        "--admin", action="append", default=[], help="a roster name who may administer the hub"
    )
    start.add_argument("--slurm-partition", default="", help="(slurm) the partition of the jobs")
    start.add_argument(
        "--slurm-node-address",
        default="",
        help="(slurm) the address of every node, when Slurm's node names are not host names "
        "(127.0.0.1 for the course's one-machine cluster)",
    )
    start.add_argument(
        "--slurm-hub-address",
        default="",
        help="(slurm) where the nodes reach the hub's API, e.g. the head node's cluster-network "
        "address (default 127.0.0.1: nodes on this machine)",
    )
    start.add_argument(
        "--no-slurm-mem",
        action="store_true",
        help="(slurm) ask Slurm for no memory (for nodes that declare none)",
    )
    sub.add_parser("status", parents=[common], help="the hub's address and learners' servers")
    sub.add_parser("stop", parents=[common], help="stop the hub and every learner's server")
    remove = sub.add_parser(
        "remove",
        parents=[common],
        help="(end of the course) stop a learner's server, archive or delete their home, delete "
        "their account",
    )
    remove.add_argument("names", nargs="+", metavar="NAME", help="a learner of the hub")
    home = remove.add_mutually_exclusive_group(required=True)
    home.add_argument(
        "--archive",
        metavar="DIR",
        help="keep each home as DIR/NAME-TIME.tar.gz (root only) before deleting it",
    )
    home.add_argument("--delete-home", action="store_true", help="delete each home unarchived")
    return top


def _say(line: str) -> None:
    print(line, flush=True)


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    state, install = State(args.state), Install(args.prefix)
    if args.command == "start":
        try:
            memory = limits.parse_bytes(args.memory)
        except ValueError as err:
            raise UsageError(f"--memory: {err}") from None
        if args.cpus <= 0 or args.procs < 16 or args.idle_timeout < 10:
            raise UsageError(
                "--cpus must be above 0, --procs at least 16, --idle-timeout at least 10 s"
            )
        if args.no_tls and (args.tls_cert or args.tls_key):
            raise UsageError("--no-tls and --tls-cert/--tls-key exclude each other: pick one")
        server.start(
            args.roster,
            state,
            install,
            port=args.port,
            homes=args.homes,
            spawner=args.spawner,
            memory=memory,
            cpus=args.cpus,
            procs=args.procs,
            idle_timeout=args.idle_timeout,
            admins=tuple(args.admin),
            slurm={
                "partition": args.slurm_partition,
                "node_address": args.slurm_node_address,
                "hub_address": args.slurm_hub_address,
                "ask_memory": not args.no_slurm_mem,
                "conf": os.environ.get("SLURM_CONF", ""),
            },
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            plain_http=args.no_tls,
            say=_say,
        )
        return 0
    if args.command == "status":
        settings = state.read_settings()
        pid = server.hub_pid(state)
        if not pid:
            print("[hub] not running")
            return 1
        hub = Hub.of(settings)
        print(f"[hub] running (pid {pid}): {server.url_of(settings)}")
        for name, user in sorted(hub.users().items()):
            ready = user.get("servers", {}).get("", {}).get("ready")
            print(f"  {name}: {'server running' if ready else 'no server'}")
        return 0
    server.require_root()
    if args.command == "remove":
        server.remove_learners(state, args.names, args.archive, say=_say)
        return 0
    left = server.stop(state, say=_say)
    if left:
        raise RunFailed(f"{left} process(es) of the hub could not be stopped")
    print("[hub] stopped; no process of the hub is left", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
