"""Admission without the wire: check a document as the authenticated account, within
its grant, apply the project quota atomically with opening the record (every kind
that launches is charged: a JobSpec to its project, a spec-bundle to its account's
home), and hand out the job id. With an idempotency key, a retry gets the first
admission's job id and report back (`replay`), and the same key with another request
is `KeyReused`: the key is written in the transaction that opens the record, so
neither a crash nor a replica can open a second one. A retry is judged under the grant
in force: one that no longer reaches the job's project is forge.project.forbidden.

Shared by every RPC (Admit, AdmitBatch, AdmitStream) so their reports are the same.
A batch is admitted whole or refused before any item opens a record (`admit_batch`):
its keys are held to one request each within the batch and against what they recall,
and every item of a real batch is judged launchable first; then its items are
admitted in order, each seeing the quota the earlier ones consumed.
Owns the groups in which new records are committed (the store's `GroupCommitter`),
closed by `Gate.close`. Must not decide who may admit (`grants`): it is handed the grant to
apply; nor know the wire: `wire` reads the key and fingerprints the request, and the
servicers hand both to it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

import jobgate
from jobgate import sources
from jobgate.config import Config
from jobgate.reports import ReportView, renamed
from jobgate.store import IdempotencyKey, JobStore, NewJob, Remembered, StoreFull, StoreUnavailable
from jobgate.store.base import Pending
from jobgate.store.committer import COMMITTER_CLOSE_WAIT_S, GroupCommitter

log = logging.getLogger("jobgate.server")

# How a package sent with a request is named in reports (it has no path of its own).
PACKAGE_NAME = "<package>"


@dataclass(frozen=True)
class Grant:
    """Where an account may admit: `projects` as the core takes them ("*" for every
    project; a JobSpec for another is forge.project.forbidden), and `home`, the
    project of its spec-bundles, which name none."""

    projects: tuple[str, ...]
    home: str

    def reaches(self, project: str) -> bool:
        """Whether the account may admit into `project` (and learn its usage)."""
        return "*" in self.projects or project in self.projects


@dataclass
class Admission:
    report: jobgate.Report | ReportView  # a ReportView when a package was renamed in it, or replayed
    job_id: str = ""
    # The response of an earlier admission made with the same idempotency key.
    replayed: bool = False
    # The GPUs the document's project held when it was judged (None: no quota applied).
    gpus_in_use: int | None = None
    # The project the document was admitted into or refused for ("" when unread).
    project: str = ""
    # A record still being committed (`Gate.admit(..., later=True)`): `durable` waits for it.
    pending: Pending | None = None

    def durable(self) -> None:
        """Returns once the admission's record is committed; raises as the store does
        when it cannot be. The admission is not answered before."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.wait()


class KeyReused(Exception):
    """An idempotency key sent again with another request (kind, document or package):
    refused, and nothing is admitted. Names the job the key's first request opened,
    unless `job_id` is empty (a job the caller may no longer see)."""

    def __init__(self, key: str, job_id: str) -> None:
        shown = repr(key) if len(key) <= 40 else repr(key[:40]) + "…"
        admitted = f", admitted as job {job_id}" if job_id else ""
        super().__init__(
            f"idempotency key {shown} was first sent with another request (kind, document or package){admitted}; "
            "a key names one admission: send that request again to get its response, or send this one with a new key"
        )
        self.key, self.job_id = key, job_id


def charged_project(facts, home: str | None) -> str:
    """The project a launch is admitted into and charged to, as its kind's `charge`
    says: a JobSpec's own (the core holds it to the grant); a spec-bundle names none and
    goes to its account's `home`."""
    return home if facts.charge == "home" and home is not None else facts.project


def _forbidden(report) -> bool:
    """Whether `report` refuses a document for a project outside the grant."""
    return any(v.rule == jobgate._core.PROJECT_FORBIDDEN for v in report.violations)


_UNSAFE_IN_ID = re.compile(r"[^A-Za-z0-9._-]+")


def _segment(text: str, fallback: str) -> str:
    cleaned = _UNSAFE_IN_ID.sub("-", text).strip("-._")
    return cleaned[:40] or fallback


class NotLaunchable(ValueError):
    """A real admission of a kind that launches nothing: a job id is the handle to a
    launch (SPEC §4), and only JobSpecs and spec-bundles launch. A dry run still
    returns its report."""

    def __init__(self, kind: str) -> None:
        launching = " and ".join(k["name"] for k in jobgate._core.kind_table() if k["launches"])
        super().__init__(f"a {kind} document can be checked (dry_run) but not admitted: only {launching} documents launch jobs")
        self.kind = kind


class KeyRepeated(ValueError):
    """A batch item's idempotency key given to an earlier item (`first`, its index)
    with another request: a key names one admission."""

    def __init__(self, first: int) -> None:
        super().__init__(f"repeats the key of item {first} with another request; a key names one admission")
        self.first = first


class DeadlinePassed(Exception):
    """The caller's deadline passed between two items of a batch: `judged` of its
    `documents` were admitted (or checked), the rest were not looked at."""

    def __init__(self, judged: int, documents: int) -> None:
        super().__init__(f"the deadline passed after {judged} of {documents} documents")
        self.judged, self.documents = judged, documents


class BatchStopped(Exception):
    """A batch stopped at item `index` by `error` (KeyRepeated, KeyReused,
    NotLaunchable, TimeoutError, Unstorable, DeadlinePassed, or a failure of the store
    or of the server); `admitted` are the admissions of the items before it, made
    (and, unless a dry run, committed) before it stopped: a batch is refused before
    any item is admitted, except when the deadline passes, the store fails or an item
    cannot be stored."""

    def __init__(self, index: int, error: BaseException, admitted: list[Admission]) -> None:
        super().__init__(f"item {index}: {error}")
        self.index, self.error, self.admitted = index, error, admitted


@dataclass(frozen=True, slots=True)
class BatchItem:
    """One document of a batch, as the wire read it: the bytes the core checks, the
    kind it names, its package, and (for a real admission) its idempotency key and
    the fingerprint of its request."""

    data: bytes
    kind: str | None
    package: bytes = b""
    key: str = ""
    fingerprint: bytes = b""


@dataclass
class Judged:
    """A document as the core judged it for admission (`Gate.judge`): the judgement
    and, when a package was sent with it, the name it was read under (reports name it
    `PACKAGE_NAME`)."""

    judgement: jobgate._core.Judgement
    package: str | None = None


class Verdict:
    """One admission's report once its project's usage is known: the judgement's, or
    with `forge.quota.project` when its GPUs do not fit the quota. Called by the store
    with that usage, inside the transaction that would open the record (again if its
    commit group is retried one by one); the document is not read again."""

    __slots__ = ("judged", "quota", "report", "in_use")

    def __init__(self, judged: Judged, quota: int | None) -> None:
        self.judged, self.quota = judged, quota
        self.report, self.in_use = judged.judgement.report, None

    def __call__(self, in_use: int) -> bool:
        if self.quota is not None:
            self.in_use = in_use
            self.report = self.judged.judgement.with_usage(in_use, self.quota)
        return self.report.ok

    def shown(self) -> bytes:
        """The report as the caller is shown it, as JSON: what a replay returns."""
        as_dict = self.report.to_dict()
        package = self.judged.package
        return orjson.dumps(renamed(as_dict, package, PACKAGE_NAME) if package else as_dict)


def response_budget(config: Config) -> int:
    """The bytes a batch's reports may take together, so that its response fits one
    message with room for job ids and framing; the core cuts the largest reports
    beyond it (`jobgate.fit_reports`)."""
    return config.server.max_message_bytes * 3 // 4


class Gate:
    """Admission under one configuration at a time (`reload` swaps it), opening
    records in `store` in commit groups of its own. The store is the caller's to
    close; `close` ends what the gate started."""

    def __init__(self, config: Config, store: JobStore | None, shadow=None) -> None:
        self.config = config
        self.validator = jobgate.Validator(config)
        self.store = store
        self.committer = GroupCommitter(store) if store is not None else None
        # `server.shadow.Shadow`, or None: every admission is offered to it once judged.
        self.shadow = shadow

    def reload(self, config: Config) -> None:
        """Swaps in a new configuration; calls already running finish with the old one."""
        validator = jobgate.Validator(config)
        self.config, self.validator = config, validator

    def close(self, wait: float = COMMITTER_CLOSE_WAIT_S) -> None:
        """Stops the committer once the admissions it holds are committed (waiting at
        most `wait` seconds for a group under way); an admission after that fails with
        StoreUnavailable."""
        if self.committer is not None:
            self.committer.close(wait)

    def quota(self, project: str) -> int | None:
        return jobgate._core.project_quota(project, default=self.config.quota.default, projects=self.config.quota.projects)

    def response_budget(self) -> int:
        """The bytes a batch's reports may take together (`response_budget`)."""
        return response_budget(self.config)

    def check_many(self, documents: list[bytes], kind: str | None, account: str, grant: Grant | None = None) -> list[jobgate.Report]:
        """Dry-run reports for many documents, in parallel. Project quotas are applied
        from the store's current usage, as a dry-run Admit would."""
        if not self.has_quotas():
            projects = grant.projects if grant is not None else None
            reports = self.validator.check_many(documents, kind, owner=account, projects=projects, max_response_bytes=self.response_budget())
            if self.shadow is not None:
                for data, report in zip(documents, reports, strict=True):
                    self.shadow.offer_document(data, kind, account, projects, report)
            return reports
        consumed: dict[str, int] = {}  # quota is consumed in item order, as a real batch does
        return jobgate.fit_reports([self.admit(d, kind, account, dry_run=True, grant=grant, consumed=consumed).report for d in documents], self.response_budget())

    def check_batch_request(self, request: bytes, account: str, max_batch: int, grant: Grant | None = None):
        """The core's answer to an encoded dry-run AdmitBatchRequest of raw documents
        (Validator.check_batch_request), project quotas consumed in item order from one snapshot of the
        store's usage; `None` for any other request."""
        config, validator = self.config, self.validator
        quotas = self._core_quotas(config, "usage")
        if quotas is None:
            return None
        projects = grant.projects if grant is not None else None
        home = grant.home if grant is not None else None
        outcome = validator.check_batch_request(request, owner=account, max_batch=max_batch, projects=projects, home=home, max_response_bytes=response_budget(config), **quotas)
        if self.shadow is not None and outcome is not None:
            self.shadow.offer_batch(request, account, projects, max_batch, outcome.response, home=home)
        return outcome

    def core_answers_dry_runs(self) -> bool:
        """Whether the core answers a dry run from its request's bytes: not while a
        candidate is shadowed (the general path offers the document to the shadow as
        it was judged), nor under quotas without a store to read the usage from."""
        return self.shadow is None and (self.store is not None or not self.has_quotas())

    def check_admit_request(self, request: bytes, account: str, grant: Grant | None = None, *, unlocated: bool = False):
        """The core's answer to an encoded AdmitRequest that is a dry run of one raw
        document (Validator.check_batch_request with `single`), its response an encoded
        AdmitResponse, without lines and columns when `unlocated` (a typed message's
        JSON form); under quotas, judged against the usage of the one project it is
        charged to, read from the store only when the core answers. `None` for any
        other request, and unless `core_answers_dry_runs`."""
        config, validator = self.config, self.validator
        quotas = self._core_quotas(config, "gpus_in_use")
        if self.shadow is not None or quotas is None:
            return None
        projects = grant.projects if grant is not None else None
        home = grant.home if grant is not None else None
        return validator.check_batch_request(request, owner=account, projects=projects, home=home, max_response_bytes=response_budget(config), single=True, unlocated=unlocated, **quotas)

    def _core_quotas(self, config: Config, usage: str) -> dict[str, Any] | None:
        """The quota arguments of `Validator.check_batch_request` under `config`, the
        usage read through the store's method named `usage`, called only when the core
        answers the request itself; None under quotas without a store to read from."""
        if config.quota.default is None and not config.quota.projects:
            return {}
        if self.store is None:
            return None
        return {"quota_default": config.quota.default, "quota_projects": config.quota.projects, "gpus_in_use": getattr(self.store, usage)}

    def has_quotas(self) -> bool:
        return self.config.quota.default is not None or bool(self.config.quota.projects)

    def judge(self, data: bytes, kind: str | None, account: str, *, dry_run: bool, grant: Grant | None = None, package: bytes = b"", timeout: float | None = None) -> Judged:
        """The core's one reading of a document for admission: its report (the project
        quota left to `Verdict`) and what admission needs of it; with `package`, its
        supporting files verified against that archive, read within `timeout` seconds
        (else TimeoutError). A real admission of a kind that launches nothing raises
        NotLaunchable: AdmitBatch judges every item before admitting any."""
        projects = grant.projects if grant is not None else None
        home = grant.home if grant is not None else None
        # Only a record needs the document rewritten with its owner.
        stamp = not dry_run and self.store is not None
        if package:
            with sources.spooled(package) as path:
                judged = Judged(self.validator.judge(data, kind, path, owner=account, projects=projects, home=home, stamp=stamp, release_gil=True, timeout=timeout), path)
        else:
            # The core lets the service's RPC threads run Python while it checks a large
            # document (over 16 KiB); a smaller one is checked in less time than handing
            # the GIL to another thread and waiting to take it back costs.
            judged = Judged(self.validator.judge(data, kind, owner=account, projects=projects, home=home, stamp=stamp))
        facts = judged.judgement.facts
        if not dry_run and facts is not None and not facts.launches:
            raise NotLaunchable(facts.kind)
        return judged

    def project_of(self, data: bytes, kind: str | None) -> str:
        """The project a JobSpec names (for the record of a refusal)."""
        facts = self.validator.facts(data, kind)
        return facts.project if facts is not None else ""

    def admit_batch(
        self,
        items: Sequence[BatchItem],
        account: str,
        *,
        dry_run: bool,
        grant: Grant | None = None,
        active: Callable[[], bool] = lambda: True,
        time_left: Callable[[], float | None] = lambda: None,
    ) -> list[Admission]:
        """Checks (and unless `dry_run`, admits) a batch, item by item in order: each
        admission as `admit` makes it, quota consumed in item order (a dry run counts
        what the real batch would consume). A dry run of one kind without packages is
        checked in parallel (`check_many`), the project of an item refused for it kept.

        A real batch that cannot be admitted whole is refused before any item opens a
        record: a key given to two items with different requests (KeyRepeated), a key
        that recalls another request's admission (KeyReused), an item of a kind that
        launches nothing (NotLaunchable) or whose package could not be read in time.
        A key that recalls the same request is answered with its first admission.

        `active` says whether the caller still waits: checked before each item, the
        batch stops once it does not (DeadlinePassed). `time_left` is the caller's
        remaining seconds, within which a package is read. Every failure is raised as
        BatchStopped, naming the item and holding the admissions made before it."""
        kinds = {item.kind for item in items}
        if dry_run and len(kinds) <= 1 and not any(item.package for item in items):
            kind = next(iter(kinds), None)
            reports = self.check_many([item.data for item in items], kind, account, grant)
            return [Admission(r, project=self.project_of(item.data, kind) if _forbidden(r) else "") for item, r in zip(items, reports, strict=True)]
        keys = [""] * len(items) if dry_run else [item.key for item in items]
        prints = [item.fingerprint if key else b"" for item, key in zip(items, keys, strict=True)]
        first: dict[str, int] = {}
        for i, key in enumerate(keys):
            j = first.setdefault(key, i) if key else i
            if prints[j] != prints[i]:
                raise BatchStopped(i, KeyRepeated(j), [])
        recalled = self.recall(account, list(first))
        for i, key in enumerate(keys):
            if key in recalled and recalled[key].fingerprint != prints[i]:
                raise BatchStopped(i, self.key_reused(recalled[key], key, grant), [])
        judged: list[Judged | None] = [None] * len(items)
        if not dry_run:
            for i, item in enumerate(items):
                if keys[i] in recalled:
                    continue  # replayed: it was launchable when first admitted
                try:
                    judged[i] = self.judge(item.data, item.kind, account, dry_run=False, grant=grant, package=item.package, timeout=time_left() if item.package else None)
                except (NotLaunchable, TimeoutError) as e:
                    raise BatchStopped(i, e, []) from e
        consumed: dict[str, int] | None = {} if dry_run else None
        results: list[Admission] = []
        for i, item in enumerate(items):
            try:
                if not active():
                    raise DeadlinePassed(len(results), len(items))
                key = keys[i]
                if key in recalled:
                    results.append(self.replay(recalled[key], key, prints[i], grant))
                else:
                    timeout = time_left() if item.package else None
                    results.append(self.admit(item.data, item.kind, account, dry_run=dry_run, package=item.package, judged=judged[i], grant=grant, key=key, fingerprint=prints[i], timeout=timeout, consumed=consumed))
            except Exception as e:
                raise BatchStopped(i, e, results) from e
        return results

    def recall(self, account: str, keys: Collection[str]) -> dict[str, Remembered]:
        """What each of `account`'s idempotency keys recalls within the window (keys
        that recall nothing are left out): AdmitBatch answers a retried batch without
        a check; a single admission's key is recalled in its commit group instead."""
        if self.store is None or not keys:
            return {}
        return self.store.recall(account, keys, self.config.jobs.idempotency_window)

    def replay(self, earlier: Remembered, key: str, fingerprint: bytes, grant: Grant | None = None) -> Admission:
        """The response of the first admission made with `key`, for a retry of the same
        request, judged under the grant in force: when `grant` no longer reaches the
        project of the job it opened, the retry fails with forge.project.forbidden and
        nothing names the job. KeyReused when `fingerprint` says it is another request."""
        lost = self._lost_project(earlier, grant)
        if earlier.fingerprint != fingerprint:
            raise KeyReused(key, "" if lost is not None else earlier.job_id)
        if lost is not None and grant is not None:
            # Worded as a fresh request's refusal: nothing tells of the job.
            return Admission(jobgate._core.refused_project(lost, list(grant.projects), kind=orjson.loads(earlier.report)["kind"]))
        return Admission(ReportView.from_dict(orjson.loads(earlier.report)), earlier.job_id, replayed=True)

    def key_reused(self, earlier: Remembered, key: str, grant: Grant | None) -> KeyReused:
        """KeyReused for `key` sent with another request than `earlier`'s: it names the
        job the key opened only while the grant in force reaches that job's project."""
        return KeyReused(key, "" if self._lost_project(earlier, grant) is not None else earlier.job_id)

    def _lost_project(self, earlier: Remembered, grant: Grant | None) -> str | None:
        """The project of the job `earlier` opened when `grant` does not reach it (a
        reload moved the account), else None."""
        if grant is None or "*" in grant.projects or self.store is None:
            return None
        project = self.store.project(earlier.job_id)
        return None if grant.reaches(project) else project

    def admit(
        self,
        data: bytes,
        kind: str | None,
        account: str,
        *,
        dry_run: bool,
        package: bytes = b"",
        judged: Judged | None = None,
        grant: Grant | None = None,
        key: str = "",
        fingerprint: bytes = b"",
        timeout: float | None = None,
        consumed: dict[str, int] | None = None,
        later: bool = False,
    ) -> Admission:
        """Checks (and unless `dry_run`, admits) one document; with `package`, a
        spec-bundle's supporting files are verified against that archive too. A real
        admission of a job_record or best_rec raises NotLaunchable and opens nothing;
        `judged`, from `judge`, is the document already judged. With `grant`,
        a JobSpec outside its projects fails (forge.project.forbidden) and a
        spec-bundle is admitted into its home project; without, nothing is scoped.

        With `key` (an idempotency key) and the request's `fingerprint`, a real
        admission opens a record only if the key recalls none; a key already used by
        the same request gives that admission back (`replayed`), by another request
        raises KeyReused. Dry runs ignore the key. The store recalls the key in the
        transaction that would open the record; an admission that does not get that
        far (a document that no longer reads as launchable, say) recalls it first
        when it fails, so that a retry is answered as the first admission was.

        With `timeout` (the call's remaining seconds), reading the package stops once
        it has passed, with TimeoutError. With `consumed` (a dry run of a batch's items
        in order), each project's usage counts the GPUs of the earlier items that passed,
        and a passing item adds its own: the dry run answers as the real batch would.

        With `later`, a record the store can open beside the call (`opens_later`: no
        quota applies and no key is sent) may still be committing when this returns:
        the caller calls `Admission.durable` before it answers, and meanwhile builds
        the answer while the store writes."""
        try:
            return self._admit_document(data, kind, account, dry_run=dry_run, package=package, judged=judged, grant=grant, key=key, fingerprint=fingerprint, timeout=timeout, consumed=consumed, later=later)
        except (KeyReused, StoreUnavailable, StoreFull):
            raise
        except Exception:
            earlier = self._recalled(account, key) if key and not dry_run else None
            if earlier is None:
                raise
            return self.replay(earlier, key, fingerprint, grant)

    def _recalled(self, account: str, key: str) -> Remembered | None:
        """What `key` recalls, for an admission that failed before the store: None when
        nothing, or when the store cannot say (the admission's own failure stands)."""
        try:
            return self.recall(account, [key]).get(key)
        except (StoreUnavailable, StoreFull):
            return None

    def _admit_document(
        self, data: bytes, kind: str | None, account: str, *, dry_run: bool, package: bytes, judged: Judged | None, grant: Grant | None, key: str, fingerprint: bytes, timeout: float | None = None, consumed: dict[str, int] | None = None, later: bool = False
    ) -> Admission:
        if judged is None:
            judged = self.judge(data, kind, account, dry_run=dry_run, grant=grant, package=package, timeout=timeout)
        admission = self._admit(judged, account, dry_run=dry_run, grant=grant, key=key, fingerprint=fingerprint, consumed=consumed, later=later)
        if judged.package is not None and not admission.replayed:  # a replay is stored as it was first shown
            admission.report = ReportView.from_dict(renamed(admission.report.to_dict(), judged.package, PACKAGE_NAME))
        if self.shadow is not None and not admission.replayed:
            projects = grant.projects if grant is not None else None
            home = grant.home if grant is not None else None
            self.shadow.offer_document(data, kind, account, projects, admission.report, package=package, gpus_in_use=admission.gpus_in_use, home=home)
        return admission

    def _admit(self, judged: Judged, account: str, *, dry_run: bool, grant: Grant | None, key: str, fingerprint: bytes, consumed: dict[str, int] | None, later: bool = False) -> Admission:
        facts = judged.judgement.facts
        home = grant.home if grant is not None else None
        project = charged_project(facts, home) if facts is not None else ""
        # Every kind that launches is charged; a project outside the grant is answered
        # by forge.project.forbidden alone, so its usage is not even read.
        launches = facts is not None and facts.launches
        outside = launches and grant is not None and not grant.reaches(project)
        verdict = Verdict(judged, self.quota(project) if launches and not outside else None)
        if outside and verdict.report.ok and grant is not None:
            # A launch is never admitted uncharged: should the core's reading of the
            # project ever pass one the grant does not reach, it is refused here.
            verdict.report = jobgate._core.refused_project(project, list(grant.projects), kind=facts.kind)

        if not dry_run and key and self.store is not None and facts is None:
            earlier = self.recall(account, [key]).get(key)  # no record to open: the key may recall one
            if earlier is not None:
                return self.replay(earlier, key, fingerprint, grant)
        if dry_run or self.store is None or facts is None:
            if self.store is not None and verdict.quota is not None:
                verdict(self.store.gpus_in_use(project) + (consumed.get(project, 0) if consumed is not None else 0))
                if consumed is not None and verdict.report.ok:
                    consumed[project] = consumed.get(project, 0) + facts.gpus
            return Admission(verdict.report, gpus_in_use=verdict.in_use, project=project)

        idempotency = IdempotencyKey(account, key, fingerprint, self.config.jobs.idempotency_window, verdict.shown) if key else None
        # Without a quota, the verdict does not read the usage: the store may decide at once.
        job = self._new_job(facts, account, grant, idempotency, reads_usage=verdict.quota is not None)
        if later and idempotency is None and verdict.quota is None and getattr(self.store, "opens_later", False):
            # Decided on nothing read, as a commit group would decide it; the store opens
            # the record beside the call (storable, or Unstorable before anything is
            # written), which waits for it before it answers.
            if not verdict(0):
                return Admission(verdict.report, gpus_in_use=verdict.in_use, project=project)
            job_id, pending = self.store.open_later(job)
            return Admission(verdict.report, job_id, gpus_in_use=verdict.in_use, project=project, pending=pending)
        outcome = self.committer.admit(job, verdict)
        if isinstance(outcome, Remembered):  # the key was used meanwhile (a concurrent retry, another replica)
            return self.replay(outcome, key, fingerprint, grant)
        return Admission(verdict.report, outcome or "", gpus_in_use=verdict.in_use, project=project)

    def _new_job(self, facts, account: str, grant: Grant | None, idempotency: IdempotencyKey | None = None, reads_usage: bool = True) -> NewJob:
        jobs = self.config.jobs
        return NewJob(
            id_prefix=f"{_segment(facts.network_arch, 'job')}-{_segment(facts.action, 'run')}",
            project=charged_project(facts, grant.home if grant is not None else None),
            owner=account,
            gpus=facts.gpus,
            image=facts.image or "unknown/unknown",
            network_arch=facts.network_arch or facts.kind,
            action=facts.action or "run",
            platform=jobs.platform,
            storage_tier=jobs.storage_tier,
            results_root=jobs.results_root,
            document=facts.stamped,
            upload_excludes=list(facts.upload_excludes),
            idempotency=idempotency,
            reads_usage=reads_usage,
        )
