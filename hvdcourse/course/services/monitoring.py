"""Prometheus and its node exporter on this machine, for one lesson's run (lesson: Watch a training run: Prometheus and a straggler).

:class:`Prometheus` starts the two programs themselves (not their system services): each on a free
port of 127.0.0.1, Prometheus with a configuration and a storage folder of its own in a temporary
folder and a short scrape interval, scraping the node exporter (this machine's CPU, memory, load, network)
and the training ranks' metrics (``--metrics-port``, :mod:`hvdcourse.examples.live_metrics`).
Leaving the ``with`` block stops both and removes the folder::

    with Prometheus(rank_ports=[18400, 18401]) as prom:
        ...  # train with --metrics-port 18400
        frame = prom.query_range('rate(hvdcourse_images_total[5s])', start, end)

Queries go through Prometheus' HTTP API (``/api/v1/query_range``) and come back as pandas frames.
On Debian 12 the programs are the packages ``prometheus`` (2.42) and ``prometheus-node-exporter`` (1.5).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

from hvdcourse.runtime import processes
from hvdcourse.runtime.errors import CourseError, MissingToolError
from hvdcourse.runtime.ports import free_port, port_free

# the program's name in Debian's package first, then upstream's
PROMETHEUS = ("prometheus",)
NODE_EXPORTER = ("prometheus-node-exporter", "node_exporter")
# the node exporter's collectors the lesson reads (all others off: less work on a small machine);
# netdev: each network interface's bytes and packets (node_network_receive_bytes_total{device=...})
NODE_COLLECTORS = ("cpu", "loadavg", "meminfo", "netdev")


class MonitoringError(CourseError, RuntimeError):
    """Prometheus or the node exporter did not start, or a query failed."""


def find_program(names: tuple, package: str) -> str:
    """The path of the first of ``names`` on PATH; :class:`MissingToolError` (one line) if none is."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise MissingToolError(
        f"'{names[0]}' is not installed (not on PATH): install the Debian package {package} "
        f"(sudo apt-get install {package}; 'make env' does it as root)"
    )


# The ranks' metrics ports: BASE + local rank, from METRICS_PORT_BASE (the playbook's
# lab_metrics_port_base is the same). Not in 9100-9999, the range Prometheus' project hands out to
# exporters (all taken; 9400 is NVIDIA's dcgm-exporter, on most GPU nodes), nor above 9999, where
# new exporters now go; below 20000, where the course's hub and Slurm services pick theirs; and far
# below Linux's ephemeral range (32768-60999), where the kernel picks client ports.
METRICS_PORT_BASE = 18400


def free_port_block(count: int, first: int = METRICS_PORT_BASE, last: int = 18999) -> list:
    """``count`` consecutive free TCP ports between ``first`` and ``last``, e.g. for ``--metrics-port``
    (each rank of a node takes BASE + its local rank). The search starts at a place that depends on
    this process, so that two sessions on one machine rarely try the same ports."""
    span = last - first + 1 - count
    offset = os.getpid() % max(1, span)
    for i in range(span + 1):
        base = first + (offset + i) % (span + 1)
        if all(port_free(p) for p in range(base, base + count)):
            return list(range(base, base + count))
    raise MonitoringError(f"no {count} consecutive free TCP ports between {first} and {last}")


def config_text(rank_ports=(), node_port: int | None = None, interval: str = "1s") -> str:
    """Prometheus' configuration (YAML; JSON is YAML): a job ``ranks`` scraping the ranks' ports
    and a job ``node`` scraping the node exporter, every ``interval``."""
    jobs = []
    if rank_ports:
        targets = [f"127.0.0.1:{port}" for port in rank_ports]
        jobs.append({"job_name": "ranks", "static_configs": [{"targets": targets}]})
    if node_port is not None:
        jobs.append(
            {"job_name": "node", "static_configs": [{"targets": [f"127.0.0.1:{node_port}"]}]}
        )
    config = {
        "global": {"scrape_interval": interval, "scrape_timeout": interval},
        "scrape_configs": jobs,
    }
    return json.dumps(config, indent=2) + "\n"


class Prometheus:
    """Prometheus (and the node exporter) on 127.0.0.1 for the duration of a ``with`` block.

    ``rank_ports``: the ports the ranks serve their metrics on; ``node_exporter``: also start and
    scrape the node exporter; ``interval``: the scrape interval. ``timeout``: seconds each program
    gets to answer. Both run in their own process group, and leaving the block ends them (SIGTERM,
    then SIGKILL) and removes their folder; their logs are in :attr:`folder` while they run.
    """

    def __init__(
        self, rank_ports=(), node_exporter: bool = True, interval: str = "1s", timeout: float = 30
    ):
        self.rank_ports = list(rank_ports)
        self.node_exporter = node_exporter
        self.interval = interval
        self.timeout = timeout
        self.programs = {"prometheus": find_program(PROMETHEUS, "prometheus")}
        if node_exporter:
            self.programs["node_exporter"] = find_program(NODE_EXPORTER, "prometheus-node-exporter")
        self.folder = None
        self.url = None
        self.node_url = None
        self.procs = {}

    # -------------------------------------------------------------------------- start and stop
    def __enter__(self) -> Prometheus:
        self.folder = tempfile.mkdtemp(prefix="hvdcourse-prometheus-")
        try:
            node_port = None
            if self.node_exporter:
                node_port = free_port()
                self._start(
                    "node_exporter",
                    [
                        self.programs["node_exporter"],
                        f"--web.listen-address=127.0.0.1:{node_port}",
                        "--collector.disable-defaults",
                        *(f"--collector.{name}" for name in NODE_COLLECTORS),
                        # every interface: the default leaves out lo ("^lo$"), the one that the
                        # ranks of a job on one machine talk over (Gloo's TCP)
                        "--collector.netdev.device-exclude=^$",
                    ],
                )
                self.node_url = f"http://127.0.0.1:{node_port}"
                self._wait_ready("node_exporter", self.node_url + "/metrics")
            config = os.path.join(self.folder, "prometheus.yml")
            with open(config, "w") as fh:
                fh.write(config_text(self.rank_ports, node_port, self.interval))
            port = free_port()
            self._start(
                "prometheus",
                [
                    self.programs["prometheus"],
                    f"--config.file={config}",
                    f"--storage.tsdb.path={os.path.join(self.folder, 'data')}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
            )
            self.url = f"http://127.0.0.1:{port}"
            self._wait_ready("prometheus", self.url + "/-/ready")
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self, name: str, command: list) -> None:
        log = open(os.path.join(self.folder, f"{name}.log"), "w")
        try:
            self.procs[name] = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.folder,
                start_new_session=True,  # its own process group: ended with it, not with Ctrl-C
            )
        finally:
            log.close()

    def _wait_ready(self, name: str, url: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                raise MonitoringError(
                    f"{name} exited at start (code {self.procs[name].returncode}): "
                    f"{self.log_tail(name)}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise MonitoringError(
            f"{name} did not answer at {url} within {self.timeout:.0f} s: {self.log_tail(name)}"
        )

    def log_tail(self, name: str, lines: int = 3) -> str:
        """The last lines of a program's log, joined on one line (for messages)."""
        try:
            with open(os.path.join(self.folder, f"{name}.log"), errors="replace") as fh:
                return " | ".join(fh.read().strip().splitlines()[-lines:]) or "(empty log)"
        except OSError:
            return "(no log)"

    @property
    def pids(self) -> list:
        """The process ids of the programs started (running or not)."""
        return [proc.pid for proc in self.procs.values()]

    def stop(self) -> None:
        """End both programs (their process groups) and remove the folder; safe to call twice."""
        alive = processes.by_pid(self.pids)
        processes.end(alive, grace=5.0, groups=[proc.pid for proc in self.procs.values()])
        for proc in self.procs.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    # -------------------------------------------------------------------------------- queries
    def api(self, path: str, **params) -> dict | list:
        """``GET /api/v1/<path>?params``; the reply's ``data``, or :class:`MonitoringError`."""
        if self.url is None:
            raise MonitoringError("Prometheus is not running: use it inside 'with Prometheus(...)'")
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as reply:
                body = json.load(reply)
        except urllib.error.HTTPError as err:  # a bad query: Prometheus says why in the body
            body = json.load(err)
        except (urllib.error.URLError, OSError) as err:
            raise MonitoringError(f"Prometheus at {self.url} did not answer: {err}") from None
        if body.get("status") != "success":
            raise MonitoringError(
                f"Prometheus refused {params.get('query', path)!r}: {body.get('error')}"
            )
        return body["data"]

    def targets(self):
        """A frame of the scraped targets: job, instance, health, last error."""
        import pandas as pd

        active = self.api("targets", state="active")["activeTargets"]
        return pd.DataFrame(
            [
                {
                    "job": t["labels"].get("job"),
                    "instance": t["labels"].get("instance"),
                    "health": t["health"],
                    "last_error": t["lastError"],
                }
                for t in active
            ]
        )

    def wait_for_targets(self, job: str, count: int, timeout: float = 60) -> None:
        """Wait until ``count`` targets of ``job`` have been scraped successfully."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            frame = self.targets()
            if len(frame) and (frame[frame["job"] == job]["health"] == "up").sum() >= count:
                return
            time.sleep(0.5)
        raise MonitoringError(f"Prometheus did not scrape {count} '{job}' target(s) in {timeout} s")

    def query_range(self, query: str, start: float, end: float, step: float = 1.0):
        """Evaluate PromQL ``query`` every ``step`` s from ``start`` to ``end`` (Unix times).

        A long frame: one row per series and time, with ``time`` (s since ``start``), ``value`` and
        one column per label of the series (``rank``, ``instance``, ``mode``, ...).
        """
        import pandas as pd

        data = self.api("query_range", query=query, start=start, end=end, step=step)
        rows = [
            {**series["metric"], "time": float(t) - start, "value": float(v)}
            for series in data["result"]
            for t, v in series["values"]
        ]
        return pd.DataFrame(rows, columns=sorted({k for r in rows for k in r}) or ["time", "value"])
