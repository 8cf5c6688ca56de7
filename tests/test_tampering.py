"""Tampered storage never yields a wrong state: every read that touches a damaged object raises a
typed s3ckpt error that names the object and says what to do.

Each case runs on every backend through the ``env`` fixture; ``env.raw()`` tampers with the same
objects the store reads (S3 prefixes included, so keys are the library's keys).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import pytest

import s3ckpt
from s3ckpt._names import head_key, log_key
from s3ckpt.backends import Backend
from s3ckpt.records import Manifest

if TYPE_CHECKING:
    from tests.conftest import StoreEnv

RUN = "job-7"
#: Artifact contents: one chunk each (far below the chunker's minimum), different from each other.
ART_A = b"model weights " * 40 + os.urandom(64)
ART_B = os.urandom(300)


def _seed(store: s3ckpt.Store, run_id: str = RUN, n: int = 3, **commit: Any) -> list[s3ckpt.Checkpoint]:
    """Claim ``run_id`` and commit ``n`` checkpoints at seqs 1..n (the claim is seq 0)."""
    writer = store.run(run_id).claim(host="test")
    return [
        writer.commit({"step": i, "run": run_id}, artifacts={"a.bin": ART_A, "b.bin": ART_B}, **commit) for i in range(1, n + 1)
    ]


def _flip(raw: Backend, key: str, at: int) -> None:
    data = bytearray(raw.get(key).data)
    data[at % len(data)] ^= 0x01
    raw.put(key, bytes(data))


class Loc(NamedTuple):
    """Where a chunk's envelope lives: a pack, and a byte range in it."""

    key: str
    offset: int
    length: int


def _locs(manifest: Manifest) -> list[Loc]:
    out = []
    for c in manifest.chunks:
        assert c.pack is not None
        assert c.length is not None
        out.append(Loc(f"packs/{c.pack[:2]}/{c.pack}", c.offset, c.length))
    return out


def _blob_locs(cp: s3ckpt.Checkpoint, name: str) -> list[Loc]:
    return _locs(cp.record.artifacts[name])


def _state_blob_locs(cp: s3ckpt.Checkpoint) -> list[Loc]:
    manifest = cp.record.state_manifest
    assert manifest is not None, "the state was expected to be stored as chunks"
    return _locs(manifest)


def _flip_chunk(raw: Backend, loc: Loc, at: int) -> None:
    """Flip one byte of one chunk's envelope inside its pack."""
    _flip(raw, loc.key, loc.offset + at % loc.length)


def _raises(
    kind: type[s3ckpt.IntegrityError],
    action: Callable[[], object],
    *,
    key: str | tuple[str, ...] | None,
    hints: tuple[str, ...] = (),
) -> s3ckpt.IntegrityError:
    """``action`` raises exactly ``kind`` (not a subclass, not a bare builtin) with a helpful message:
    ``error.key`` is the damaged object (one of ``key`` when several may be hit first), the message
    names it (by key, or by blob id for blobs) and contains each of ``hints``."""
    with pytest.raises(s3ckpt.S3ckptError) as info:
        _must_raise(action, kind)
    exc = info.value
    assert type(exc) is kind, f"expected exactly {kind.__name__}, got {type(exc).__name__}: {exc}"
    assert isinstance(exc, s3ckpt.IntegrityError)
    message = str(exc)
    if key is not None:
        allowed = (key,) if isinstance(key, str) else key
        assert exc.key in allowed, f"error.key is {exc.key!r}, expected one of {allowed!r}"
        assert exc.key is not None
        named = exc.key.rsplit("/", 1)[-1] if exc.key.startswith(("blobs/", "packs/")) else exc.key
        assert named in message, f"message does not name {named!r}: {message}"
    for hint in hints:
        assert hint in message, f"message does not mention {hint!r}: {message}"
    return exc


def _must_raise(action: Callable[[], object], kind: type[Exception]) -> None:
    result = action()
    pytest.fail(f"expected {kind.__name__}, got a result: {result!r}")


def _read_all_history(store: s3ckpt.Store, run_id: str = RUN) -> list[object]:
    return [cp.state for cp in store.run(run_id).history()]


def _latest_is(store: s3ckpt.Store, expected: s3ckpt.Checkpoint) -> None:
    """latest() returns the expected checkpoint, or refuses with IntegrityError: never anything else."""
    try:
        got = store.run(RUN).latest()
    except s3ckpt.IntegrityError:
        return  # refusing is fine; the caller checks the refusal's details where they are fixed
    assert got is not None
    assert (got.seq, got.state) == (expected.seq, expected.state)


VERIFY = "from a backup"


# -- commit records --------------------------------------------------------------------------


@pytest.mark.parametrize("at", [0, 10, 40, -1], ids=["magic", "salt", "ciphertext", "tag"])
def test_flipped_byte_in_newest_record(env: StoreEnv, at: int) -> None:
    store = env.open()
    _seed(store)
    key = log_key(RUN, 3)
    _flip(env.raw(), key, at)
    _all_reads_refuse(store, key)
    _all_reads_refuse(env.open(), key)


def _all_reads_refuse(store: s3ckpt.Store, key: str) -> None:
    _raises(s3ckpt.IntegrityError, lambda: store.run(RUN).latest(), key=key, hints=(VERIFY,))
    _raises(s3ckpt.IntegrityError, lambda: store.run(RUN).get(3), key=key, hints=(VERIFY,))
    _raises(s3ckpt.IntegrityError, lambda: _read_all_history(store), key=key, hints=(VERIFY,))


def test_flipped_byte_in_middle_record(env: StoreEnv) -> None:
    store = env.open()
    cps = _seed(store)
    key = log_key(RUN, 2)
    _flip(env.raw(), key, 50)
    _raises(s3ckpt.IntegrityError, lambda: store.run(RUN).get(2), key=key, hints=(VERIFY,))
    _raises(s3ckpt.IntegrityError, lambda: _read_all_history(store), key=key, hints=(VERIFY,))
    # Untouched records still read, and the tail is either right or refused.
    assert store.run(RUN).get(1).state == cps[0].state
    _latest_is(store, cps[-1])


def test_flipped_byte_in_claim_record_breaks_history(env: StoreEnv) -> None:
    store = env.open()
    _seed(store)
    key = log_key(RUN, 0)
    _flip(env.raw(), key, 33)
    _raises(s3ckpt.IntegrityError, lambda: _read_all_history(store), key=key, hints=(VERIFY,))
    _raises(s3ckpt.IntegrityError, lambda: store.run(RUN).get(0), key=key, hints=(VERIFY,))


@pytest.mark.parametrize("keep", [0, "overhead-1", "half", "all-but-one"])
def test_truncated_record(env: StoreEnv, keep: int | str) -> None:
    store = env.open()
    _seed(store)
    key = log_key(RUN, 3)
    raw = env.raw()
    data = raw.get(key).data
    length = {"overhead-1": 4 + 24 + 16 - 1, "half": len(data) // 2, "all-but-one": len(data) - 1}.get(str(keep), keep)
    assert isinstance(length, int)
    raw.put(key, data[:length])
    _all_reads_refuse(env.open(), key)


def test_appended_bytes_to_record(env: StoreEnv) -> None:
    store = env.open()
    _seed(store)
    key = log_key(RUN, 3)
    raw = env.raw()
    raw.put(key, raw.get(key).data + b"\x00")
    _raises(s3ckpt.IntegrityError, lambda: store.run(RUN).latest(), key=key, hints=(VERIFY,))


@pytest.mark.parametrize("target", [2, 3, 4], ids=["over-middle", "over-newest", "past-the-tail"])
def test_old_record_copied_over_newer_seq(env: StoreEnv, target: int) -> None:
    store = env.open()
    cps = _seed(store)
    raw = env.raw()
    old = raw.get(log_key(RUN, 1)).data
    key = log_key(RUN, target)
    raw.put(key, old)
    _raises(s3ckpt.IntegrityError, lambda: store.run(RUN).get(target), key=key, hints=(VERIFY,))
    _raises(s3ckpt.IntegrityError, lambda: _read_all_history(store), key=key, hints=(VERIFY,))
    if target == 2:
        _latest_is(store, cps[-1])
    else:
        # The reader reaches the replayed record (HEAD names 3; 4 is found by probing forward).
        _raises(s3ckpt.IntegrityError, lambda: store.run(RUN).latest(), key=key, hints=(VERIFY,))


@pytest.mark.parametrize("target", [2, 3, 4], ids=["same-seq-middle", "same-seq-newest", "appended"])
def test_record_from_another_run(env: StoreEnv, target: int) -> None:
    store = env.open()
    mine = _seed(store, RUN, n=3)
    _seed(store, "other-run", n=4)
    raw = env.raw()
    key = log_key(RUN, target)
    # The same seq of the other run: everything but the run binding matches.
    raw.put(key, raw.get(log_key("other-run", target)).data)
    _raises(s3ckpt.IntegrityError, lambda: store.run(RUN).get(target), key=key, hints=(VERIFY,))
    _raises(s3ckpt.IntegrityError, lambda: _read_all_history(store), key=key, hints=(VERIFY,))
    if target == 2:
        _latest_is(store, mine[-1])
    else:
        _raises(s3ckpt.IntegrityError, lambda: store.run(RUN).latest(), key=key, hints=(VERIFY,))
    # The other run is untouched.
    latest = store.run("other-run").latest()
    assert latest is not None
    assert latest.state == {"step": 4, "run": "other-run"}


def test_head_from_another_run_is_refused_or_ignored(env: StoreEnv) -> None:
    store = env.open()
    mine = _seed(store, RUN, n=2)
    _seed(store, "other-run", n=5)
    raw = env.raw()
    raw.put(head_key(RUN), raw.get(head_key("other-run")).data)
    # HEAD is only a hint: a reader may refuse the forged one, or ignore it, but never follow it.
    outcome: s3ckpt.Checkpoint | s3ckpt.IntegrityError | None
    try:
        outcome = store.run(RUN).latest()
    except s3ckpt.IntegrityError as exc:
        outcome = exc
    if isinstance(outcome, s3ckpt.IntegrityError):
        assert type(outcome) is s3ckpt.IntegrityError
        assert outcome.key == head_key(RUN)
        assert head_key(RUN) in str(outcome)
    else:
        assert outcome is not None
        assert (outcome.seq, outcome.state) == (mine[-1].seq, mine[-1].state)


def test_deleted_middle_record_breaks_history(env: StoreEnv) -> None:
    store = env.open()
    cps = _seed(store)
    key = log_key(RUN, 2)
    env.raw().delete(key)
    _raises(s3ckpt.IntegrityError, lambda: _read_all_history(store), key=key, hints=(VERIFY,))
    _latest_is(store, cps[-1])


def test_deleted_checkpoint_named_by_a_later_claim(env: StoreEnv) -> None:
    """After a re-claim the tail is a claim record naming checkpoint 3; with 3 gone latest() refuses."""
    store = env.open()
    _seed(store)
    store.run(RUN).claim()
    key = log_key(RUN, 3)
    env.raw().delete(key)
    _raises(s3ckpt.IntegrityError, lambda: env.open().run(RUN).latest(), key=key, hints=(VERIFY,))


# -- blobs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("at", [2, 40, -1], ids=["magic", "ciphertext", "tag"])
def test_flipped_byte_in_artifact_blob(env: StoreEnv, at: int) -> None:
    store = env.open()
    cps = _seed(store)
    (loc,) = _blob_locs(cps[-1], "a.bin")
    key = loc.key
    _flip_chunk(env.raw(), loc, at)
    fresh = env.open()
    cp = fresh.run(RUN).latest()
    assert cp is not None
    with cp.open_artifact("b.bin") as fh:  # an untouched artifact still reads
        assert fh.read() == ART_B

    def read() -> bytes:
        with cp.open_artifact("a.bin") as fh:
            return fh.read()

    _raises(s3ckpt.IntegrityError, read, key=key, hints=(VERIFY,))
    _raises(s3ckpt.IntegrityError, lambda: fresh.run(RUN).get(1).read_artifact("a.bin"), key=key, hints=(VERIFY,))


def test_swapped_blobs(env: StoreEnv) -> None:
    """Two chunks' envelopes trade places inside their pack: each read must refuse."""
    store = env.open()
    cps = _seed(store)
    (loc_a,) = _blob_locs(cps[-1], "a.bin")
    (loc_b,) = _blob_locs(cps[-1], "b.bin")
    assert loc_a.key == loc_b.key  # one commit, one pack
    first, second = sorted((loc_a, loc_b), key=lambda loc: loc.offset)
    raw = env.raw()
    data = raw.get(first.key).data
    env_first = data[first.offset : first.offset + first.length]
    env_second = data[second.offset : second.offset + second.length]
    swapped = (
        data[: first.offset]
        + env_second
        + data[first.offset + first.length : second.offset]
        + env_first
        + data[second.offset + second.length :]
    )
    assert len(swapped) == len(data)
    raw.put(first.key, swapped)
    cp = env.open().run(RUN).latest()
    assert cp is not None
    for name, key in (("a.bin", loc_a.key), ("b.bin", loc_b.key)):

        def read(name: str = name) -> bytes:
            with cp.open_artifact(name) as fh:
                return fh.read()

        _raises(s3ckpt.IntegrityError, read, key=key, hints=(VERIFY,))


def test_deleted_artifact_blob(env: StoreEnv) -> None:
    """A checkpoint whose artifact lost its pack is refused on load (existence is always checked),
    naming the pack; checkpoints that do not need the pack still load and read."""
    store = env.open()
    _seed(store)
    extra = os.urandom(500)
    # a new artifact in a later commit lands in a pack of its own; a.bin is reused from the first
    last = store.run(RUN).claim().commit({"step": 4}, artifacts={"a.bin": ART_A, "c.bin": extra})
    (loc,) = _blob_locs(last, "c.bin")
    key = loc.key
    assert key != _blob_locs(last, "a.bin")[0].key
    env.raw().delete(key)
    fresh = env.open()
    exc = _raises(s3ckpt.IntegrityError, lambda: fresh.run(RUN).latest(), key=key, hints=(VERIFY, "c.bin"))
    assert "missing" in str(exc)
    _raises(s3ckpt.IntegrityError, lambda: fresh.run(RUN).get(last.seq), key=key, hints=(VERIFY,))
    assert fresh.run(RUN).get(3).read_artifact("a.bin") == ART_A


def test_truncated_pack_is_refused_on_load(env: StoreEnv) -> None:
    store = env.open()
    cps = _seed(store)
    (loc,) = _blob_locs(cps[-1], "b.bin")
    raw = env.raw()
    raw.put(loc.key, raw.get(loc.key).data[: loc.offset + loc.length - 1])
    exc = _raises(s3ckpt.IntegrityError, lambda: env.open().run(RUN).latest(), key=loc.key, hints=(VERIFY,))
    assert "truncated" in str(exc)


def test_state_stored_as_chunks_tampered_or_deleted(env: StoreEnv) -> None:
    """A state too large to inline lives in blobs; damaging them makes latest()/get()/history() refuse."""
    store = env.open(inline_limit=16)
    writer = store.run(RUN).claim(host="test")
    cps = [writer.commit({"step": i, "run": RUN}) for i in range(1, 4)]  # states only: a pack each
    flipped_loc = _state_blob_locs(cps[-1])[0]
    deleted_loc = _state_blob_locs(cps[0])[0]
    flipped, deleted = flipped_loc.key, deleted_loc.key
    assert flipped != deleted
    raw = env.raw()
    _flip_chunk(raw, flipped_loc, 30)
    raw.delete(deleted)
    fresh = env.open(inline_limit=16)
    _raises(s3ckpt.IntegrityError, lambda: fresh.run(RUN).latest(), key=flipped, hints=(VERIFY,))
    _raises(s3ckpt.IntegrityError, lambda: fresh.run(RUN).get(3), key=flipped, hints=(VERIFY,))
    _raises(s3ckpt.IntegrityError, lambda: fresh.run(RUN).get(1), key=deleted, hints=(VERIFY, "missing"))
    _raises(s3ckpt.IntegrityError, lambda: _read_all_history(fresh), key=deleted, hints=(VERIFY,))
    assert fresh.run(RUN).get(2).state == {"step": 2, "run": RUN}


# -- config and keys -------------------------------------------------------------------------


def test_config_with_edited_parameters(env: StoreEnv) -> None:
    _seed(env.open())
    raw = env.raw()
    config = json.loads(raw.get("config").data)
    config["chunker"]["avg_size"] *= 2
    raw.put("config", json.dumps(config).encode())
    _raises(s3ckpt.IntegrityError, env.open, key="config", hints=("key check", "Restore the config"))


def test_config_that_is_not_json(env: StoreEnv) -> None:
    env.open()
    env.raw().put("config", b"\x00not json at all")
    _raises(s3ckpt.IntegrityError, env.open, key="config", hints=("not a valid s3ckpt config",))


def test_config_that_is_json_but_not_a_config(env: StoreEnv) -> None:
    env.open()
    raw = env.raw()
    config = json.loads(raw.get("config").data)
    del config["store_id"]
    raw.put("config", json.dumps(config).encode())
    _raises(s3ckpt.IntegrityError, env.open, key="config", hints=("not a valid s3ckpt config",))


def test_config_of_another_store(env: StoreEnv, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Only the config is replaced (by a genuine config of another store made with the same key).
    The key is right, so this is damage to the config, not a wrong key: IntegrityError on "config"."""
    _seed(env.open())
    other = s3ckpt.open_store(str(tmp_path_factory.mktemp("other") / "store"), key=env.key)
    try:
        foreign = other.backend.get("config").data
    finally:
        other.close()
    env.raw().put("config", foreign)
    exc = _raises(s3ckpt.IntegrityError, env.open, key="config")
    assert env.key not in str(exc)


def test_config_and_key_file_of_another_store_opened_with_the_same_key(
    env: StoreEnv, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A complete foreign store (config and key file, same user key) swapped in: it opens, but the
    records are bound to the original store id, so reading them fails instead of returning state."""
    store = env.open()
    _seed(store)
    other = s3ckpt.open_store(str(tmp_path_factory.mktemp("other") / "store"), key=env.key)
    try:
        foreign = {info.key: other.backend.get(info.key).data for info in other.backend.list("")}
    finally:
        other.close()
    raw = env.raw()
    for info in list(raw.list("keys/")):
        raw.delete(info.key)
    for key, data in foreign.items():
        raw.put(key, data)
    swapped = env.open()
    assert swapped.config.store_id != store.config.store_id
    # The first object a reader opens (HEAD or the newest record) fails authentication.
    first = (head_key(RUN), log_key(RUN, 3))
    _raises(s3ckpt.IntegrityError, lambda: swapped.run(RUN).latest(), key=first, hints=(VERIFY,))
    _raises(s3ckpt.IntegrityError, lambda: _read_all_history(swapped), key=log_key(RUN, 0), hints=(VERIFY,))


def test_wrong_key(env: StoreEnv) -> None:
    _seed(env.open())
    wrong = s3ckpt.generate_key()
    exc = _raises(s3ckpt.DecryptionError, lambda: env.open(key=wrong), key=None, hints=("does not open the store", "key"))
    assert wrong not in str(exc)
    # A wrong passphrase too, and the right key still works afterwards.
    _raises(s3ckpt.DecryptionError, lambda: env.open(key="passphrase:not the right one"), key=None, hints=("key",))
    latest = env.open().run(RUN).latest()
    assert latest is not None
    assert latest.state == {"step": 3, "run": RUN}
