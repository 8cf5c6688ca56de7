"""Keys are never lost: no interleaving of key removals leaves a store without a key file, a planted
key file cannot make opening take minutes or gigabytes, and a store whose creation answer was lost
is still the creator's.

The interleavings are generated: each removal runs in its own thread on its own store object, and
every storage request waits for its turn in an order Hypothesis draws, so the races that matter
(both removals looking before either deletes) are forced rather than hoped for. Then the same race
runs for real, across processes, on a local directory and on the moto server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import s3ckpt
from s3ckpt.backends import Backend, MemoryBackend, PutMode, PutResult
from s3ckpt.backends._base import GetResult, ObjectInfo
from s3ckpt.testing.plugin import S3Bucket

T = TypeVar("T")


class Turnstile(Backend):
    """``inner``, where each thread's requests wait for the thread's turn in ``order`` (thread
    numbers; once the order is used up, everyone runs freely)."""

    def __init__(self, inner: Backend, order: list[int]) -> None:
        self.inner = inner
        self.capabilities = inner.capabilities
        self.url = inner.url
        self._order = order
        self._cond = threading.Condition()
        self._done: set[int] = set()
        self._local = threading.local()
        self.trace: list[tuple[int, str]] = []

    def enter(self, number: int) -> None:
        self._local.number = number

    def leave(self) -> None:
        with self._cond:
            self._done.add(self._local.number)
            self._cond.notify_all()

    def _turn(self, what: str, fn: Callable[[], T]) -> T:
        number = getattr(self._local, "number", None)
        if number is None:  # a thread of the store's own pool, or the test itself
            return fn()
        with self._cond:
            while self._order and self._order[0] != number:
                if self._order[0] in self._done:
                    self._order.pop(0)
                    continue
                self._cond.wait(timeout=5)
            try:
                self.trace.append((number, what))
                return fn()
            finally:
                if self._order:
                    self._order.pop(0)
                self._cond.notify_all()

    def get(self, key: str) -> GetResult:
        return self._turn(f"get {key}", lambda: self.inner.get(key))

    def put(
        self,
        key: str,
        data: bytes | bytearray | memoryview,
        *,
        mode: PutMode = "overwrite",
        metadata: Mapping[str, str] | None = None,
    ) -> PutResult:
        return self._turn(f"put {key}", lambda: self.inner.put(key, data, mode=mode, metadata=metadata))

    def head(self, key: str) -> ObjectInfo | None:
        return self._turn(f"head {key}", lambda: self.inner.head(key))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        return iter(self._turn(f"list {prefix}", lambda: list(self.inner.list(prefix))))

    def list_dirs(self, prefix: str) -> Iterator[str]:
        return iter(self._turn(f"list {prefix}", lambda: list(self.inner.list_dirs(prefix))))

    def delete(self, key: str) -> None:
        self._turn(f"delete {key}", lambda: self.inner.delete(key))


def _store_with_keys(name: str, n: int) -> tuple[list[str], list[str]]:
    """A memory store opened by ``n`` raw keys: (keys, key ids)."""
    keys = [s3ckpt.generate_key() for _ in range(n)]
    with s3ckpt.open_store(f"memory://{name}", key=keys[0]) as store:
        ids = [store.key_files()[0].key_id] + [store.add_key(k) for k in keys[1:]]
    return keys, ids


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(2, 3),
    removals=st.integers(2, 4),
    targets=st.data(),
    # Bursts: thread i makes its next k requests. Races between removals need one to run a stretch
    # while another is paused in the middle, which bursts reach far more often than single steps.
    order=st.lists(st.tuples(st.integers(0, 3), st.integers(1, 12)), max_size=12).map(
        lambda bursts: [i for i, k in bursts for _ in range(k)]
    ),
)
def test_no_interleaving_of_removals_removes_the_last_key(
    n: int, removals: int, targets: st.DataObject, order: list[int]
) -> None:
    name = f"keys-{uuid.uuid4().hex}"
    keys, ids = _store_with_keys(name, n)
    # Each removal removes some key: often every key at once, and sometimes one key twice (a retried
    # command), the cases that must fail safe.
    removing = [targets.draw(st.sampled_from(ids), label=f"removal {i}") for i in range(removals)]
    turnstile = Turnstile(MemoryBackend(name), [o % removals for o in order])
    stores = [s3ckpt.open_store(key=keys[i % n], backend=turnstile) for i in range(removals)]
    outcomes: list[str] = ["?"] * removals

    def remove(i: int) -> None:
        turnstile.enter(i)
        try:
            stores[i].remove_key(removing[i])
            outcomes[i] = "removed"
        except s3ckpt.ConfigurationError as exc:
            outcomes[i] = f"refused: {exc}"
        finally:
            turnstile.leave()

    threads = [threading.Thread(target=remove, args=(i,)) for i in range(removals)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    try:
        files = {info.key.removeprefix("keys/") for info in MemoryBackend(name).list("keys/")}
        assert files, f"every key file is gone: {outcomes} {turnstile.trace}"
        assert not list(MemoryBackend(name).list("key-removals/")), "a finished removal left its mark"
        for key, key_id in zip(keys, ids, strict=True):  # whatever is left opens the store
            if key_id in files:
                s3ckpt.open_store(f"memory://{name}", key=key, create=False).close()
        for target, outcome in zip(removing, outcomes, strict=True):
            if outcome == "removed":
                assert target not in files
            else:  # the last key, or one another removal already took
                assert "last key" in outcome or "no key file" in outcome, outcome
    finally:
        for store in stores:
            store.close()
        MemoryBackend.wipe(name)


def test_a_retried_removal_never_takes_away_another_removal_s_mark() -> None:
    """Found by review: A removes key a and stops before deleting it; B removes key b and stops
    before looking; C removes key a again (a retried command) and finishes. With one mark per key,
    C's cleanup deleted A's mark, B then counted a, and both keys went."""
    name = f"keys-{uuid.uuid4().hex}"
    keys, ids = _store_with_keys(name, 2)
    a, b = ids
    # 11 requests per removal (see the trace in Turnstile): A stops after 9, B after 5.
    order = [0] * 9 + [1] * 5 + [2] * 11 + [1] * 6 + [0] * 2
    turnstile = Turnstile(MemoryBackend(name), order)
    stores = [s3ckpt.open_store(key=keys[i % 2], backend=turnstile) for i in range(3)]
    outcomes: list[str] = ["?"] * 3

    def remove(i: int, key_id: str) -> None:
        turnstile.enter(i)
        try:
            stores[i].remove_key(key_id)
            outcomes[i] = "removed"
        except s3ckpt.ConfigurationError as exc:
            outcomes[i] = f"refused: {exc}"
        finally:
            turnstile.leave()

    threads = [threading.Thread(target=remove, args=(i, k)) for i, k in enumerate((a, b, a))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    try:
        files = [info.key for info in MemoryBackend(name).list("keys/")]
        assert files, f"every key file is gone: {outcomes} {turnstile.trace}"
        assert [t for t, _ in turnstile.trace[:14]] == [0] * 9 + [1] * 5, "the interleaving was not the one described"
    finally:
        for store in stores:
            store.close()
        MemoryBackend.wipe(name)


_REMOVER = textwrap.dedent(
    """
    import json, os, sys, time
    import s3ckpt
    url, key, key_id, go, options = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], json.loads(sys.argv[5])
    store = s3ckpt.open_store(url, key=key, create=False, **options)
    while not os.path.exists(go):
        time.sleep(0.001)
    try:
        store.remove_key(key_id)
        print("removed")
    except s3ckpt.ConfigurationError as exc:
        print("refused", exc)
    """
)


def _race_in_processes(url: str, options: dict[str, Any], tmp_path: Path, rounds: int) -> list[list[str]]:
    results = []
    for round_ in range(rounds):
        round_url = f"{url}/round-{round_}"
        keys = [s3ckpt.generate_key() for _ in range(3)]
        with s3ckpt.open_store(round_url, key=keys[0], **options) as store:
            ids = [store.key_files()[0].key_id] + [store.add_key(k) for k in keys[1:]]
        go = tmp_path / f"go-{round_}"
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _REMOVER, round_url, keys[i], ids[i], str(go), json.dumps(options)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(3)
        ]
        time.sleep(1.5)  # let every child open the store and wait at the gate
        go.touch()
        outs = [child.communicate(timeout=120) for child in children]
        assert all(child.returncode == 0 for child in children), outs
        verdicts = [out.split()[0] for out, _ in outs]
        survivors = [keys[i] for i in range(3) if verdicts[i] != "removed"]
        assert survivors, f"every removal succeeded: {outs}"
        for key in survivors:  # every key whose removal was refused still opens the store
            s3ckpt.open_store(round_url, key=key, create=False, **options).close()
        results.append(verdicts)
    return results


def test_removals_racing_in_processes_on_a_local_directory(tmp_path: Path) -> None:
    verdicts = _race_in_processes(str(tmp_path / "store"), {}, tmp_path, rounds=4)
    assert all("refused" in round_ for round_ in verdicts)


def test_removals_racing_in_processes_on_the_moto_server(moto_s3: S3Bucket, tmp_path: Path) -> None:
    options = {"endpoint_url": moto_s3.endpoint_url, "region": "us-east-1"}
    verdicts = _race_in_processes(f"s3://{moto_s3.bucket}", options, tmp_path, rounds=2)
    assert all("refused" in round_ for round_ in verdicts)


def test_a_planted_key_file_cannot_make_opening_slow_or_huge(tmp_path: Path) -> None:
    url = str(tmp_path / "store")
    passphrase = "passphrase:correct horse battery staple"
    with s3ckpt.open_store(url, key=passphrase) as store:
        store_id = store.config.store_id
    # What an attacker with write access to keys/ could plant: a copy of a real key file with
    # absurd scrypt parameters (4 GiB x 16 lanes).
    good = json.loads(next((tmp_path / "store" / "keys").iterdir()).read_text())
    hostile = {**good, "key_id": "ffffffffffffffff", "scrypt": {"n": 1 << 22, "r": 32, "p": 16}}
    (tmp_path / "store" / "keys" / "ffffffffffffffff").write_text(json.dumps(hostile))
    started = time.monotonic()
    with s3ckpt.open_store(url, key=passphrase, create=False) as store:  # the real key file still opens it
        assert store.config.store_id == store_id
    assert time.monotonic() - started < 30
    # With only the hostile file, opening is refused at once, with a message that names the bound.
    for path in (tmp_path / "store" / "keys").iterdir():
        if path.name != "ffffffffffffffff":
            path.unlink()
    started = time.monotonic()
    with pytest.raises(s3ckpt.DecryptionError, match="bound"):
        s3ckpt.open_store(url, key=passphrase, create=False)
    assert time.monotonic() - started < 10


def test_new_passphrase_keys_use_current_scrypt_guidance(tmp_path: Path) -> None:
    with s3ckpt.open_store(str(tmp_path / "s"), key="passphrase:a long enough passphrase") as store:
        (keyfile,) = store.key_files()
    assert keyfile.scrypt is not None
    assert (keyfile.scrypt.n, keyfile.scrypt.r, keyfile.scrypt.p) == (1 << 17, 8, 1)
