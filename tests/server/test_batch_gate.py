"""A batch's admission, in the gate itself (`Gate.admit_batch`), on a real SQLite store:
keys are held to one request each within the batch and against what they recall, a
batch that cannot be admitted whole opens nothing, and a batch stopped between items
hands back the admissions it made."""

from __future__ import annotations

import json

import pytest

import jobgate
from jobgate.config import Config
from jobgate.server.gate import BatchItem, BatchStopped, DeadlinePassed, Gate, Grant, KeyRepeated, KeyReused
from jobgate.store import open_store
from tests.helpers import mutate, sample

JOBSPEC = sample("jobspec.valid.json")
PROJECT = JOBSPEC["metadata"]["project"]


def named(name: str) -> bytes:
    return json.dumps(mutate(JOBSPEC, {"/metadata/name": name})).encode()


def item(data: bytes, key: str = "", kind: str | None = None) -> BatchItem:
    # The servicer's fingerprint covers the whole request; here the bytes stand for it.
    return BatchItem(data, kind, key=key, fingerprint=data if key else b"")


@pytest.fixture
def gate(tmp_path):
    config = Config.model_validate({"store": {"path": str(tmp_path / "store")}, "jobs": {"results_root": str(tmp_path / "results")}})
    g = Gate(config, open_store(str(tmp_path / "store"), None))
    yield g
    g.close()
    g.store.close()


def opened(gate: Gate) -> list[str]:
    return sorted(record["id"] for record in gate.store.list(limit=1000))


def stopped(call, *args, **kwargs) -> BatchStopped:
    with pytest.raises(BatchStopped) as e:
        call(*args, **kwargs)
    return e.value


def test_a_real_batch_is_admitted_in_order_and_a_key_repeated_with_its_request_replays(gate):
    a, b = named("a"), named("b")
    results = gate.admit_batch([item(a, "k-a"), item(b), item(a, "k-a")], "alice", dry_run=False)
    assert [r.report.verdict for r in results] == ["pass", "pass", "pass"]
    assert [r.replayed for r in results] == [False, False, True]
    assert results[2].job_id == results[0].job_id
    assert opened(gate) == sorted({results[0].job_id, results[1].job_id})
    again = gate.admit_batch([item(a, "k-a")], "alice", dry_run=False)
    assert (again[0].job_id, again[0].replayed) == (results[0].job_id, True)


def test_a_key_given_to_two_requests_in_one_batch_opens_nothing(gate):
    e = stopped(gate.admit_batch, [item(named("a")), item(named("b"), "k"), item(named("c"), "k")], "alice", dry_run=False)
    assert (e.index, e.admitted) == (2, [])
    assert isinstance(e.error, KeyRepeated) and e.error.first == 1
    assert opened(gate) == []


def test_a_key_that_recalls_another_request_opens_nothing(gate):
    first = gate.admit(named("a"), None, "alice", dry_run=False, key="k", fingerprint=named("a"))
    e = stopped(gate.admit_batch, [item(named("b")), item(named("c"), "k")], "alice", dry_run=False)
    assert (e.index, e.admitted) == (1, [])
    assert isinstance(e.error, KeyReused) and e.error.job_id == first.job_id
    assert opened(gate) == [first.job_id]
    # Another account's key of the same name is its own.
    assert gate.admit_batch([item(named("c"), "k")], "bob", dry_run=False)[0].job_id not in ("", first.job_id)


def test_a_dry_run_ignores_keys(gate):
    results = gate.admit_batch([item(named("a"), "k"), item(named("b"), "k")], "alice", dry_run=True)
    assert [(r.report.verdict, r.job_id, r.replayed) for r in results] == [("pass", "", False)] * 2
    assert opened(gate) == []


def test_a_passed_deadline_stops_the_batch_with_what_it_admitted(gate):
    asked = []

    def active() -> bool:
        asked.append(True)
        return len(asked) <= 2

    e = stopped(gate.admit_batch, [item(named(n)) for n in "abcd"], "alice", dry_run=False, active=active)
    assert e.index == 2 and isinstance(e.error, DeadlinePassed)
    assert (e.error.judged, e.error.documents) == (2, 4)
    assert str(e.error) == "the deadline passed after 2 of 4 documents"
    assert opened(gate) == sorted(r.job_id for r in e.admitted) and len(e.admitted) == 2


@pytest.mark.parametrize("kinds", [[None, None], ["jobspec", None]])
def test_a_dry_run_keeps_the_project_an_item_was_refused_for(gate, kinds):
    """One kind: checked in parallel; two: item by item. Both name the project."""
    elsewhere = json.dumps(mutate(JOBSPEC, {"/metadata/project": "elsewhere"})).encode()
    items = [item(named("a"), kind=kinds[0]), item(elsewhere, kind=kinds[1])]
    results = gate.admit_batch(items, "alice", dry_run=True, grant=Grant((PROJECT,), PROJECT))
    assert [r.report.verdict for r in results] == ["pass", "fail"]
    assert [v.rule for v in results[1].report.violations] == [jobgate._core.PROJECT_FORBIDDEN]
    assert results[1].project == "elsewhere"
