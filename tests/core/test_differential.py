"""Differential tests against the published schemas (the `jsonschema` package) and
against `starforge-core`'s `JobSpec.from_dict`.

The invariant: jobgate never passes a document that the published schema or
starforge-core rejects. Where jobgate is deliberately stricter, the rule and the
reason are listed here and in docs/strictness.md; anything else is a failure.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis_jsonschema import from_schema
from starforge.contract.spec import JobSpec

import jobgate
from tests.helpers import EXAMPLES, require_shared, sample, schema

require_shared()

VALIDATOR = jobgate.Validator()
KINDS = ("spec_bundle", "job_record", "best_rec")
PUBLISHED = {k: jsonschema.Draft202012Validator(schema(k)) for k in KINDS}
# In CI the examples are derandomized, so a run is reproducible and a landing is never
# blocked by a new random draw; locally every run explores new ones.
IN_CI = bool(os.environ.get("CI"))
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck), derandomize=IN_CI)
# Generating from the published schemas is slow (hypothesis-jsonschema); fewer, richer examples.
GENERATED = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=IN_CI)

# Rules by which jobgate rejects documents the published schema accepts, on purpose.
STRICTER = {
    "spec_bundle": {
        "tao.spec_key.syntax",  # the schema takes any non-empty string as a pointer
        "tao.spec_key.unresolved",  # binding is semantic
        "tao.execution.secret",  # credentials never enter a bundle
        "tao.supporting_file.duplicate_destination",
        "tao.gpu_spec_key.mismatch",  # (a warning; never blocks)
        "schema.maximum",  # node and GPU counts beyond 2^31 - 1
    },
    "job_record": {"tao.record.first_state", "tao.record.after_terminal", "tao.record.terminal_mismatch", "tao.record.secret"},
    "best_rec": {"tao.dotted_key", "tao.best_rec.not_best"},  # the schema checks only the top level of best.specs
}


def lookup(doc: Any, pointer: str) -> Any:
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


def has_lone_surrogate(doc: Any) -> bool:
    try:
        json.dumps(doc, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def deliberate(kind: str, doc: Any, v: jobgate.Violation) -> bool:
    """Whether an error on a schema-valid document is one of the documented stricter cases."""
    if v.rule in STRICTER[kind]:
        return True
    if v.rule == "forge.quota.job" and v.field == "/compute_shape":  # a total beyond 2^31 - 1 GPUs
        shape = doc["compute_shape"]
        return shape["nodes"] * shape["gpus"] > 2**31 - 1
    if v.rule == "json.syntax":  # strings that are not Unicode text (lone surrogates)
        return has_lone_surrogate(doc)
    value = lookup(doc, v.field) if v.field else None
    if v.rule in ("schema.pattern", "tao.supporting_file.path") and isinstance(value, str):
        # Python's `$` also matches before a final newline; backslashes and NUL in paths;
        # a path whose last segment is empty or '.' names a directory, not a file.
        names_a_directory = v.rule == "tao.supporting_file.path" and value.rsplit("/", 1)[-1] in ("", ".")
        return value.endswith("\n") or "\\" in value or "\0" in value or names_a_directory
    return False


def generation_schema(kind: str) -> dict[str, Any]:
    """The published schema with `$id` dropped and the recursive nested dict unrolled two
    levels, which hypothesis-jsonschema can generate from. Validation uses the original."""
    s = copy.deepcopy(schema(kind))
    s.pop("$id", None)
    if "nestedDict" in s.get("$defs", {}):
        leaf = {"type": ["string", "number", "boolean", "null"]}
        inner = {"type": "object", "propertyNames": {"pattern": "^[^.]+$"}, "additionalProperties": {"anyOf": [leaf, {"type": "array", "items": leaf}]}}
        s["$defs"]["nestedDict"] = {
            "type": "object",
            "propertyNames": {"pattern": "^[^.]+$"},
            "additionalProperties": {"anyOf": [leaf, inner, {"type": "array", "items": {"anyOf": [leaf, inner]}}]},
        }
        del s["$defs"]["nestedValue"]
    return s


@pytest.mark.parametrize("kind", KINDS)
def test_schema_valid_documents_pass_or_are_deliberately_stricter(kind):
    @GENERATED
    @given(from_schema(generation_schema(kind)))
    def prop(doc):
        assert PUBLISHED[kind].is_valid(doc)
        report = VALIDATOR.check(doc, kind=kind)
        unexpected = [v for v in report.violations if v.severity == "error" and not deliberate(kind, doc, v)]
        assert unexpected == [], (doc, unexpected)

    prop()


# ---------------------------------------------------------------- mutations

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.sampled_from(["", " ", ".", "..", "a.b", "../x", "/abs", "a\\b", "config", "args", "PENDING", "COMPLETE",
                       "yaml", "folder", "x/y", "sha256:" + "a" * 64, "a" * 64, "{job_id}", "{nope}", "run/a/b"])
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.sampled_from(["a", "b.c", "", "mode", "spec"]) | st.text(max_size=4), children, max_size=3),
    max_leaves=6,
)


def pointers(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += pointers(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += pointers(v, prefix + (i,))
    return out


@st.composite
def mutated(draw, base: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 3))):
        paths = pointers(doc)
        path = draw(st.sampled_from(paths))
        action = draw(st.sampled_from(["replace", "delete", "insert"]))
        if not path:
            continue
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        last = path[-1]
        if action == "replace":
            parent[last] = draw(JSON_VALUES)
        elif action == "delete":
            del parent[last]
        else:
            target = parent[last]
            if isinstance(target, dict):
                target[draw(st.sampled_from(["extra", "x.y", "", "args", "spec", "config_format", "optional"]))] = draw(JSON_VALUES)
            elif isinstance(target, list):
                target.append(draw(JSON_VALUES))
    return doc


TAO_BASES = {
    "spec_bundle": [json.loads(p.read_bytes()) for p in sorted(EXAMPLES.glob("spec_bundle.*.valid.json"))],
    "job_record": [json.loads(p.read_bytes()) for p in sorted(EXAMPLES.glob("job_record.*valid.json"))],
    "best_rec": [json.loads((EXAMPLES / "best_rec.valid.json").read_bytes())],
}


@pytest.mark.parametrize("kind", KINDS)
def test_no_false_admits_on_mutated_examples(kind):
    @SETTINGS
    @given(st.sampled_from(TAO_BASES[kind]).flatmap(mutated))
    def prop(doc):
        report = VALIDATOR.check(doc, kind=kind)
        if not PUBLISHED[kind].is_valid(doc):
            assert report.verdict == "fail", (doc, list(PUBLISHED[kind].iter_errors(doc))[:3])

    prop()


def starforge_accepts(doc: Any) -> bool:
    try:
        JobSpec.from_dict(doc)
    except Exception:  # noqa: BLE001 - any exception is a rejection by the client
        return False
    return True


JOBSPEC_BASES = [
    sample("jobspec.valid.json"),
    {
        "apiVersion": "forge/v2",
        "kind": "TrainingJob",
        "metadata": {"name": "m"},
        "spec": {
            "recipe": {"name": "verl/sft", "version": "0.8.0", "digest": "sha256:d6"},
            "source": {"exp": "experiments/x"},
            "framework": {"kind": "verl", "version": "0.8.0"},
            "resources": {"pools": [{"name": "p", "nodes": 1, "gpus_per_node": 1}]},
            "evaluation": {"suites": ["gsm8k"], "gates": [{"metric": "gsm8k/em", "min": 0.4}]},
            "data": {"volumes": ["alice/docs"], "output_dataset": "alice/out@v1", "quality": {"overlap_with": "alice/test", "max_overlap_ratio": 0.1}},
        },
        "provenance": {"core_version": "0.3.2"},
    },
]


@pytest.mark.parametrize("image", ["//0", "a//", "nvcr.io/x:1"])
def test_found_by_hypothesis_images_the_pattern_accepts(image):
    doc = {**TAO_BASES["spec_bundle"][0], "image": image}
    assert PUBLISHED["spec_bundle"].is_valid(doc)
    assert VALIDATOR.check(doc, kind="spec_bundle").verdict == "pass"


def test_bases_are_accepted_by_both():
    for base in JOBSPEC_BASES:
        assert starforge_accepts(base)
        assert VALIDATOR.check(base).verdict == "pass"


@SETTINGS
@given(st.sampled_from(JOBSPEC_BASES).flatmap(mutated))
def test_no_false_admits_against_starforge(doc):
    report = VALIDATOR.check(doc, kind="jobspec")
    if not starforge_accepts(doc):
        assert report.verdict == "fail", doc


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_arbitrary_bytes_never_crash(data):
    report = VALIDATOR.check(data)
    assert report.verdict in ("pass", "fail")
    assert all(v.rule and isinstance(v.field, str) for v in report.violations)


def string_paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in [prefix + (k,)] * isinstance(v, str) + string_paths(v, prefix + (k,))]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in [prefix + (i,)] * isinstance(v, str) + string_paths(v, prefix + (i,))]
    return []


ALL_BASES = [(k, d) for k, docs in TAO_BASES.items() for d in docs] + [("jobspec", d) for d in JOBSPEC_BASES]
TRICKY_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["5🅀ÌL𑊑/¦", "é=x", "{é}", "hf_é1234567890", "a://é:é@é", "run/é/é@step=1", "a[é]", "a.é[0]", "/é", "é/..", "ı/İ"]
)


@SETTINGS
@given(st.sampled_from(ALL_BASES).flatmap(lambda kd: st.tuples(st.just(kd), st.sampled_from(string_paths(kd[1])), TRICKY_TEXT)))
def test_arbitrary_text_in_any_string_never_panics(case):
    (kind, base), path, text = case
    doc = copy.deepcopy(base)
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = text
    report = VALIDATOR.check(doc, kind=kind)  # a panic would raise RuntimeError here
    assert report.verdict in ("pass", "fail")


def object_paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if isinstance(doc, dict) else []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        out += object_paths(v, prefix + (k,))
    return out


@SETTINGS
@given(st.sampled_from(ALL_BASES).flatmap(lambda kd: st.tuples(st.just(kd), st.sampled_from(object_paths(kd[1])), TRICKY_TEXT, TRICKY_TEXT)))
def test_arbitrary_keys_anywhere_never_panic(case):
    (kind, base), path, key, value = case
    doc = copy.deepcopy(base)
    node = doc
    for p in path:
        node = node[p]
    node[key] = value
    assert VALIDATOR.check(doc, kind=kind).verdict in ("pass", "fail")
    assert VALIDATOR.check(json.dumps(doc, ensure_ascii=False).encode(), kind=kind).verdict in ("pass", "fail")
