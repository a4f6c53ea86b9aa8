"""Input handling: every form a document arrives in, and every way it can be broken.
Nothing here may crash, hang or overflow the stack."""

from __future__ import annotations

import json

import pytest
import yaml

import jobgate
from tests.helpers import EXAMPLES, require_shared, sample

require_shared()

JOBSPEC = sample("jobspec.valid.json")
BUNDLE_BYTES = (EXAMPLES / "spec_bundle.config_mode.dino_train.valid.json").read_bytes()


def rules_of(report: jobgate.Report) -> list[tuple[str, str]]:
    return [(v.rule, v.field) for v in report.violations]


def test_bytes_str_dict_and_yaml_give_one_report(validator):
    as_dict = json.loads(BUNDLE_BYTES)
    as_yaml = yaml.safe_dump(as_dict, sort_keys=False)
    reports = [
        validator.check(BUNDLE_BYTES),
        validator.check(BUNDLE_BYTES.decode()),
        validator.check(as_dict),
        validator.check(as_yaml),
        validator.check(as_yaml.encode()),
        validator.check(bytearray(BUNDLE_BYTES)),
    ]
    assert all(r == reports[0] for r in reports)
    assert reports[0].verdict == "pass" and reports[0].kind == "spec_bundle"


def test_yaml_violations_point_into_the_document(validator):
    doc = "network_arch: dino\naction: train\nimage: nvcr.io/x:1\nmode: config\ncommand: run\nconfig_format: yaml\nspec:\n  train.lr: 1\ndeclared_inputs: []\ndeclared_outputs: [{spec_key: results_dir, type: folder}]\ncompute_shape: {gpus: 1, nodes: 1}\n"
    assert rules_of(validator.check(doc)) == [("tao.mode.config_path_placeholder", "/command"), ("tao.dotted_key", "/spec/train.lr")]


@pytest.mark.parametrize(
    "data, message_part",
    [
        (b'{"apiVersion": ', "not valid JSON"),
        (b'{"a": "\xff\xfe"}', "UTF-8"),
        (b"a: \xff\n", "UTF-8"),
        (b"[1, 2, 3]", "top level must be an object"),
        (b'"just a string"', "top level must be an object"),
        (b"42", "top level must be an object"),
        (b"", "empty"),
        (b"   \n  ", "empty"),
        (b"a: [unclosed\n", "not valid YAML"),
        (b"a: 1\n---\nb: 2\n", "more than one document"),
        (b"a: !!python/object:os.system x\n", "tag"),
    ],
)
def test_unreadable_documents_are_json_syntax(validator, data, message_part):
    report = validator.check(data)
    assert rules_of(report) == [("json.syntax", "")]
    assert message_part in report.violations[0].message
    assert report.verdict == "fail"


def test_duplicate_keys_are_reported_at_each_repeat(validator):
    doc = b'{"network_arch": "a", "network_arch": "b", "spec": {"x": {"y": 1, "y": 2}}}'
    report = validator.check(doc, kind="spec_bundle")
    dupes = [f for r, f in rules_of(report) if r == "json.duplicate_key"]
    assert dupes == ["/network_arch", "/spec/x/y"]


def test_a_repeated_key_is_reported_once_per_rule(validator):
    """A pointer cannot tell a key's occurrences apart: one violation of each rule."""
    report = validator.check(b'{"a": 1, "a": 1, "a": 2, "mode": "args"}', kind="spec_bundle")
    at_a = [r for r, f in rules_of(report) if f == "/a"]
    assert at_a == ["json.duplicate_key", "schema.additionalProperties"]


def test_yaml_duplicate_keys_too(validator):
    report = validator.check("apiVersion: forge/v2\nkind: TrainingJob\nkind: TrainingJob\n")
    assert ("json.duplicate_key", "/kind") in rules_of(report)


def test_json_pointer_escaping(validator):
    doc = json.loads(BUNDLE_BYTES)
    doc["spec"]["a/b~c.d"] = 1
    assert rules_of(validator.check(doc)) == [("tao.dotted_key", "/spec/a~1b~0c.d")]


@pytest.mark.parametrize("opener, closer", [("[", "]"), ('{"a":', "}")])
def test_nesting_100000_deep_is_limits_depth(validator, opener, closer):
    deep = (opener * 100_000 + "1" + closer * 100_000).encode()
    wrapped = b'{"x": ' + deep + b"}"
    assert rules_of(validator.check(wrapped)) == [("limits.depth", "")]
    yaml_deep = b"x: " + ("[" * 100_000).encode()
    assert rules_of(validator.check(yaml_deep))[0][0] in {"limits.depth"}


def test_depth_limit_is_exact(validator):
    ok = '{"a":' * 63 + '{"network_arch": 1}' + "}" * 63
    too_deep = '{"a":' * 64 + '{"network_arch": 1}' + "}" * 64
    assert "limits.depth" not in {r for r, _ in rules_of(validator.check(ok))}
    assert rules_of(validator.check(too_deep)) == [("limits.depth", "")]


def test_a_50_mb_document_is_refused_by_size(validator):
    big = b'{"apiVersion": "forge/v2", "pad": "' + b"x" * (50 * 1024 * 1024) + b'"}'
    report = validator.check(big)
    assert rules_of(report) == [("limits.size", "")]
    assert str(len(big)) in report.violations[0].message


def test_a_50_mb_document_within_a_raised_limit_is_checked():
    v = jobgate.Validator({"limits": {"max_document_bytes": 64 * 1024 * 1024}})
    doc = json.loads(BUNDLE_BYTES)
    doc["spec"]["blob"] = "x" * (50 * 1024 * 1024)
    report = v.check(json.dumps(doc).encode())
    assert report.verdict == "pass"


def test_yaml_alias_bomb_is_refused():
    bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 12)
    )
    report = jobgate.Validator().check(bomb)
    assert rules_of(report) == [("limits.size", "")]


def test_dict_values_json_cannot_hold_are_json_syntax(validator):
    report = validator.check({"apiVersion": "forge/v2", "when": {1, 2}})
    assert rules_of(report) == [("json.syntax", "")]
    assert "JSON" in report.violations[0].message


@pytest.mark.parametrize(
    "data, message",
    [
        (b'{"a":1}{"b":2}', 'not valid JSON: trailing characters at line 1 column 8, near "{\\"b\\":2}"'),
        (b'{"a": NaN}', "not valid JSON: NaN at line 1 column 7 is not a JSON number; write null or a string instead"),
        (b'{"a":\n -Infinity}', "not valid JSON: -Infinity at line 2 column 2 is not a JSON number; write null or a string instead"),
        (b'{"a":1,', "not valid JSON: EOF while parsing an object at line 1 column 7: the document ends before it is complete"),
        (b'{"a" 1}', 'not valid JSON: expected `:` at line 1 column 6, near "1}"'),
    ],
)
def test_a_syntax_error_says_where_and_what(validator, data, message):
    report = validator.check(data)
    assert [(v.rule, v.field, v.message) for v in report.violations] == [("json.syntax", "", message)]


@pytest.mark.parametrize(
    "data, line, column",
    [
        (b'{"a":1}{"b":2}', 1, 1),
        (b"\n\n  [1, 2]", 3, 3),
        (b"", 1, 1),
        (b'\n{"x": ' + b'{"a":' * 70 + b"1" + b"}" * 71, 2, 1),
        (b"# a comment\nkind: [1\n", 2, 1),
        (b"# a comment\nflag: yes\n", 2, 1),
    ],
)
def test_a_refused_text_document_is_placed_where_it_starts(validator, data, line, column):
    """Refusals are about the whole document (field ""), placed at its first value as
    every whole-document violation of a text document is (SPEC section 2)."""
    (v,) = validator.check(data).violations
    assert (v.field, v.line, v.column) == ("", line, column)


@pytest.mark.parametrize("value, number", [(".NaN", "NaN"), (".inf", "infinity"), ("-.Inf", "minus infinity")])
def test_yaml_non_finite_numbers_are_named(validator, value, number):
    (v,) = validator.check(f"network_arch: dino\nlr: {value}\n").violations
    assert (v.rule, v.message) == ("json.syntax", f'the YAML value "{value}" is the number {number}, which is not a JSON number; quote it ("{value}") for a string, or write null')


def test_an_oversized_document_is_left_unplaced_unread(validator):
    (v,) = validator.check(b"\n" * (2 * 1024 * 1024)).violations
    assert (v.rule, v.line, v.column) == ("limits.size", None, None)


def test_a_dict_holding_nan_is_refused_as_its_text_is(validator):
    doc = json.loads(BUNDLE_BYTES)
    for bad in (float("nan"), float("inf"), float("-inf")):
        doc["spec"]["lr"] = bad
        for report in (validator.check(doc), validator.check_many([doc])[0]):
            assert [(v.rule, v.field, v.line) for v in report.violations] == [("json.syntax", "", None)]
            assert "NaN or infinite" in report.violations[0].message
        assert rules_of(validator.check(json.dumps(doc))) == [("json.syntax", "")]
    doc["spec"]["lr"] = None  # a null the document really holds is read as null
    assert validator.check(doc) == validator.check(json.dumps(doc))


def test_a_str_with_a_lone_surrogate_is_refused_not_raised(validator):
    text = '{"mode": "args", "x": "\ud800"}'
    for report in (validator.check(text), validator.check_many([text])[0]):
        assert rules_of(report) == [("json.syntax", "")]
        assert report.violations[0].message.startswith("the document is not valid UTF-8: ")


def test_non_document_types_raise_type_error(validator):
    with pytest.raises(TypeError, match="bytes, str or dict"):
        validator.check(42)
    with pytest.raises(ValueError, match="unknown kind"):
        validator.check(b"{}", kind="pipeline")


def test_kind_overrides_detection(validator):
    report = validator.check(BUNDLE_BYTES, kind="job_record")
    assert report.kind == "job_record"
    assert report.verdict == "fail"
    assert ("schema.required", "/transitions") in rules_of(report)


def test_violations_are_sorted_by_field_then_rule(validator):
    doc = json.loads(BUNDLE_BYTES)
    doc.update({"zzz": 1, "mode": "args", "command": "x {bad}"})
    fields = [(v.field, v.rule) for v in validator.check(doc).violations]
    assert fields == sorted(fields)


def test_check_many_keeps_order_and_matches_check(validator):
    docs = [BUNDLE_BYTES, b"{", json.dumps(JOBSPEC).encode(), {"transitions": []}] * 50
    for threads in (None, 1, 2):
        assert validator.check_many(docs, threads=threads) == [validator.check(d) for d in docs]
    with pytest.raises(ValueError):
        validator.check_many(docs, threads=0)


def test_a_million_keys_stay_linear(validator):
    import time

    doc = b'{"network_arch": "x", "spec": {' + b",".join(b'"k%d": 1' % i for i in range(300_000)) + b', "k7": 2}}'
    v = jobgate.Validator({"limits": {"max_document_bytes": 16 * 1024 * 1024}})
    start = time.perf_counter()
    report = v.check(doc)
    assert ("json.duplicate_key", "/spec/k7") in rules_of(report)
    assert time.perf_counter() - start < 30  # quadratic would take hours; this is not a timing test
