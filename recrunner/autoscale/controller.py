"""The autoscaler's loop: observe, decide (policy), resize what changed, say so."""

import logging
import time
from typing import Any

from recrunner.autoscale.cluster import Cluster
from recrunner.autoscale.policy import decide

log = logging.getLogger("recrunner.autoscale")


class Controller:
    def __init__(self, cluster: Cluster, cooldown_s: float) -> None:
        self.cluster, self.cooldown_s = cluster, cooldown_s
        self.known: dict[str, int] = {}  # each job's trainers, as last seen or set

    def step(self, now: float | None = None) -> list[dict[str, Any]]:
        """One round; the resizes made ({job, before, after, pending})."""
        now = time.time() if now is None else now
        view = self.cluster.observe()
        for name in set(self.known) - {j.name for j in view.jobs}:
            log.info("%s: gone (finished or deleted; %d trainers free)", name,
                     self.known.pop(name))
        self.known.update({j.name: j.trainers for j in view.jobs})
        want = decide(view.jobs, view.free, now, self.cooldown_s)
        changes = []
        for job in view.jobs:
            n = want[job.name]
            if (job.pending and n == 0) or (n == job.trainers and not job.pending):
                continue  # still pending, or unchanged
            self.cluster.resize(job, n, now)
            self.known[job.name] = n
            change = {"job": job.name, "before": job.trainers, "after": n,
                      "admitted": job.pending and n > 0}
            changes.append(change)
            log.info("%s: %d -> %d trainers%s", job.name, job.trainers, n,
                     " (admitted)" if change["admitted"] else "")
        return changes

    def run(self, interval_s: float, once: bool) -> None:
        while True:
            self.step()
            if once:
                return
            time.sleep(interval_s)
