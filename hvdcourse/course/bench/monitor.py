"""Watch CPU and memory while something trains (lesson: Measuring performance).

The ELKH Cloud slides' cluster ran Prometheus and Grafana to watch GPUs, CPUs and the network during
training. On one machine the same questions ("are all cores busy? is the machine swapping? are
processes fighting?") are answered by sampling ``psutil`` a few times per second::

    with CpuMonitor(interval=0.25) as mon:
        run_training()
    mon.samples   # [{"t": s, "cpu_percent": [per core], "memory_used_gib": ..., "ctx_switches_per_s": ...}]

Context switches per second are the tell-tale of oversubscription: more runnable threads than cores
make the kernel switch between them thousands of times a second.
"""

from __future__ import annotations

import statistics
import threading
import time


class CpuMonitor:
    """Samples per-core CPU %, memory in use and context switches/s in a background thread."""

    def __init__(self, interval: float = 0.25):
        self.interval = interval
        self.samples: list = []
        self._stop = threading.Event()
        self._thread = None

    def _run(self) -> None:
        import psutil

        start = time.monotonic()
        psutil.cpu_percent(percpu=True)  # the first call only sets the reference point
        last_ctx, last_t = psutil.cpu_stats().ctx_switches, start
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            ctx = psutil.cpu_stats().ctx_switches
            self.samples.append(
                {
                    "t": round(now - start, 3),
                    "cpu_percent": psutil.cpu_percent(percpu=True),
                    "memory_used_gib": round(psutil.virtual_memory().used / 2**30, 3),
                    "ctx_switches_per_s": round((ctx - last_ctx) / max(now - last_t, 1e-6), 1),
                }
            )
            last_ctx, last_t = ctx, now

    def start(self) -> "CpuMonitor":
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="cpu-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval + 1)
        return self.samples

    def __enter__(self) -> "CpuMonitor":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def summary(self) -> dict:
        """Mean total CPU % (100 per core), mean context switches/s, peak memory: one line per run."""
        if not self.samples:
            return {"samples": 0}
        return {
            "samples": len(self.samples),
            "mean_cpu_percent_total": round(
                statistics.mean(sum(s["cpu_percent"]) for s in self.samples), 1
            ),
            "mean_ctx_switches_per_s": round(
                statistics.mean(s["ctx_switches_per_s"] for s in self.samples), 1
            ),
            "peak_memory_used_gib": max(s["memory_used_gib"] for s in self.samples),
        }
