"""The commit log against a model, driven by Hypothesis: claims fence older writers, only the
current writer commits, and every read (from the writing Store or a freshly opened one) agrees with
the model: latest(), get(seq) and history().
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import s3ckpt
from s3ckpt.backends import MemoryBackend

RUN = "stateful run/ü"  # escaped in keys: the model also covers the run-id encoding

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
)
json_states = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)


class LogMachine(RuleBasedStateMachine):
    """The model: the kind of each record by seq, the checkpoints, and the seq of each claim."""

    backend: ClassVar[str] = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.key = s3ckpt.generate_key()
        self._tmp: Path | None = None
        self._memory: str | None = None
        if self.backend == "memory":
            self._memory = f"stateful-{uuid.uuid4().hex}"
            self.url = f"memory://{self._memory}"
        else:
            self._tmp = Path(tempfile.mkdtemp(prefix="s3ckpt-stateful-"))
            self.url = str(self._tmp / "store")
        self.stores: list[s3ckpt.Store] = [s3ckpt.open_store(self.url, key=self.key)]
        self.writers: list[s3ckpt.Writer] = []
        self.kinds: list[str] = []  # the model log: record kind at each seq
        self.claim_seqs: list[int] = []  # claim_seqs[i] is where writer i claimed (epoch i + 1)
        self.checkpoints: list[tuple[int, Any]] = []  # (seq, state), oldest first

    @property
    def store(self) -> s3ckpt.Store:
        return self.stores[-1]

    def teardown(self) -> None:
        for store in self.stores:
            store.close()
        if self._memory is not None:
            MemoryBackend.wipe(self._memory)
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)

    # -- writing -----------------------------------------------------------------------------

    @initialize(claimed=st.booleans())
    def start(self, claimed: bool) -> None:
        """Most runs start claimed, so that more of each example is spent on commits and fencing."""
        if claimed:
            self.claim()

    @rule()
    def claim(self) -> None:
        writer = self.store.run(RUN).claim(writer=len(self.writers))
        seq = len(self.kinds)
        assert writer.epoch == len(self.writers) + 1
        assert writer.next_seq == seq + 1
        self.kinds.append("claim")
        self.claim_seqs.append(seq)
        self.writers.append(writer)

    @precondition(lambda self: self.writers)
    @rule(pick=st.none() | st.integers(min_value=0, max_value=63), state=json_states)
    def commit(self, pick: int | None, state: Any) -> None:
        """Commit through the current writer (pick None) or any writer (pick modulo their number)."""
        index = len(self.writers) - 1 if pick is None else pick % len(self.writers)
        writer = self.writers[index]
        if index == len(self.writers) - 1:
            seq = len(self.kinds)
            checkpoint = writer.commit(state)
            # What a store keeps is the state as redaction leaves it (a "token": 5 is hidden).
            state = s3ckpt.DEFAULT_REDACTOR.redact(state)
            assert (checkpoint.seq, checkpoint.epoch) == (seq, index + 1)
            assert checkpoint.state == state
            self.kinds.append("checkpoint")
            self.checkpoints.append((seq, state))
        else:
            with pytest.raises(s3ckpt.FencedError) as info:
                writer.commit(state)
            fenced = info.value
            assert type(fenced) is s3ckpt.FencedError
            assert fenced.run_id == RUN
            assert fenced.epoch == index + 1
            # The writer collides with the very next claim after its own.
            assert fenced.seq == self.claim_seqs[index + 1]
            assert fenced.newer_epoch == index + 2

    @rule()
    def reopen(self) -> None:
        """A fresh Store object on the same objects (the old ones stay open for their writers)."""
        self.stores.append(s3ckpt.open_store(self.url, key=self.key, create=False))
        self._check_latest(self.store)
        self._check_history(self.store)

    # -- reading -----------------------------------------------------------------------------

    def _check_latest(self, store: s3ckpt.Store) -> None:
        latest = store.run(RUN).latest()
        if not self.checkpoints:
            assert latest is None
        else:
            assert latest is not None
            assert (latest.seq, latest.state) == self.checkpoints[-1]
            assert latest.run_id == RUN
        assert store.run(RUN).exists() == bool(self.kinds)

    def _check_history(self, store: s3ckpt.Store) -> None:
        assert [(cp.seq, cp.state) for cp in store.run(RUN).history()] == self.checkpoints
        assert [(r.seq, r.kind) for r in store.run(RUN).records()] == list(enumerate(self.kinds))

    @invariant()
    def latest_matches_model(self) -> None:
        self._check_latest(self.store)

    @rule(seq=st.integers(min_value=0, max_value=40), first_store=st.booleans())
    def get(self, seq: int, first_store: bool) -> None:
        store = self.stores[0] if first_store else self.store
        if seq < len(self.kinds) and self.kinds[seq] == "checkpoint":
            checkpoint = store.run(RUN).get(seq)
            assert checkpoint.seq == seq
            assert (seq, checkpoint.state) in self.checkpoints
        else:
            with pytest.raises(s3ckpt.RunNotFoundError, match=f"seq {seq}"):
                store.run(RUN).get(seq)

    @rule(first_store=st.booleans())
    def history(self, first_store: bool) -> None:
        self._check_history(self.stores[0] if first_store else self.store)


_SETTINGS = settings(
    max_examples=50,
    stateful_step_count=20,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


class MemoryLogMachine(LogMachine):
    backend = "memory"


class LocalLogMachine(LogMachine):
    backend = "local"


TestLogOnMemory = MemoryLogMachine.TestCase
TestLogOnMemory.settings = _SETTINGS
TestLogOnLocal = LocalLogMachine.TestCase
TestLogOnLocal.settings = _SETTINGS
