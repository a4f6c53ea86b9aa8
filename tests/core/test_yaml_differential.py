"""jobgate's reading of YAML against the consumer's: PyYAML's `safe_load`.

The invariant (SPEC §1, docs/strictness.md): a YAML document that jobgate reads means
exactly what `yaml.safe_load` builds from the same text, or jobgate refuses it. The
documents are generated with every construct where YAML readers part ways: tags on
scalars and collections, anchors and aliases (on keys, on later items, as keys),
merge keys, and every scalar form (plain, quoted, block) with the YAML 1.1 / 1.2
ambiguities. Named regressions follow the property.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jobgate
from tests.helpers import sample

IN_CI = bool(os.environ.get("CI"))
SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck), derandomize=IN_CI)

# Plain scalars where YAML 1.1 and 1.2 readers agree or disagree, and ordinary words.
PLAIN = [
    "yes", "no", "Yes", "NO", "on", "Off", "y", "n", "true", "True", "FALSE", "null", "Null", "~",
    "010", "00", "0", "-0", "+1", "-7", "1_000", "1:20", "12:30:00", "1:20.5", "190:20:30.15",
    "0x1F", "-0x1f", "0o17", "0b101", "1e3", "1E3", "1.5e3", "1.5e+3", "1.5E-3", "6.8523015e+5",
    "685_230.15", ".5", "-.5", "5.", "1.0", "-1.25", "._5", ".inf", "-.Inf", ".nan",
    "2001-12-14", "2001-12-14t21:59:43.10-05:00", "2002-12-14 21:59:43.10 -5", "2001-1-1",
    "=", "-", "hello", "a b", "x-y", "a.b", "v1.2.3", "http://x/y", "12ab", "1.2.3", "0xZZ",
    "-", "+", ".", "not-a-date-2001-12-14",
]
# Plain scalars both readers agree on: most of a generated document, so that most
# documents are read and the comparison has something to compare.
AGREED = ["hello", "a b", "x-y", "a.b", "v1.2.3", "1", "-7", "0", "1.5", "-1.25", "0x1F", "1.5e+3", ".5", "5.", "true", "False", "null", "~", "y", "n", "http://x/y", "12ab"]
TAGS = [
    "!!str", "!!int", "!!float", "!!bool", "!!null", "!!map", "!!seq", "!!set", "!!omap",
    "!!pairs", "!!binary", "!!timestamp", "!!merge", "!foo", "!", "!<tag:yaml.org,2002:str>",
    "!<tag:yaml.org,2002:map>", "!<tag:yaml.org,2002:seq>", "!!python/object/apply:os.system",
    "!!python/name:os.system",
]
ESCAPES = ["\\n", "\\t", "\\\\", '\\"', "\\x41", "\\u00e9", "\\U0001F600", "\\/", "\\N", "\\L", "\\P", "\\_", "\\0", "\\e", "\\ "]
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6)


class Doc:
    """Builds YAML text while it is drawn, remembering the anchors already complete."""

    def __init__(self, data: st.DataObject) -> None:
        self.data = data
        self.anchors: list[str] = []
        self.next_anchor = 0

    def draw(self, strategy: st.SearchStrategy[Any]) -> Any:
        return self.data.draw(strategy)

    def anchor(self) -> str:
        if not self.draw(st.integers(0, 5)) == 0:
            return ""
        self.next_anchor += 1
        # Now and then a name that YAML 1.1 and 1.2 readers end in different places.
        odd = self.draw(st.sampled_from(["", "", "", "", ":x", ".y", "?"]))
        return f"&a{self.next_anchor}{odd} "

    def tag(self) -> str:
        return self.draw(st.sampled_from(TAGS)) + " " if self.draw(st.integers(0, 12)) == 0 else ""

    def plain(self) -> str:
        return self.draw(st.sampled_from(PLAIN if self.draw(st.integers(0, 5)) == 0 else AGREED))

    def scalar(self, block_ok: bool, indent: int) -> str:
        form = self.draw(st.sampled_from(["plain", "plain", "plain", "single", "double", "block"] if block_ok else ["plain", "plain", "single", "double"]))
        if form == "plain":
            return self.plain()
        if form == "single":
            return "'" + self.draw(TEXT).replace("'", "''") + "'"
        if form == "double":
            parts = self.draw(st.lists(st.one_of(st.sampled_from(ESCAPES), st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc"), exclude_characters='"\\'), max_size=4)), max_size=4))
            return '"' + "".join(parts) + '"'
        style = self.draw(st.sampled_from(["|", ">", "|-", ">+"]))
        lines = self.draw(st.lists(st.text("abc :#-", min_size=1, max_size=6).filter(lambda s: s.strip()), min_size=1, max_size=3))
        pad = " " * (indent + 2)
        return style + "\n" + "".join(pad + line.strip() + "\n" for line in lines).rstrip("\n")

    def key(self) -> str:
        choice = self.draw(st.integers(0, 29))
        if choice <= 2 and self.anchors:
            return "*" + self.draw(st.sampled_from(self.anchors)) + " "
        if choice == 3:
            return "<<"
        if choice == 4:
            return self.tag() + self.plain()
        if choice <= 6:
            return self.plain()
        return self.anchor() + self.draw(st.sampled_from(["a", "b", "c", "image", "x.y", "'q'", '"<<"', "k1", "k2"]))

    def flow(self, depth: int) -> str:
        """A node in flow style."""
        if self.anchors and self.draw(st.integers(0, 6)) == 0:
            return "*" + self.draw(st.sampled_from(self.anchors)) + " "
        kind = self.draw(st.sampled_from(["scalar", "scalar", "map", "seq"] if depth < 3 else ["scalar"]))
        prefix = self.anchor() + self.tag()
        if kind == "scalar":
            text = prefix + self.scalar(False, 0)
        elif kind == "seq":
            items = [self.flow(depth + 1) for _ in range(self.draw(st.integers(0, 3)))]
            text = prefix + "[" + ", ".join(items) + "]"
        else:
            pairs = [f"{self.key()}: {self.flow(depth + 1)}" for _ in range(self.draw(st.integers(0, 3)))]
            text = prefix + "{" + ", ".join(pairs) + "}"
        self.remember(prefix)
        return text

    def block_map(self, indent: int, depth: int) -> str:
        pad = " " * indent
        lines = []
        for _ in range(self.draw(st.integers(1, 4))):
            key = self.key()
            if depth < 2 and self.draw(st.integers(0, 3)) == 0:
                prefix = self.anchor()
                body = self.block_map(indent + 2, depth + 1)
                lines.append(f"{pad}{key}: {prefix}\n{body}")
                self.remember(prefix)
            elif self.draw(st.integers(0, 2)) == 0:
                prefix = self.anchor() + self.tag()
                value = prefix + self.scalar(True, indent)
                self.remember(prefix)
                lines.append(f"{pad}{key}: {value}")
            else:
                lines.append(f"{pad}{key}: {self.flow(depth + 1)}")
        return "\n".join(lines)

    def remember(self, prefix: str) -> None:
        # An anchor is usable once its node is complete.
        for word in prefix.split():
            if word.startswith("&"):
                self.anchors.append(word[1:])


def typed(value: Any) -> Any:
    """A form where equal means the same JSON value: True is not 1, 1.0 is not 1."""
    if isinstance(value, dict):
        return ("map", tuple((typed(k), typed(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("seq", tuple(typed(v) for v in value))
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    return (type(value).__name__, value)


def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        raise DuplicateKey
    return dict(pairs)


class DuplicateKey(Exception):
    pass


def jobgate_reading(text: str) -> Any | None:
    """What jobgate reads, or None when it refuses (duplicate keys are refused by
    `json.duplicate_key` in every check)."""
    try:
        return json.loads(jobgate.read_document(text.encode()), object_pairs_hook=no_duplicates)
    except (ValueError, DuplicateKey):
        return None


@given(st.data())
@SETTINGS
def test_what_jobgate_reads_is_what_safe_load_builds(data):
    doc = Doc(data)
    text = doc.block_map(0, 0) + data.draw(st.sampled_from(["\n", "\n", "", "\n  ", "\r\n"]))
    mine = jobgate_reading(text)
    if mine is None:
        return
    try:
        theirs = yaml.safe_load(text)
    except yaml.YAMLError as e:  # jobgate read a document the consumer cannot
        raise AssertionError(f"jobgate reads {text!r} as {mine!r}; safe_load refuses it: {e}") from None
    assert typed(mine) == typed(theirs), f"{text!r}: jobgate {mine!r} vs safe_load {theirs!r}"


@given(st.data())
@SETTINGS
def test_plain_scalars_read_alike_or_refused(data):
    """Every plain scalar form, as a value and as a key, in block and flow context."""
    word = data.draw(st.sampled_from(PLAIN) | st.text(st.sampled_from("0123456789_:.+-eExob"), min_size=1, max_size=8))
    for text in (f"v: {word}\n", f"v: [{word}]\n", f"{word}: v\n", f"v: {{{word}: 1}}\n"):
        mine = jobgate_reading(text)
        if mine is None:
            continue
        try:
            theirs = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise AssertionError(f"jobgate reads {text!r}; safe_load refuses it: {e}") from None
        assert typed(mine) == typed(theirs), f"{text!r}: jobgate {mine!r} vs safe_load {theirs!r}"


# The named cases: refused through every entry point, with the message naming the fix.
JOBSPEC = yaml.safe_dump(sample("jobspec.valid.json"), sort_keys=False)


def with_extra(line: str) -> str:
    return JOBSPEC + line + "\n"


REFUSED = {
    "tag on a sequence": (with_extra('x: !!python/object/apply:os.system ["touch /tmp/p"]'), "!!python/object/apply:os.system"),
    "local tag on a mapping": (with_extra("x: !foo {a: 1}"), "!foo"),
    "set": (with_extra("x: !!set {a: null}"), "!!set"),
    "omap": (with_extra("x: !!omap [{a: 1}]"), "!!omap"),
    "verbatim tag": (with_extra("x: !<tag:yaml.org,2002:python/object:os.system> {}"), "python/object:os.system"),
    "merge key in framework": (JOBSPEC.replace("  framework:\n", "  framework:\n    <<: {image: evil.example.com/miner:latest}\n", 1), "merge keys"),
    "boolean yes": (with_extra("x: yes"), '"yes"'),
    "octal 010": (with_extra("x: 010"), '"010"'),
    "underscore 1_000": (with_extra("x: 1_000"), '"1_000"'),
    "base 60 1:20": (with_extra("x: 1:20"), '"1:20"'),
    "a date": (with_extra("x: 2001-12-14"), "a date"),
    "an integer key": (with_extra("1: x"), 'key "1"'),
    "an anchor name PyYAML ends early": (with_extra("&x:y mode: config"), "anchor &x:y"),
    "an anchor defined twice": (with_extra("p: &x 1\nq: &x 2\nr: *x"), "defined twice"),
    "a block scalar cut by the end of the text": (with_extra("x: |\n  run").rstrip("\n"), "block scalar"),
    # Found by fuzzing against safe_load (rust/fuzz, target yaml).
    "a tab after a plain scalar": (with_extra("x: run\t"), "tab at line"),
    "a byte order mark past the start": (with_extra("x: \ufeffrun"), "U+FEFF"),
    "an indicator starting a plain scalar": (with_extra("x: [|]"), "starts with '|'"),
    "a non-ASCII anchor name": (with_extra("x: &r\u00e9 run"), "anchor &r\u00e9"),
    "an anchor name followed by a bracket": (with_extra("x: &r{}"), "put a space after the name"),
    "a document end marker before the first value": ("...\n" + JOBSPEC, "document end marker"),
    "a tab on a block scalar's header line": (with_extra("x: |\t\n  run"), "tab at line"),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_named_yaml_cases_are_refused_everywhere(name):
    text, needle = REFUSED[name]
    assert "framework:" in JOBSPEC
    reports = [
        jobgate.Validator().check(text.encode()),
        jobgate.Validator().check(text),
        jobgate.Validator().check_many([text.encode()])[0],
    ]
    for report in reports:
        assert [(v.rule, v.field) for v in report.violations] == [("json.syntax", "")], report.violations
        assert needle in report.violations[0].message, report.violations[0].message
    with pytest.raises(ValueError, match="json.syntax"):
        jobgate.read_document(text)


def test_anchors_on_later_items_and_keys_are_read():
    text = with_extra("l: [a, &v b]\nm: *v\n&k key: 1\nn: *k")
    assert json.loads(jobgate.read_document(text))["m"] == "b"
    report = jobgate.Validator().check(text, kind="jobspec")
    assert [v.rule for v in report.violations if v.rule.startswith("json")] == []
    # Only the three unknown fields are reported, as warnings: the document is read.
    assert report.verdict == "pass", report.violations
    assert sorted(v.field for v in report.violations) == ["/key", "/l", "/m", "/n"]


def test_the_valid_jobspec_in_yaml_reads_as_its_json():
    assert json.loads(jobgate.read_document(JOBSPEC)) == sample("jobspec.valid.json")
    assert jobgate.Validator().check(JOBSPEC).verdict == "pass"
