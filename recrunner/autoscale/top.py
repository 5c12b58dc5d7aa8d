"""`recrun top`: the autoscaled jobs at a glance, as EDL's monitor shows them: jobs submitted
and pending, trainers per job (running / granted), CPU utilisation. A terminal gets the view
redrawn in place; anything else (a file, a pipe) one plain line per look."""

import sys
import time
from typing import TextIO

from recrunner.autoscale.cluster import Cluster


def line(cluster: Cluster, at: float | None = None) -> str:
    view = cluster.observe()
    cpu = cluster.cpu_utilisation()
    jobs = sorted(view.jobs, key=lambda j: (j.submitted, j.name))
    pending = [j for j in jobs if j.pending]
    # running / granted, per job
    sizes = [f"{j.name}:" + ("pending" if j.pending else
                             f"{view.running.get(j.name, 0)}/{j.trainers}") for j in jobs]
    parts = [time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at or time.time())),
             f"submitted={len(jobs)}", f"pending={len(pending)}",
             "trainers=" + (",".join(sizes) or "-"),
             f"cpu={'?' if cpu is None else f'{100 * cpu:.0f}%'}"]
    return " ".join(parts)


def watch(cluster: Cluster, interval_s: float, count: int | None, out: TextIO = sys.stdout
          ) -> None:
    tty = out.isatty()
    cluster.cpu_utilisation()  # the first look sets the baseline
    shown = 0
    while count is None or shown < count:
        time.sleep(interval_s if shown or not tty else min(interval_s, 1.0))
        text = line(cluster)
        if tty:
            out.write("\x1b[H\x1b[2J" + text.replace(" trainers=", "\n  trainers=")
                      .replace(",", "\n            ") + "\n")
        else:
            out.write(text + "\n")
        out.flush()
        shown += 1
