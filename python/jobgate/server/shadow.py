"""Shadow admission: every admission judged under a candidate configuration as well,
to learn whom a catalog change would refuse before it is served.

The service answers under its own configuration, as always; what it judged is then
offered here (`offer_document`, `offer_batch`) and queued, and one thread judges it
again under the candidate, off every request's path. Each disagreement (a verdict or a
violation only one side has) is counted by rule (`jobgate_shadow_disagreements_total`)
and logged with the account as a summary of fixed size whatever the document: how
many violations each side alone has, the first few of them and of their rules. The
queue is bounded by items and bytes: what does not fit is dropped and counted
(`jobgate_shadow_dropped_total`), so a slow shadow costs the service nothing but the
copy of a reference.

A real admission's project quota is judged with the usage the service saw when it
decided, so both sides judge the same moment; a batch the core answered whole is
judged on the store's usage when its turn comes.

Must not change a response or write anything: it only judges and compares.
"""

from __future__ import annotations

import heapq
import logging
import queue
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import jobgate
from jobgate import sources
from jobgate.config import Config, ConfigError, load_config
from jobgate.reports import ReportView, renamed
from jobgate.server.gate import PACKAGE_NAME, charged_project, response_budget
from jobgate.server.logs import clip
from jobgate.server.metrics import Metrics

log = logging.getLogger("jobgate.shadow")

SETTLE_SECONDS = 0.002  # how long the shadow lets an offering call finish first
GATHER = 64  # admissions judged per wake-up, at most
# A disagreement's log line names at most this many violations and rules of each side
# (the rest are counted), each JSON Pointer cut to FIELD_CHARS.
SHOWN = 5
FIELD_CHARS = 200


@dataclass(frozen=True)
class _Document:
    data: bytes
    kind: str | None
    account: str
    projects: tuple[str, ...] | None
    package: bytes
    gpus_in_use: int | None
    primary: Any  # the report served (immutable), read on the shadow thread
    home: str | None = None  # where the account's spec-bundles are charged

    @property
    def size(self) -> int:
        return len(self.data) + len(self.package)


@dataclass(frozen=True)
class _Batch:
    request: bytes
    account: str
    projects: tuple[str, ...] | None
    max_batch: int
    primary: bytes
    home: str | None = None

    @property
    def size(self) -> int:
        return len(self.request) + len(self.primary)


def load_candidate(config: Config) -> Config | None:
    """The candidate `[shadow] config` names, or None when shadowing is off. Raises
    ConfigError naming the file when it cannot be loaded."""
    if not config.shadow.config:
        return None
    try:
        return load_config(config.shadow.config)
    except ConfigError as e:
        raise ConfigError(f"shadow.config: {e}") from None


def first(violations: Counter) -> list[str]:
    """The first SHOWN of `violations` ((rule, field, severity) counts) as "rule field",
    each field cut to FIELD_CHARS."""
    return [f"{rule} {clip(field, FIELD_CHARS)}" for rule, field, _ in heapq.nsmallest(SHOWN, violations)]


class Shadow:
    def __init__(self, candidate: Config, settings, metrics: Metrics, store=None) -> None:
        self.candidate = candidate
        self.validator = jobgate.Validator(candidate)
        self.metrics, self.store = metrics, store
        self._queue: queue.Queue = queue.Queue(settings.queue)
        self._max_bytes, self._bytes, self._lock = settings.queue_bytes, 0, threading.Lock()
        self._thread = threading.Thread(target=self._run, name="jobgate-shadow", daemon=True)
        self._thread.start()

    # ---- on the request's path: a copy of references, never a wait

    def offer_document(self, data: bytes, kind: str | None, account: str, projects, primary, *, package: bytes = b"", gpus_in_use: int | None = None, home: str | None = None) -> None:
        self._offer(_Document(data, kind, account, tuple(projects) if projects is not None else None, package, gpus_in_use, primary, home))

    def offer_batch(self, request: bytes, account: str, projects, max_batch: int, primary: bytes, home: str | None = None) -> None:
        self._offer(_Batch(request, account, tuple(projects) if projects is not None else None, max_batch, primary, home))

    def _offer(self, item) -> None:
        with self._lock:
            if self._bytes + item.size > self._max_bytes:
                self.metrics.shadow_dropped.inc()
                return
            try:
                self._queue.put_nowait(item)
            except queue.Full:
                self.metrics.shadow_dropped.inc()
                return
            self._bytes += item.size

    # ---- the shadow thread

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            # The call that offered it is still sending its response: judging waits
            # until it has, then takes what has gathered, so the shadow's Python work
            # does not sit between a servicer and its reply.
            time.sleep(SETTLE_SECONDS)
            items = [first]
            while len(items) < GATHER:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            for item in items:
                if item is None:
                    self._queue.task_done()
                    return
                with self._lock:
                    self._bytes -= item.size
                try:
                    if isinstance(item, _Batch):
                        self._judge_batch(item)
                    else:
                        self._judge_document(item)
                except Exception:  # noqa: BLE001 - the shadow never takes the service down
                    log.exception("shadow judgment failed")
                finally:
                    self._queue.task_done()

    def _quota(self, project: str) -> int | None:
        c = self.candidate
        return jobgate._core.project_quota(project, default=c.quota.default, projects=c.quota.projects)

    def _judge_document(self, item: _Document) -> None:
        v = self.validator
        if item.package:
            with sources.spooled(item.package) as path:
                judgement = v.judge(item.data, item.kind, path, owner=item.account, projects=item.projects, home=item.home)
        else:
            path = None
            judgement = v.judge(item.data, item.kind, owner=item.account, projects=item.projects, home=item.home)
        judged = judgement.report
        facts = judgement.facts
        if item.gpus_in_use is not None and facts is not None and facts.launches:
            # Charged where the service charged it: a spec-bundle to the account's home.
            quota = self._quota(charged_project(facts, item.home))
            if quota is not None:
                judged = judgement.with_usage(item.gpus_in_use, quota)
        if path is None and isinstance(item.primary, jobgate.Report) and judged == item.primary:  # compared in the core: the common case costs no dict
            self.metrics.shadow_judged.inc()
            return
        report = renamed(judged.to_dict(), path, PACKAGE_NAME) if path is not None else judged.to_dict()
        self._compare("document", item.account, item.primary.to_dict(), report)

    def _judge_batch(self, item: _Batch) -> None:
        from jobgate.v1 import admission_pb2

        quotas: dict[str, Any] = {}
        c = self.candidate
        if (c.quota.default is not None or c.quota.projects) and self.store is not None:
            quotas = {"quota_default": c.quota.default, "quota_projects": c.quota.projects, "gpus_in_use": self.store.usage}
        outcome = self.validator.check_batch_request(item.request, owner=item.account, max_batch=item.max_batch, projects=item.projects, home=item.home, max_response_bytes=response_budget(c), **quotas)
        if outcome is None:
            return
        primary = admission_pb2.AdmitBatchResponse.FromString(item.primary)
        candidate = admission_pb2.AdmitBatchResponse.FromString(outcome.response)
        for a, b in zip(primary.results, candidate.results, strict=False):
            self._compare("batch", item.account, ReportView.from_message(a.report).to_dict(), ReportView.from_message(b.report).to_dict())

    def _compare(self, via: str, account: str, primary: dict[str, Any], candidate: dict[str, Any]) -> None:
        self.metrics.shadow_judged.inc()
        ours = Counter((v["rule"], v["field"], v["severity"]) for v in primary["violations"])
        theirs = Counter((v["rule"], v["field"], v["severity"]) for v in candidate["violations"])
        if primary["verdict"] == candidate["verdict"] and ours == theirs:
            return
        added, removed = theirs - ours, ours - theirs
        rules = sorted({rule for rule, _, _ in (added + removed)})
        for rule in rules:
            self.metrics.shadow_disagreements.labels(rule).inc()
        log.info(
            "shadow disagreement",
            extra={
                "fields": {
                    "via": via,
                    "account": account,
                    "kind": candidate["kind"],
                    "verdict": primary["verdict"],
                    "candidate_verdict": candidate["verdict"],
                    "added": first(added),
                    "added_count": added.total(),
                    "removed": first(removed),
                    "removed_count": removed.total(),
                    "rules": rules[:SHOWN],
                    "rules_count": len(rules),
                }
            },
        )

    def drain(self, timeout: float = 30.0) -> bool:
        """Waits until every offered admission was judged (tests, and a clean stop)."""
        done = threading.Event()
        threading.Thread(target=lambda: (self._queue.join(), done.set()), daemon=True).start()
        return done.wait(timeout)

    def close(self, wait: float = 30.0) -> None:
        """Stops the thread after what is queued, waiting at most `wait` seconds for it
        (its judgements read the store's usage); what is offered after is dropped."""
        try:
            self._queue.put(None, timeout=min(wait, 5))
        except queue.Full:
            pass
        self._thread.join(wait)
