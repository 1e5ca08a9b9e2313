"""The class hub's default spawner: each learner's server as their Unix user, inside their limits
(lesson: Instructor guide).

Imported by JupyterHub in the hub's own Python (``/opt/hvdcourse-hub/hub``), never by the course's:
it needs JupyterHub. :class:`LimitedSpawner` is JupyterHub's ``LocalProcessSpawner`` plus the limits
of :mod:`hvdcourse.course.hub.limits`: the hub makes the learner's cgroup before the server starts,
the server's process joins it as root just before it becomes the learner, and when the server stops,
whatever it left in its group is ended and the group removed.
"""

from __future__ import annotations

from jupyterhub.spawner import LocalProcessSpawner
from traitlets import Integer, Unicode

from hvdcourse.course.hub import limits


class LimitedSpawner(LocalProcessSpawner):
    """``LocalProcessSpawner`` with per-learner memory, CPU and process limits (``mem_limit``,
    ``cpu_limit`` and ``procs_limit``), in cgroups when the machine offers them."""

    procs_limit = Integer(512, help="processes and threads a learner may run at once").tag(
        config=True
    )
    cgroups = Unicode("none", help="v2, v1 or none (hvdcourse.course.hub.limits.mode)").tag(
        config=True
    )

    def learner_limits(self) -> limits.Limits:
        return limits.Limits(int(self.mem_limit or 0), float(self.cpu_limit or 0), self.procs_limit)

    def make_preexec_fn(self, name):
        become_learner = super().make_preexec_fn(name)
        wanted = self.learner_limits()
        folders = limits.prepare(name, wanted, self.cgroups)

        def preexec():
            limits.enter(folders, wanted)
            become_learner()

        return preexec

    async def stop(self, now=False):
        await super().stop(now=now)
        left = limits.release(limits.groups(self.user.name, self.cgroups))
        if left:
            self.log.warning("ended %d process(es) %s's server left behind", left, self.user.name)
