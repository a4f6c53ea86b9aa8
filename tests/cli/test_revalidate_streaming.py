"""`jobgate revalidate` streamed: every format written piece by piece is the document
built whole, items come in path order whatever order their chunks finish in, the walk
is lazy, and no more than the window of chunks is ever taken ahead of what was
written."""

from __future__ import annotations

import io
import json
import os
import random
import threading
import time
from pathlib import Path

import pytest

import jobgate
from jobgate import _core, revalidation, rollout, suppressions
from jobgate.cli import formats, main, streaming
from jobgate.reports import ReportView
from tests.helpers import DEMO_CONFIG, require_shared, run_cli, sample

require_shared()

JOBSPEC = sample("jobspec.valid.json")


def newer(tmp_path: Path) -> Path:
    """The demo deployment after nemo-rl/grpo moved to 0.8.0."""
    path = tmp_path / "candidate.toml"
    path.write_text(DEMO_CONFIG.read_text().replace('name = "nemo-rl/grpo", version = "0.7.0"', 'name = "nemo-rl/grpo", version = "0.8.0"'))
    return path


def reports_of_every_shape() -> list[tuple[str, object]]:
    """Reports as the core gives them (passing, failing, located in JSON and YAML,
    with warnings, refused unread) and as data, under names a format must escape."""
    v = jobgate.Validator(DEMO_CONFIG)
    samples = Path(jobgate.__file__).parent / "samples"
    warned = {**JOBSPEC, "kind_of": "an unknown field"}
    return [
        ("jobs/grpo.json", v.check(json.dumps(JOBSPEC).encode())),
        ("jobs/rejected.json", v.check((samples / "jobspec.rejected.json").read_bytes())),
        ("dir with space/bündle.yaml", v.check((samples / "spec_bundle.rejected.yaml").read_bytes())),
        ("yaml/valid.yml", v.check((samples / "spec_bundle.valid.yaml").read_bytes())),
        ("warned.json", v.check(json.dumps(warned).encode())),
        ("/elsewhere/huge.json", _core.refused_too_large(20 << 30, 1 << 20, kind="jobspec")),
        ("ctl\x1b[31mred\u202e.json", _core.refused_unreadable("cannot read ctl: Permission denied")),
        ("<stdin>", ReportView.from_dict(v.check(b'{"apiVersion": "forge/v2"}').to_dict())),
        ("not-utf8-\udcff.json", v.check(b"{")),
        # some findings suppressed (`jobgate.suppressions`): counted apart in the summary
        ("quiet.json", suppressions.Suppressor(["schema.required"]).apply("quiet.json", v.check(b'{"apiVersion": "forge/v2"}'))),
    ]


def streamed(fmt: str, results: list, size: int, suite: str = formats.CHECK_SUITE) -> str:
    out = io.StringIO()
    stream = streaming.ReportStream(fmt, out, suite)
    for start in range(0, len(results), size):
        stream.write(results[start : start + size])
    stream.close()
    return out.getvalue()


@pytest.mark.parametrize("fmt", streaming.FORMATS)
def test_every_format_streamed_is_the_document_built_whole(fmt):
    results = reports_of_every_shape()
    assert any(r.violations and r.violations[0].line for _, r in results) and any(not r.ok for _, r in results)
    assert formats.summary(results)["suppressed"] == 3
    for subset in (results, results[:1], results[:0], results[-1:]):
        whole = formats.document(fmt, subset)
        for size in (1, 2, 1000):
            assert streamed(fmt, subset, size) == whole, (fmt, len(subset), size)
    whole = formats.document(fmt, results, "jobgate revalidate")
    assert streamed(fmt, results, 3, "jobgate revalidate") == whole
    assert ('<testsuite name="jobgate revalidate" ' in whole) == (fmt == "junit")
    if fmt in ("json", "sarif"):
        assert json.loads(formats.document(fmt, results[:-1]))  # a JSON document, not only equal
    if fmt == "jsonl":
        lines = formats.document(fmt, results).splitlines()
        assert [line.startswith('{"source":') for line in lines] == [True] * len(results)


def changes_of_every_shape() -> list[rollout.Change]:
    v = jobgate.Validator(DEMO_CONFIG)
    samples = Path(jobgate.__file__).parent / "samples"
    valid = v.check(json.dumps(JOBSPEC).encode()).to_dict()
    rejected = v.check((samples / "jobspec.rejected.json").read_bytes()).to_dict()
    warned = v.check(json.dumps({**JOBSPEC, "kind_of": "x"}).encode()).to_dict()
    return [
        rollout.change("jobs/a.json", "my-lab", valid, rejected),
        rollout.change("jobs/b.json", "", rejected, valid),
        rollout.change("ctl\x1b.json", "lab\x07", valid, warned),
        rollout.change("not-utf8-\udcff.json", "other", warned, rejected),
    ]


@pytest.mark.parametrize("fmt", streaming.FORMATS)
def test_changes_streamed_are_the_document_built_whole(fmt):
    changes = changes_of_every_shape()
    for subset in (changes, changes[:0], changes[:1]):
        impact = rollout.impact(subset, 10)
        for size in (1, 3):
            out = io.StringIO()
            stream = streaming.ChangesStream(fmt, out)
            for start in range(0, len(subset), size):
                stream.write(subset[start : start + size])
            stream.close(impact)
            assert out.getvalue() == formats.changes_document(fmt, subset, impact), (fmt, len(subset), size)


def test_impact_counted_as_changes_go_by_is_the_impact_of_all():
    changes = changes_of_every_shape()
    counts = rollout.Impact()
    counts.items = 10
    for c in changes:
        counts.add(c)
    assert counts.to_dict() == rollout.impact(changes, 10)
    assert counts.fails("error") == rollout.fails(changes, "error") is True
    assert counts.fails("warning") == rollout.fails(changes, "warning") is True
    assert not rollout.Impact().fails("warning")


@pytest.fixture
def tree(tmp_path) -> Path:
    """Documents created in shuffled order, in nested directories, with names whose
    order differs by case and by separator."""
    root = tmp_path / "tree"
    names = [f"{d}/{n}" for d in ("b", "a", "a/z", "A", "a-b", "a.d") for n in ("x.json", "B.json", "a.yaml", "_.yml", "10.json", "9.json")]
    random.Random(7).shuffle(names)
    bad = {**JOBSPEC, "kind": "Other"}
    for i, name in enumerate(names):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(bad if i % 4 == 0 else JOBSPEC))
    return root


def test_reports_come_in_path_order_however_chunks_finish(tree, capsys, monkeypatch):
    monkeypatch.setattr(revalidation, "CHUNK_ITEMS", 2)
    real = revalidation.check_chunk
    delays = random.Random(1)

    def slow(judge, items):
        time.sleep(delays.random() / 50)  # chunks finish out of order
        return real(judge, items)

    monkeypatch.setattr(revalidation, "check_chunk", slow)
    runs = [run_cli(capsys, ["revalidate", str(tree), "--format", "jsonl", "--threads", "3"]) for _ in range(3)]
    assert runs[0][0] == 1 and runs[0] == runs[1] == runs[2]
    sources = [json.loads(line)["source"] for line in runs[0][1].splitlines()]
    assert sources == [str(p) for p in sorted(p for p in tree.rglob("*") if p.is_file())]  # path order
    assert len(sources) == 36


def test_jsonl_holds_the_json_results_one_per_line(tree, capsys):
    code, out = run_cli(capsys, ["revalidate", str(tree), "--format", "json"])
    code_l, lines = run_cli(capsys, ["revalidate", str(tree), "--format", "jsonl"])
    assert (code, code_l) == (1, 1)
    assert [json.loads(line) for line in lines.splitlines()] == json.loads(out)["results"]
    assert run_cli(capsys, ["revalidate", str(tree / "a" / "z" / "x.json"), "--format", "jsonl"]) == (0, json.dumps({"source": str(tree / "a" / "z" / "x.json"), "kind": "jobspec", "verdict": "pass", "violations": []}, separators=(",", ":")) + "\n")


def test_exit_codes_are_those_of_the_whole_run_in_every_format(tree, capsys):
    passing = str(tree / "a" / "z")
    for fmt in streaming.FORMATS:
        assert run_cli(capsys, ["revalidate", str(tree), "--format", fmt])[0] == 1
        assert run_cli(capsys, ["revalidate", passing, "--format", fmt, "--threads", "1"])[0] == (1 if any("Other" in p.read_text() for p in Path(passing).iterdir()) else 0)
        warned = tree / "w" / "warned.json"
        warned.parent.mkdir(exist_ok=True)
        warned.write_text(json.dumps({**JOBSPEC, "kind_of": "x"}))
        assert run_cli(capsys, ["revalidate", str(warned.parent), "--format", fmt])[0] == 0
        assert run_cli(capsys, ["revalidate", str(warned.parent), "--format", fmt, "--fail-on", "warning"])[0] == 1


def test_the_walk_is_lazy_reports_are_written_before_it_ends(tmp_path, capsys, monkeypatch):
    """A walk that breaks after 40 items: the reports of the items before were written
    already, so nothing waited for the whole archive to be found."""
    monkeypatch.setattr(revalidation, "CHUNK_ITEMS", 4)
    for i in range(40):
        (tmp_path / f"{i:02d}.json").write_text(json.dumps(JOBSPEC))

    def breaking(top):
        for i in range(40):
            yield revalidation.Item(str(tmp_path / f"{i:02d}.json"))
        raise RuntimeError("the walk broke")

    monkeypatch.setattr(revalidation, "walk", breaking)
    capsys.readouterr()
    assert main(["revalidate", str(tmp_path), "--format", "jsonl", "--threads", "1"]) == 2
    captured = capsys.readouterr()
    assert "the walk broke" in captured.err
    written = [json.loads(line)["source"] for line in captured.out.splitlines()]
    window = 2 * 1  # chunks in flight for one thread
    assert len(written) >= 40 - (window + 1) * 4
    assert written == [str(tmp_path / f"{i:02d}.json") for i in range(len(written))]


def test_no_more_than_the_window_of_chunks_is_taken_ahead_of_what_was_handed_back(monkeypatch):
    """50,000 items (files that do not exist: each is a report refusing it), two
    threads: at any time, the items taken from the walk and not yet handed back are at
    most the window (twice the threads) of chunks, and at most two chunks are checked
    at once."""
    monkeypatch.setattr(revalidation, "CHUNK_ITEMS", 16)
    taken = handed = peak_ahead = checking = peak_checking = 0
    lock = threading.Lock()
    real = revalidation.check_chunk

    def counting_check(judge, items):
        nonlocal checking, peak_checking
        with lock:
            checking += 1
            peak_checking = max(peak_checking, checking)
        try:
            return real(judge, items)
        finally:
            with lock:
                checking -= 1

    monkeypatch.setattr(revalidation, "check_chunk", counting_check)

    def items():
        nonlocal taken
        for i in range(50_000):
            taken += 1
            yield revalidation.Item(f"/nonexistent/{i}.json")

    judge = revalidation.Judge(None, None)
    for judged in revalidation.run_local(items(), [judge], threads=2):
        handed += len(judged.items)
        peak_ahead = max(peak_ahead, taken - handed)
        assert judged.reports[0][0].violations[0].rule == "json.syntax"
    assert handed == taken == 50_000
    window = 2 * 2
    assert 16 <= peak_ahead <= window * 16
    assert peak_checking <= 2


def test_against_in_small_chunks_reports_what_one_chunk_does(tmp_path, tree, capsys, monkeypatch):
    candidate = str(newer(tmp_path))
    (tree / "pinned").mkdir()
    for i in range(5):
        (tree / "pinned" / f"{i}.json").write_text(json.dumps(JOBSPEC))
    args = ["revalidate", str(tree), "--config", str(DEMO_CONFIG), "--against", candidate]
    whole = {fmt: run_cli(capsys, [*args, "--format", fmt]) for fmt in streaming.FORMATS}
    monkeypatch.setattr(revalidation, "CHUNK_ITEMS", 1)
    for fmt in streaming.FORMATS:
        assert run_cli(capsys, [*args, "--format", fmt, "--threads", "2"]) == whole[fmt], fmt
    code, out = whole["json"]
    impact = json.loads(out)["impact"]
    # Every JobSpec is pinned to 0.7.0: the candidate adds a violation to each; those
    # that passed (3 in 4 of the tree, and the 5 pinned) newly fail.
    assert code == 1 and impact["items"] == 41 and impact["changed"] == 41 and impact["newly_failing"] == 27 + 5
    assert impact["by_rule"] == {"forge.handshake.version": {"added": 41, "removed": 0}}
    lines = whole["jsonl"][1].splitlines()
    assert [json.loads(line)["source"] for line in lines] == [r["source"] for r in json.loads(out)["changes"]]
    assert [json.loads(line)["source"] for line in lines][-5:] == [str(tree / "pinned" / f"{i}.json") for i in range(5)]


def test_a_directory_that_cannot_be_listed_is_a_failed_item_inside_and_exit_2_when_named(tree, capsys, monkeypatch):
    real = os.scandir
    locked = {str(tree / "a" / "z"), str(tree / "b")}

    def scandir(path):
        if str(path) in locked:
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(revalidation.os, "scandir", scandir)
    code, out = run_cli(capsys, ["revalidate", str(tree), "--format", "json"])
    assert code == 1
    results = {r["source"]: r for r in json.loads(out)["results"]}
    assert results[str(tree / "a" / "z")]["violations"] == [{"rule": "json.syntax", "field": "", "message": f"{tree / 'a' / 'z'}: cannot list: Permission denied", "severity": "error"}]
    assert str(tree / "b") in results and not any(s.startswith(str(tree / "b") + "/") for s in results)
    capsys.readouterr()
    assert main(["revalidate", str(tree / "b")]) == 2
    captured = capsys.readouterr()
    assert f"{tree / 'b'}: cannot list: Permission denied" in captured.err and captured.out == ""


def test_a_file_that_cannot_be_read_fails_with_the_reason(tmp_path, capsys):
    (tmp_path / "ok.json").write_text(json.dumps(JOBSPEC))
    os.mkfifo(tmp_path / "pipe.json")
    (tmp_path / "gone.json").symlink_to(tmp_path / "nowhere")
    (tmp_path / "dir.json").symlink_to(tmp_path / "sub", target_is_directory=True)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.json").write_text("{")
    code, out = run_cli(capsys, ["revalidate", str(tmp_path), "--format", "json", "--kind", "jobspec"])
    assert code == 1
    results = {Path(r["source"]).name: r for r in json.loads(out)["results"]}
    assert set(results) == {"ok.json", "x.json"}  # a FIFO, a dangling link, a link to a directory: passed over
    assert results["x.json"]["violations"][0]["rule"] == "json.syntax"
    # Named one by one, a dangling link is still an item, and fails with the system's reason.
    reports = jobgate.Validator().check_paths([str(tmp_path / "gone.json"), str(tmp_path / "pipe.json"), str(tmp_path / "ok.json")], "jobspec")
    assert [(r.kind, r.verdict) for r in reports] == [("jobspec", "fail"), ("jobspec", "fail"), ("jobspec", "pass")]
    assert reports[0].violations[0].message == f"cannot read {tmp_path / 'gone.json'}: No such file or directory"
    assert reports[1].violations[0].message == f"{tmp_path / 'pipe.json'}: is a FIFO, not a regular file"


def test_check_paths_gives_the_reports_check_gives_the_bytes(tmp_path):
    v = jobgate.Validator(DEMO_CONFIG)
    samples = Path(jobgate.__file__).parent / "samples"
    paths = []
    for name in ("jobspec.valid.json", "jobspec.rejected.json", "spec_bundle.valid.yaml", "spec_bundle.rejected.yaml"):
        paths.append(str(samples / name))
    big = tmp_path / "big.json"
    big.write_bytes(b" " * ((1 << 20) + 1))
    paths.append(str(big))
    reports = v.check_paths(paths)
    for path, report in zip(paths[:-1], reports, strict=False):
        assert report == v.check(Path(path).read_bytes()) and report.to_dict() == v.check(Path(path).read_bytes()).to_dict()
    assert reports[-1].to_dict() == _core.refused_too_large((1 << 20) + 1, 1 << 20).to_dict()
    assert [r.to_dict() for r in v.check_paths(paths, threads=2)] == [r.to_dict() for r in reports]
    with pytest.raises(ValueError, match="threads must be at least 1"):
        v.check_paths(paths, threads=0)
