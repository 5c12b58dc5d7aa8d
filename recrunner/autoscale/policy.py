"""How many trainers each elastic job should run: Paddle EDL's autoscaler policy, with no
notion of where the numbers come from (the cluster and the local machine observe and act;
this decides).

1. Every running job keeps at least its minimum.
2. A pending job (submitted, not yet admitted) is admitted at its minimum when its minimum
   (and its fixed part: servers, master) fits. If it does not, the running jobs shrink toward
   their minimum, one trainer at a time from the job with the most trainers above its minimum,
   until it fits; if even that is not enough, nobody shrinks and the job stays pending.
   Pending jobs are taken oldest first.
3. What is left goes to the jobs below their maximum, one trainer at a time to the one with the
   fewest (the oldest on a tie). Then, fairly: while a job runs two trainers more than another
   that is below its maximum, one trainer moves from the first (kept at its minimum or above)
   to the second.
4. A job resized less than `cooldown_s` ago keeps its size (it can still be admitted or be
   shrunk to admit a pending job only once its cooldown is over).
"""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Resources:
    """CPU (cores) and memory (bytes); locally, a trainer slot is one CPU."""

    cpu: float = 0.0
    memory: float = 0.0

    def __add__(self, other: "Resources") -> "Resources":
        return Resources(self.cpu + other.cpu, self.memory + other.memory)

    def __sub__(self, other: "Resources") -> "Resources":
        return Resources(self.cpu - other.cpu, self.memory - other.memory)

    def times(self, n: int) -> "Resources":
        return Resources(self.cpu * n, self.memory * n)

    def fits_in(self, free: "Resources") -> bool:
        return self.cpu <= free.cpu + 1e-9 and self.memory <= free.memory + 1e-9


@dataclass
class Job:
    name: str
    min: int
    max: int
    trainers: int  # what it runs now (0 while pending)
    pending: bool
    trainer: Resources  # one trainer's request
    fixed: Resources = field(default_factory=Resources)  # servers and master (pending jobs)
    submitted: float = 0.0  # for "oldest first"
    resized: float | None = None  # when the autoscaler last resized it


def cooling(job: Job, now: float, cooldown_s: float) -> bool:
    return job.resized is not None and now - job.resized < cooldown_s


def decide(jobs: list[Job], free: Resources, now: float, cooldown_s: float) -> dict[str, int]:
    """The trainer count each job should run (every job named; unchanged ones too; 0 for a
    job left pending)."""
    want = {j.name: 0 if j.pending else j.trainers for j in jobs}
    order = sorted(jobs, key=lambda j: (j.submitted, j.name))
    running = [j for j in order if not j.pending]
    for job in order:
        if job.pending and not cooling(job, now, cooldown_s):
            free = admit(job, running, want, free, now, cooldown_s)
    movable = [j for j in order if (not j.pending or want[j.name] > 0)
               and not cooling(j, now, cooldown_s)]
    while True:
        below = [j for j in movable if want[j.name] < j.max and j.trainer.fits_in(free)]
        if not below:
            break
        pick = min(below, key=lambda j: (want[j.name], j.submitted, j.name))
        want[pick.name] += 1
        free = free - pick.trainer
    while True:
        takers = [j for j in movable if want[j.name] < j.max]
        givers = [j for j in movable if want[j.name] > j.min]
        moves = [(g, t) for t in takers for g in givers if want[g.name] >= want[t.name] + 2
                 and t.trainer.fits_in(free + g.trainer)]
        if not moves:
            return want
        give, take = max(moves, key=lambda m: (want[m[0].name] - want[m[1].name],
                                               -m[1].submitted))
        want[give.name] -= 1
        want[take.name] += 1
        free = free + give.trainer - take.trainer


def admit(job: Job, running: list[Job], want: dict[str, int], free: Resources, now: float,
          cooldown_s: float) -> Resources:
    """Admit `job` at its minimum if it fits, shrinking running jobs if need be; the free
    capacity left."""
    need = job.fixed + job.trainer.times(job.min)
    trial, left = dict(want), free
    while not need.fits_in(left):
        donors = [j for j in running if trial[j.name] > j.min and
                  not cooling(j, now, cooldown_s)]
        if not donors:
            return free  # cannot fit even at everyone's minimum: it stays pending
        donor = max(donors, key=lambda j: (trial[j.name] - j.min, -j.submitted, j.name))
        trial[donor.name] -= 1
        left = left + donor.trainer
    want.update(trial)
    want[job.name] = job.min
    running.append(job)
    return left - need
