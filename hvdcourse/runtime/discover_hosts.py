"""Host discovery for Horovod Elastic (lesson: Faults, hangs and elastic training).

``horovodrun --host-discovery-script CMD`` runs ``CMD`` about once a second; CMD prints one
``host:slots`` line per host that may run workers now. On a cluster the script would ask the
scheduler or the cloud API; here it reads a small text file that a person, a test or a notebook
edits while training runs::

    horovodrun -np 2 --min-np 1 --max-np 2 --network-interface lo \\
        --host-discovery-script "python -m hvdcourse.runtime.discover_hosts --hosts-file hosts.txt" \\
        python -m hvdcourse.examples.train_elastic

with ``hosts.txt`` holding ``localhost:2``; writing ``localhost:1`` into it takes a slot away (one
worker is told to leave, the other carries on). One machine can also appear under two names
(``localhost:1`` and ``127.0.0.1:1``): Horovod treats them as two hosts, so when the worker on one
"host" is killed, that host is blacklisted and training goes on on the other.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

LINE = re.compile(r"^(?P<host>[A-Za-z0-9_.\-]+):(?P<slots>\d+)$")


class HostsFileError(ValueError):
    """The hosts file is missing or has a malformed line; the message says which."""


def parse_hosts(text: str, origin: str = "hosts file") -> list:
    """``[(host, slots), ...]`` from ``host:slots`` lines (blank lines and ``#`` comments ignored)."""
    hosts = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = LINE.match(line)
        if not match or int(match["slots"]) < 1:
            raise HostsFileError(
                f"{origin}, line {number}: {raw.strip()!r} is not 'host:slots' "
                "with slots >= 1 (example: localhost:2)"
            )
        hosts.append((match["host"], int(match["slots"])))
    return hosts


def read_hosts(path: str) -> list:
    """Parse the hosts file at ``path``."""
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError as err:
        raise HostsFileError(
            f"cannot read hosts file {path!r} ({err.strerror}); create it with one "
            "'host:slots' line per host, e.g. 'localhost:2'"
        ) from None
    return parse_hosts(text, origin=path)


def write_hosts(path: str, hosts: list) -> None:
    """Replace the hosts file atomically (the discovery command never sees half a file)."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write("".join(f"{host}:{slots}\n" for host, slots in hosts))
    os.replace(tmp, path)


def discovery_command(hosts_file: str, python: str | None = None) -> str:
    """The shell command to pass to ``horovodrun --host-discovery-script``."""
    import shlex

    return " ".join(
        shlex.quote(p)
        for p in [
            python or sys.executable,
            "-m",
            "hvdcourse.runtime.discover_hosts",
            "--hosts-file",
            os.path.abspath(hosts_file),
        ]
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hvdcourse.runtime.discover_hosts",
        description="Print the hosts available to Horovod Elastic, one "
        "'host:slots' line each, from a hosts file.",
    )
    parser.add_argument("--hosts-file", required=True, help="text file with 'host:slots' lines")
    args = parser.parse_args(argv)
    try:
        hosts = read_hosts(args.hosts_file)
    except HostsFileError as err:
        print(f"discover_hosts: error: {err}", file=sys.stderr)
        return 1
    for host, slots in hosts:
        print(f"{host}:{slots}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
