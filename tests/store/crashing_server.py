"""A server that kills itself (SIGKILL) right after the commit that opens its Nth record,
before any reply leaves: how the crash tests stop a server between commit and reply.

    python tests/store/crashing_server.py CONFIG LISTEN N [later]

With `later`, only the records the store's writer opens beside the calls count
(`open_later`): a record committed through the commit groups then fails the test.

It serves as `jobgate serve --config CONFIG --listen LISTEN` does, on the store the
configuration names, handed to the server inside `CrashingStore`: the crash is
injected here, in the test, and the product's commit path is the one deployed."""

from __future__ import annotations

import os
import signal
import sys
import threading

from jobgate import load_config
from jobgate.server.app import create_server
from jobgate.store import JobStore, open_configured_store


class _Counted:
    """A record being opened (`Pending`) whose commit `CrashingStore` counts."""

    def __init__(self, pending, store: CrashingStore) -> None:
        self._pending, self._store = pending, store

    def wait(self) -> None:
        self._pending.wait()
        self._store._committed(1)


class CrashingStore:
    """`store`, whose process dies once its commits have opened `after` records: after
    the commit, before the caller learns of it."""

    def __init__(self, store: JobStore, after: int, only_later: bool = False) -> None:
        self._store, self._after, self._opened, self.only_later = store, after, 0, only_later
        self._lock = threading.Lock()

    def admit_many(self, items):
        outcomes = self._store.admit_many(items)
        if self.only_later:
            raise AssertionError("a record went through the commit groups, not the store's writer")
        self._committed(sum(isinstance(outcome, str) for outcome in outcomes))
        return outcomes

    def open_later(self, job):
        """A record the store's writer opens beside the call: counted once its commit
        is in, when the call would answer."""
        job_id, pending = self._store.open_later(job)
        return job_id, _Counted(pending, self)

    def _committed(self, records: int) -> None:
        with self._lock:
            self._opened += records
            if self._opened >= self._after:
                os.kill(os.getpid(), signal.SIGKILL)

    def __getattr__(self, name: str):
        return getattr(self._store, name)


def main(config_path: str, listen: str, after: str, path: str = "") -> None:
    config = load_config(config_path)
    store = open_configured_store(config)
    started = create_server(config, listen, store=CrashingStore(store, int(after), only_later=path == "later"))
    started.server.wait_for_termination()


if __name__ == "__main__":
    main(*sys.argv[1:])
