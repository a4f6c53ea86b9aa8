"""What crosses into the core besides documents: the deployment's settings, typed and
complete; a configuration in every form `jobgate.Validator` accepts; and the reports
of inputs refused before they are read, worded by the core."""

from __future__ import annotations

import pickle
import threading
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

import jobgate
from jobgate import _core, samples, sources
from jobgate.config import Limits, core_settings


def settings(**overrides):
    keys = {
        "max_document_bytes": 1024,
        "max_depth": 8,
        "max_package_bytes": 1 << 20,
        "max_package_members": 10,
        "max_package_ratio": 100,
        "package_cache_bytes": 0,
        "max_violations": 10,
        "registries": None,
        "series": None,
        "max_gpus_per_job": None,
        "catalog": None,
        "rules": {},
        "project_rules": {},
    }
    return _core.Settings(**{**keys, **overrides})


def test_settings_name_every_key():
    assert repr(settings()) == "Settings(catalog=0, max_document_bytes=1024, max_depth=8)"
    with pytest.raises(TypeError, match="registries"):
        _core.Settings(max_document_bytes=1024, max_depth=8)
    with pytest.raises(TypeError, match="allowlist"):
        settings(allowlist=["nvcr.io"])
    with pytest.raises(TypeError):
        _core.Validator({"registries": ["nvcr.io"]})


def test_a_registry_allowlist_reaches_the_core():
    image = b'{"apiVersion": "forge/v2", "spec": {"framework": {"image": "docker.io/x:1"}}}'
    allowed = _core.Validator(settings(registries=["nvcr.io"])).check(image)
    assert "forge.framework.image_registry" in {v.rule for v in allowed.violations}
    assert "forge.framework.image_registry" not in {v.rule for v in _core.Validator(settings()).check(image).violations}


def test_a_catalog_entry_names_every_key_and_reads_its_range():
    entry = dict(name="a/b", version="1", digest="d", runtime_id="r", framework_kind="k", requires_core=">=1", observability="platform", custom=False)
    assert repr(_core.CatalogEntry(**entry)) == "CatalogEntry(name=\"a/b\", version=\"1\")"
    with pytest.raises(ValueError, match="observability"):
        _core.CatalogEntry(**{**entry, "observability": "elsewhere"})
    with pytest.raises(ValueError, match="PEP 440"):
        _core.CatalogEntry(**{**entry, "requires_core": "bogus"})
    with pytest.raises(TypeError):
        _core.CatalogEntry(**{k: v for k, v in entry.items() if k != "custom"})


def test_every_form_of_configuration_builds_the_same_validator(tmp_path):
    path = samples.path(samples.DEMO_CONFIG)
    config = jobgate.load_config(path)
    forms = [path, str(path), config, tomllib.loads(Path(path).read_text(encoding="utf-8"))]
    built = [jobgate.Validator(form) for form in forms] + [jobgate.Validator(config=config)]
    assert {repr(v) for v in built} == {"Validator(catalog=4, max_document_bytes=1048576, max_depth=64)"}
    assert all(isinstance(v, jobgate.Validator) and isinstance(v, _core.Validator) for v in built)
    assert isinstance(core_settings(config), _core.Settings)
    assert repr(jobgate.Validator()) == repr(jobgate.Validator(None)) == repr(_core.Validator())
    with pytest.raises(TypeError, match="not int"):
        jobgate.Validator(3)
    with pytest.raises(jobgate.ConfigError, match="limits.max_depth"):
        jobgate.Validator({"limits": {"max_depth": 0}})


def test_a_validator_is_shared_not_pickled():
    validator = jobgate.Validator(samples.path(samples.DEMO_CONFIG))
    with pytest.raises(TypeError, match="cannot pickle"):
        pickle.dumps(validator)
    reports = []
    threads = [threading.Thread(target=lambda: reports.append(validator.check(b'{"apiVersion": "forge/v2"}').to_json())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(reports)) == 1 and len(reports) == 8


def test_a_file_refused_unread_gets_the_report_the_core_gives_when_it_reads_it(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    refused = sources.read_all([str(big)], 1024)[0]
    assert isinstance(refused, sources.TooLarge)
    read = jobgate.Validator({"limits": {"max_document_bytes": 1024}}).check(big.read_bytes(), kind="jobspec")
    assert refused.report("jobspec") == read.to_dict()
    assert str(refused) == read.violations[0].message == "the document is 2048 bytes, over the limit of 1024 bytes"


def test_refusals_name_their_rules():
    assert _core.refused_too_large(None, 10).to_dict() == {
        "kind": "unknown",
        "verdict": "fail",
        "violations": [{"rule": "limits.size", "field": "", "message": "the document is more than 10 bytes, over the limit of 10 bytes", "severity": "error"}],
    }
    assert _core.refused_unreadable("cannot read x: gone", kind="spec_bundle").violations[0].rule == "json.syntax"
    package = _core.refused_package_too_large("pkg", 12, 10, kind="spec_bundle")
    assert (package.kind, package.violations[0].rule) == ("spec_bundle", "limits.size")
    assert package.violations[0].message == "the package pkg holds 12 bytes, over the limit of 10 bytes (limits.max_package_bytes)"


def test_the_quota_lookup_is_the_rules_own():
    quota = {"default": 8, "projects": {"lab": 64}}
    assert _core.project_quota("lab", **quota) == 64
    assert _core.project_quota("other", **quota) == 8
    assert _core.project_quota("other", default=None, projects={}) is None
    # The same lookup judges forge.quota.project in a batch.
    doc = b'{"apiVersion": "forge/v2", "metadata": {"project": "lab"}, "spec": {"resources": {"pools": [{"name": "a", "nodes": 9, "gpus_per_node": 8}]}}}'
    report = jobgate.Validator().check(doc, project_quota=_core.project_quota("lab", **quota), project_gpus_in_use=0)
    assert "forge.quota.project" in {v.rule for v in report.violations}


def test_the_limit_defaults_are_the_cores_own():
    assert _core.DEFAULT_LIMITS == {
        "max_document_bytes": 1 << 20,
        "max_depth": 64,
        "max_depth_ceiling": 1024,
        "max_package_bytes": 1 << 30,
        "max_package_members": 100_000,
        "max_package_ratio": 100,
        "package_cache_bytes": 64 << 20,
        "max_violations": 1000,
    }
    # Every default the core has is the configuration's, key by key.
    read = set(_core.DEFAULT_LIMITS) - {"max_depth_ceiling"}
    assert read <= set(Limits.model_fields)
    assert {k: getattr(Limits(), k) for k in read} == {k: _core.DEFAULT_LIMITS[k] for k in read}
    Limits(max_depth=1024)
    with pytest.raises(ValidationError, match="less than or equal to 1024"):
        Limits(max_depth=1025)
