"""HEAD is a hint: readers start there and probe forward, so a lagging or missing HEAD never hides
the newest checkpoint, and a HEAD naming a record that is gone is an IntegrityError, not a guess.
Plus the request budget of the hot paths, counted at the moto HTTP server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

import s3ckpt
from s3ckpt._names import head_key, log_key, run_prefix
from s3ckpt.testing.moto_server import Fault, RequestInfo
from s3ckpt.testing.plugin import S3Bucket

if TYPE_CHECKING:
    from tests.conftest import StoreEnv

RUN = "order-42"


def _head_seq(store: s3ckpt.Store, run_id: str = RUN) -> int | None:
    head, _ = store.run(run_id)._read_head()
    return None if head is None else head.seq


def _assert_latest(store: s3ckpt.Store, seq: int, state: object, run_id: str = RUN) -> None:
    latest = store.run(run_id).latest()
    assert latest is not None, "latest() lost the run"
    assert (latest.seq, latest.state) == (seq, state)


def _history(store: s3ckpt.Store, run_id: str = RUN) -> list[tuple[int, object]]:
    return [(cp.seq, cp.state) for cp in store.run(run_id).history()]


def test_lagging_head_still_finds_the_newest_checkpoint(env: StoreEnv) -> None:
    store = env.open()
    raw = env.raw()
    writer = store.run(RUN).claim()
    writer.commit({"step": 1})
    old_head = raw.get(head_key(RUN)).data
    assert _head_seq(store) == 1
    for step in range(2, 6):
        writer.commit({"step": step})
    assert _head_seq(store) == 5
    raw.put(head_key(RUN), old_head)  # HEAD now lags the log by four records
    assert _head_seq(store) == 1

    expected = [(step, {"step": step}) for step in range(1, 6)]
    for reader in (store, env.open()):
        _assert_latest(reader, 5, {"step": 5})
        assert reader.run(RUN).exists()
        assert _history(reader) == expected

    # The current writer keeps committing (and moves HEAD on past the stale value).
    writer.commit({"step": 6})
    assert _head_seq(store) == 6
    _assert_latest(env.open(), 6, {"step": 6})

    # A new claim from a lagging HEAD appends after the true tail, fencing the old writer.
    raw.put(head_key(RUN), old_head)
    second = env.open().run(RUN).claim()
    assert second.next_seq == 8  # claim at 7, not at 2
    with pytest.raises(s3ckpt.FencedError):
        writer.commit({"step": "fenced"})
    second.commit({"step": 8})
    _assert_latest(env.open(), 8, {"step": 8})
    assert _history(env.open()) == [*expected, (6, {"step": 6}), (8, {"step": 8})]


def test_missing_head_falls_back_to_listing(env: StoreEnv) -> None:
    store = env.open()
    raw = env.raw()
    writer = store.run(RUN).claim()
    for step in range(1, 4):
        writer.commit({"step": step})
    raw.delete(head_key(RUN))
    assert _head_seq(store) is None

    for reader in (store, env.open()):
        _assert_latest(reader, 3, {"step": 3})
        assert reader.run(RUN).exists()
        assert _history(reader) == [(s, {"step": s}) for s in (1, 2, 3)]
        assert reader.run(RUN).get(2).state == {"step": 2}

    # Writing recreates the pointer; a claim with no HEAD still lands after the tail.
    writer.commit({"step": 4})
    assert _head_seq(store) == 4
    raw.delete(head_key(RUN))
    second = env.open().run(RUN).claim()
    assert second.next_seq == 6
    assert _head_seq(store) == 5
    second.commit({"step": 6})
    _assert_latest(env.open(), 6, {"step": 6})


def test_missing_head_on_a_run_with_only_a_claim(env: StoreEnv) -> None:
    store = env.open()
    store.run(RUN).claim()
    env.raw().delete(head_key(RUN))
    fresh = env.open()
    assert fresh.run(RUN).exists()
    assert fresh.run(RUN).latest() is None
    assert _history(fresh) == []
    assert env.open().run("never-written").latest() is None


def _assert_missing_record(action: object, key: str) -> None:
    assert callable(action)
    with pytest.raises(s3ckpt.IntegrityError) as info:
        action()
    exc = info.value
    assert type(exc) is s3ckpt.IntegrityError, f"expected exactly IntegrityError, got {type(exc).__name__}"
    assert exc.key == key
    message = str(exc)
    assert "missing" in message
    assert "from a backup" in message
    assert f"seq {int(key.rsplit('/', 1)[-1])}" in message


def test_head_naming_a_deleted_record_is_an_integrity_error(env: StoreEnv) -> None:
    store = env.open()
    writer = store.run(RUN).claim()
    for step in range(1, 4):
        writer.commit({"step": step})
    key = log_key(RUN, 3)
    env.raw().delete(key)
    assert _head_seq(store) == 3
    for reader in (store, env.open()):
        _assert_missing_record(reader.run(RUN).latest, key)
        _assert_missing_record(reader.run(RUN).exists, key)
        # A new writer must not paper over the hole by claiming at the gap.
        _assert_missing_record(reader.run(RUN).claim, key)
    assert not env.raw().exists(key), "a claim filled the hole the pointer names"


def test_head_from_a_longer_life_of_the_run_is_an_integrity_error(env: StoreEnv) -> None:
    """Save HEAD at seq 5, wipe the run's objects, write a shorter log under the same id, restore HEAD:
    HEAD now names a seq past the tail, and the reader refuses instead of returning seq 2."""
    store = env.open()
    raw = env.raw()
    writer = store.run(RUN).claim()
    for step in range(1, 6):
        writer.commit({"step": step})
    future_head = raw.get(head_key(RUN)).data
    for info in list(raw.list(run_prefix(RUN))):
        raw.delete(info.key)
    assert env.open().run(RUN).latest() is None
    shorter = env.open().run(RUN).claim()
    shorter.commit({"short": 1})
    shorter.commit({"short": 2})
    _assert_latest(env.open(), 2, {"short": 2})
    raw.put(head_key(RUN), future_head)
    assert _head_seq(store) == 5
    for reader in (store, env.open()):
        _assert_missing_record(reader.run(RUN).latest, log_key(RUN, 5))


def test_head_with_the_tail_records_deleted(env: StoreEnv) -> None:
    store = env.open()
    writer = store.run(RUN).claim()
    for step in range(1, 6):
        writer.commit({"step": step})
    raw = env.raw()
    raw.delete(log_key(RUN, 5))
    raw.delete(log_key(RUN, 4))
    _assert_missing_record(env.open().run(RUN).latest, log_key(RUN, 5))


# -- request budgets on the moto HTTP server -------------------------------------------------


def _open(moto_s3: S3Bucket, key: str) -> s3ckpt.Store:
    return s3ckpt.open_store(moto_s3.url, key=key, endpoint_url=moto_s3.endpoint_url, region="us-east-1")


class _Recorder:
    """Observes every request the server receives (never injects a fault)."""

    def __init__(self) -> None:
        self.requests: list[RequestInfo] = []

    def __call__(self, info: RequestInfo) -> Fault | None:
        self.requests.append(info)
        return None

    def puts_to(self, suffix: str) -> int:
        return sum(1 for r in self.requests if r.method == "PUT" and r.path.endswith(suffix))


@pytest.mark.parametrize("with_artifact", [False, True])
def test_cold_latest_request_count(moto_s3: S3Bucket, with_artifact: bool) -> None:
    """3 requests (HEAD, the record, the probe); an artifact adds one HEAD per pack it needs,
    the existence check that every load makes."""
    key = s3ckpt.generate_key()
    with _open(moto_s3, key) as store:
        writer = store.run(RUN).claim()
        for step in range(1, 4):
            writer.commit({"step": step}, artifacts={"model.bin": b"w" * 1000} if with_artifact else None)
    log = moto_s3.server.log
    log.reset()
    with _open(moto_s3, key) as fresh:
        log.reset()
        latest = fresh.run(RUN).latest()
        requests = log.total
        assert latest is not None
        assert (latest.seq, latest.state) == (3, {"step": 3})
    budget = 3 + (1 if with_artifact else 0)
    assert requests <= budget, f"a cold latest() made {requests} requests: {dict(log.counts)}"
    assert log.count("PUT") == 0


def test_small_commit_request_count(moto_s3: S3Bucket) -> None:
    key = s3ckpt.generate_key()
    recorder = _Recorder()
    with _open(moto_s3, key) as store:
        writer = store.run(RUN).claim()
        writer.commit({"step": 1})
        moto_s3.server.log.reset()
        moto_s3.server.inject = recorder
        try:
            checkpoint = writer.commit({"step": 2, "loss": 0.25})
        finally:
            moto_s3.server.inject = None
        total = moto_s3.server.log.total
    assert checkpoint.seq == 2
    assert total <= 2, f"a small commit made {total} requests: {[(r.method, r.path) for r in recorder.requests]}"
    assert len(recorder.requests) == total
    log_puts = [r for r in recorder.requests if r.method == "PUT" and "/runs/" in r.path and "/log/" in r.path]
    assert len(log_puts) == 1, [(r.method, r.path) for r in recorder.requests]
    assert log_puts[0].path.endswith(log_key(RUN, 2))
    assert recorder.puts_to(head_key(RUN)) <= 1
    with _open(moto_s3, key) as reader:
        _assert_latest(reader, 2, {"step": 2, "loss": 0.25})
