"""A Ray driver for `test_revalidate`: revalidates an archive with `run_ray` in chunks
of 2 items, counting the tasks in flight and the items taken from the walk ahead of
what was handed back, and prints the counts and the reports as JSON.

    python -m tests.cli.ray_window ARCHIVE ADDRESS READS
"""

from __future__ import annotations

import json
import sys

from jobgate import revalidation


class CountingRay:
    """Ray as `run_ray` uses it, counting the tasks started and not yet collected."""

    def __init__(self, ray) -> None:
        self._ray = ray
        self.in_flight = self.peak = self.started = 0

    def __getattr__(self, name):
        return getattr(self._ray, name)

    def remote(self, fn):
        counter = self

        class Task:
            def __init__(self, task) -> None:
                self.task = task

            def options(self, **kwargs):
                return Task(self.task.options(**kwargs))

            def remote(self, *args):
                counter.started += 1
                counter.in_flight += 1
                counter.peak = max(counter.peak, counter.in_flight)
                return self.task.remote(*args)

        return Task(self._ray.remote(fn))

    def get(self, ref):
        self.in_flight -= 1
        return self._ray.get(ref)


def main(archive: str, address: str, reads: str) -> None:
    revalidation.RAY_CHUNK_ITEMS = 2
    taken = handed = peak_ahead = 0

    def items():
        nonlocal taken
        for item in revalidation.discover([archive]):
            taken += 1
            yield item

    judge = revalidation.Judge(None, None)
    reports = []
    with revalidation.ray_session(address) as ray:
        counting = CountingRay(ray)
        shared = revalidation.workers_see_our_files(ray)
        for judged in revalidation.run_ray(items(), [judge], counting, reads):
            handed += len(judged.items)
            peak_ahead = max(peak_ahead, taken - handed)
            reports += [r.to_dict() for r in judged.reports[0]]
    seen = {"workers_see_our_files": shared, "taken": taken, "handed": handed, "peak_ahead": peak_ahead, "started": counting.started, "in_flight": counting.in_flight, "peak": counting.peak, "reports": reports}
    print(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
