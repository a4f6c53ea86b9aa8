"""Admission without the wire: check a document as the authenticated account, apply
the project quota atomically with opening the record, and hand out the job id.

Shared by every RPC (Admit, AdmitBatch, AdmitStream) so their reports are the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

import jobgate
from jobgate.config import Config
from jobgate.store import JobStore, NewJob

KIND_NAMES = {0: None, 1: "jobspec", 2: "spec_bundle", 3: "job_record", 4: "best_rec"}


@dataclass
class Admission:
    report: jobgate.Report
    job_id: str = ""


def _segment(text: str, fallback: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return cleaned[:40] or fallback


def _parse(data: bytes) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        import yaml

        try:
            doc = yaml.safe_load(data)
        except yaml.YAMLError:
            return None
    return doc if isinstance(doc, dict) else None


def _gpus_of(doc: dict[str, Any], kind: str) -> int:
    try:
        if kind == "jobspec":
            pools = doc.get("spec", {}).get("resources", {}).get("pools") or []
            return sum(int(p.get("nodes", 1)) * int(p.get("gpus_per_node", 1)) for p in pools)
        if kind == "spec_bundle":
            shape = doc.get("compute_shape", {})
            return int(shape.get("gpus", 0)) * int(shape.get("nodes", 1))
    except (TypeError, ValueError, AttributeError):
        pass
    return 0


class Gate:
    def __init__(self, config: Config, store: JobStore | None) -> None:
        self.config = config
        self.validator = jobgate.Validator(config)
        self.store = store

    def reload(self, config: Config) -> None:
        """Swaps in a new configuration; calls already running finish with the old one."""
        validator = jobgate.Validator(config)
        self.config, self.validator = config, validator

    def quota(self, project: str) -> int | None:
        return self.config.project_quota(project)

    def check_many(self, documents: list[bytes], kind: str | None, account: str) -> list[jobgate.Report]:
        """Dry-run reports for many documents, in parallel. Project quotas are applied
        from the store's current usage, as a dry-run Admit would."""
        if not self._has_quotas():
            return self.validator.check_many(documents, kind, owner=account)
        return [self.admit(d, kind, account, dry_run=True).report for d in documents]

    def _has_quotas(self) -> bool:
        return self.config.quota.default is not None or bool(self.config.quota.projects)

    def admit(self, data: bytes, kind: str | None, account: str, *, dry_run: bool) -> Admission:
        needs_parse = not dry_run or self._has_quotas()
        doc = _parse(data) if needs_parse else None
        detected = kind or self._kind_of(doc)
        project = ""
        if doc is not None and detected == "jobspec":
            meta = doc.get("metadata")
            project = str(meta.get("project") or "") if isinstance(meta, dict) else ""
        quota = self.quota(project) if detected == "jobspec" else None

        def check(in_use: int | None) -> jobgate.Report:
            if quota is None or in_use is None:
                return self.validator.check(data, kind, owner=account)
            return self.validator.check(data, kind, owner=account, project_gpus_in_use=in_use, project_quota=quota)

        if dry_run or self.store is None:
            in_use = self.store.gpus_in_use(project) if (self.store is not None and quota is not None) else None
            return Admission(check(in_use))

        report_box: list[jobgate.Report] = []

        def decide(in_use: int) -> bool:
            report_box.append(check(in_use))
            return report_box[-1].ok

        new_job = self._new_job(doc or {}, detected or "unknown", account, project, data)
        job_id = self.store.admit(new_job, decide)
        return Admission(report_box[-1], job_id or "")

    @staticmethod
    def _kind_of(doc: dict[str, Any] | None) -> str | None:
        if doc is None:
            return None
        if "apiVersion" in doc:
            return "jobspec"
        if "transitions" in doc:
            return "job_record"
        if "experiment_id" in doc or "best" in doc:
            return "best_rec"
        if "mode" in doc or "command" in doc or "network_arch" in doc:
            return "spec_bundle"
        return None

    def _new_job(self, doc: dict[str, Any], kind: str, account: str, project: str, data: bytes) -> NewJob:
        jobs = self.config.jobs
        if kind == "jobspec":
            spec = doc.get("spec") or {}
            recipe = spec.get("recipe") or {}
            method = str(recipe.get("name") or "job").rsplit("/", 1)[-1]
            exp = str((spec.get("source") or {}).get("exp") or "run").rstrip("/").rsplit("/", 1)[-1]
            image = str((spec.get("framework") or {}).get("image") or "") or f"recipe:{recipe.get('name', '')}@{recipe.get('version', '')}"
            network_arch, action = method, exp
            meta = doc.get("metadata")
            if isinstance(meta, dict):
                doc = {**doc, "metadata": {**meta, "owner": account}}  # stamped with the authenticated account
                data = orjson.dumps(doc)
            excludes: list[str] = []
        else:
            network_arch, action = str(doc.get("network_arch") or kind), str(doc.get("action") or "run")
            image = str(doc.get("image") or "unknown/unknown")
            excludes = [str(x) for x in doc.get("upload_excludes") or []]
        return NewJob(
            id_prefix=f"{_segment(network_arch, 'job')}-{_segment(action, 'run')}",
            project=project,
            owner=account,
            gpus=_gpus_of(doc, kind),
            image=image,
            network_arch=network_arch,
            action=action,
            platform=jobs.platform,
            storage_tier=jobs.storage_tier,
            results_root=jobs.results_root,
            document=data,
            upload_excludes=excludes,
        )
