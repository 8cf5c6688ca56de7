"""The effects promise, generated: one logical effect never reaches the provider twice, nor under two
idempotency keys, whatever mix of steps, nested steps, retries, rejections, exceptions, crashes,
resumes, reconciler answers, operator decisions and rollbacks a user or a fault produces.

A Hypothesis state machine drives a program of top-level operations (emits, and steps whose bodies
emit and nest steps) against a provider that records every request it receives and never
deduplicates. Every operation has a logical identity fixed when it is written (the payload names
it), so a retried step, a retried emit and a replay after a resume all carry the same logical
effects. The provider's answer to each request is drawn: delivered, delivered and then an error
(outcome unknown, it happened), an error before delivering (unknown, it did not), an explicit
refusal (EffectFailedError), or a crash of the process before or after delivering (a BaseException
that abandons the session and its store object, exactly what a killed process leaves behind).

After every rule, against the durable store read by an independent store object:
- each logical effect is delivered at most once (a rollback's compensation undoes one delivery);
- each logical effect reached the provider under at most one idempotency key, apart from requests
  the provider explicitly refused;
- the ledger agrees with the provider: confirmed means delivered under that key with that
  reference, failed and not_sent mean not delivered, every delivered key is in the ledger;
- a replay never meets EffectMismatchError (positions are deterministic), and nothing escapes but
  the typed errors a caller is told to expect.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import s3ckpt
from s3ckpt import (
    EffectFailedError,
    EffectMismatchError,
    FencedError,
    S3ckptError,
    StepRejectedError,
    UnknownOutcomeError,
)
from s3ckpt.backends import MemoryBackend
from s3ckpt.testing import MotoServer

RUN = "order-42"
KINDS = ("charge", "email")
#: How many examples each backend runs in CI (S3CKPT_SOAK multiplies them).
SOAK = int(os.environ.get("S3CKPT_SOAK", "1"))
DEBUG = bool(os.environ.get("S3CKPT_DEBUG"))
EXAMPLES = {"memory": int(os.environ.get("S3CKPT_EXAMPLES", 300)) * SOAK, "local": 120 * SOAK, "moto": 12 * SOAK}


class Crash(BaseException):
    """The process dies here: nothing after this point runs, nothing in memory survives."""


# -- the outside world ---------------------------------------------------------------------


@dataclass
class Delivery:
    key: str
    lid: int
    reference: str
    compensated: bool = False


@dataclass
class Provider:
    """Records every request; never deduplicates (a duplicate shows up as a second delivery)."""

    deliveries: list[Delivery] = field(default_factory=list)
    #: key -> (lid, the lid's incarnation when the key was first presented, the last answer to it)
    requests: dict[str, tuple[int, int, str]] = field(default_factory=dict)
    #: lid -> how many of its deliveries a rollback compensated
    incarnation: Counter[int] = field(default_factory=Counter)

    def by_key(self, key: str) -> Delivery | None:
        found = [d for d in self.deliveries if d.key == key]
        assert len(found) <= 1, f"key {key} delivered {len(found)} times"
        return found[0] if found else None

    def request(self, key: str, lid: int, answer: str) -> str:
        if DEBUG:
            print(f"  request {key[:12]} lid={lid} -> {answer}")
        first = self.requests.get(key)
        self.requests[key] = (lid, self.incarnation[lid] if first is None else first[1], answer)
        if answer == "refuse":
            raise EffectFailedError("the provider refused the request")
        if answer == "raise-before":
            raise TimeoutError("no answer (the provider did nothing)")
        if answer == "crash-before":
            raise Crash
        reference = f"ref-{len(self.deliveries) + 1}"
        self.deliveries.append(Delivery(key, lid, reference))
        if answer == "raise-after":
            raise ConnectionResetError("connection reset (the provider acted)")
        if answer == "crash-after":
            raise Crash
        return reference

    def reconcile(self, effect: s3ckpt.EffectRecord) -> str | None:
        delivery = self.by_key(effect.idempotency_key)
        return None if delivery is None else delivery.reference

    def compensate(self, key: str) -> None:
        delivery = self.by_key(key)
        assert delivery is not None, f"compensating {key}, which was never delivered"
        assert not delivery.compensated, f"compensating {key} twice"
        delivery.compensated = True
        self.incarnation[delivery.lid] += 1


ANSWERS = st.sampled_from(
    ["ok"] * 6 + ["raise-after", "raise-before", "refuse", "refuse", "crash-before", "crash-after"]
)


class Everything(dict[str, Any]):
    """A reconcile mapping that answers for every kind (as a defaultdict would)."""

    def __init__(self, answer: Callable[[s3ckpt.EffectRecord], Any]) -> None:
        super().__init__()
        self._answer = answer

    def __missing__(self, kind: str) -> Callable[[s3ckpt.EffectRecord], Any]:
        return self._answer


# -- the program -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Emit:
    kind: str
    lid: int
    catch: bool  # the calling code catches what emit raises and goes on


@dataclass(frozen=True)
class Step:
    name: str
    body: tuple[Emit | Step, ...]
    catch: bool


Op = Emit | Step
BODY_ITEM = st.one_of(
    st.tuples(st.just("emit"), st.sampled_from(KINDS), st.booleans()),
    st.tuples(st.just("step"), st.lists(st.tuples(st.sampled_from(KINDS), st.booleans()), max_size=2), st.booleans()),
)


class SessionMachine(RuleBasedStateMachine):
    """One run of one program, driven by generated rules. Subclasses choose the backend."""

    backend = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.provider = Provider()
        self.program: list[Op] = []
        self.last_raised = False
        self.next_id = 0
        self.session: s3ckpt.Session | None = None
        self.store: s3ckpt.Store | None = None
        self.in_doubt = False
        self.key = s3ckpt.generate_key()
        self.url, self.options = self.make_location()
        self.observer = self.open()
        self.answers: Callable[[], str] = lambda: "ok"

    # -- the machinery ---------------------------------------------------------------------

    def make_location(self) -> tuple[str, dict[str, Any]]:
        name = f"effects-{uuid.uuid4().hex}"
        return f"memory://{name}", {}

    def open(self) -> s3ckpt.Store:
        return s3ckpt.open_store(self.url, key=self.key, **self.options)

    def teardown(self) -> None:
        self.drop_session()
        self.observer.close()
        if self.url.startswith("memory://"):
            MemoryBackend.wipe(self.url.removeprefix("memory://"))

    def drop_session(self) -> None:
        """The process is gone: its session and its store object with it."""
        self.session = None
        self.in_doubt = False
        if self.store is not None:
            self.store.close()
            self.store = None

    def alive(self) -> bool:
        return self.session is not None

    def fresh_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def build(self, spec: list[Any], prefix: str) -> tuple[Op, ...]:
        ops: list[Op] = []
        for item in spec:
            if item[0] == "emit":
                ops.append(Emit(item[1], self.fresh_id(), item[2]))
            else:
                n = self.fresh_id()
                inner = tuple(Emit(kind, self.fresh_id(), catch) for kind, catch in item[1])
                ops.append(Step(f"{prefix}.{n}", inner, item[2]))
        return tuple(ops)

    def run_op(self, op: Op, data: st.DataObject) -> None:
        """Run one operation in the live session as user code would; raise what the code lets escape."""
        session = self.session
        assert session is not None
        if isinstance(op, Emit):

            def send(key: str, lid: int = op.lid) -> str:
                return self.provider.request(key, lid, data.draw(ANSWERS, label="provider answer"))

            try:
                # Two targets per kind: a loop over recipients and a retry of one effect both occur.
                session.emit(op.kind, target=f"{op.kind}-desk-{op.lid % 2}", payload={"lid": op.lid}, send=send)
            except (TimeoutError, ConnectionResetError):
                self.in_doubt = True  # this session went on past an effect in doubt
                if not op.catch:
                    raise
            except (EffectFailedError, UnknownOutcomeError):
                if not op.catch:
                    raise
            return

        def body() -> str:
            for inner in op.body:
                self.run_op(inner, data)
            if data.draw(st.integers(0, 5), label="body raises") == 0:
                raise RuntimeError("the body failed after its effects")
            return f"result of {op.name}"

        accept = data.draw(st.integers(0, 4), label="accepted") != 0
        try:
            session.step(op.name, body, accept=lambda result: accept)
        except (StepRejectedError, RuntimeError, EffectFailedError, UnknownOutcomeError, TimeoutError, ConnectionResetError):
            if not op.catch:
                raise

    def execute(self, op: Op, data: st.DataObject) -> bool:
        """Run ``op`` at top level; True if it raised. A crash or a fenced session ends the session."""
        try:
            self.run_op(op, data)
        except Crash:
            self.drop_session()
            return True
        except FencedError:
            self.drop_session()
            return True
        except EffectMismatchError as exc:
            # Allowed only where the code went on past an effect in doubt and emitted another effect of
            # that kind, which may be a retry with other content: s3ckpt stops rather than guess.
            # Anywhere else it would mean a replay reached another effect at a recorded position.
            if not self.in_doubt:
                raise AssertionError(f"a replay reached another effect at a recorded position: {exc}") from exc
            self.drop_session()
            return True
        except (S3ckptError, RuntimeError, TimeoutError, ConnectionResetError):
            return True
        return False

    # -- rules ------------------------------------------------------------------------------

    @initialize(data=st.data())
    def start(self, data: st.DataObject) -> None:
        self.resume(data, reconcile=True)

    @precondition(lambda self: self.session is not None)
    @rule(kind=st.sampled_from(KINDS), catch=st.booleans(), data=st.data())
    def emit(self, kind: str, catch: bool, data: st.DataObject) -> None:
        op = Emit(kind, self.fresh_id(), catch)
        self.program.append(op)
        self.last_raised = self.execute(op, data)

    @precondition(lambda self: self.session is not None)
    @rule(body=st.lists(BODY_ITEM, max_size=3), catch=st.booleans(), data=st.data())
    def step(self, body: list[Any], catch: bool, data: st.DataObject) -> None:
        n = self.fresh_id()
        op = Step(f"s{n}", self.build(body, f"s{n}"), catch)
        self.program.append(op)
        self.last_raised = self.execute(op, data)

    @precondition(lambda self: self.session is not None and self.last_raised and bool(self.program))
    @rule(data=st.data())
    def retry_last(self, data: st.DataObject) -> None:
        """The user's retry loop: the same operation (same logical effects) again, in the same session."""
        self.last_raised = self.execute(self.program[-1], data)

    @precondition(lambda self: self.session is not None)
    @rule()
    def crash(self) -> None:
        self.drop_session()

    @rule(reconcile=st.booleans(), data=st.data())
    def resume(self, data: st.DataObject, reconcile: bool) -> None:
        """A fresh process resumes the run and runs the program again from the top."""
        self.drop_session()
        self.store = self.open()
        try:
            self.session = self.store.resume(
                RUN,
                workflow="w",
                workflow_version="1",
                reconcile=Everything(self.provider.reconcile) if reconcile else None,
            )
        except UnknownOutcomeError:
            assert not reconcile, "a truthful reconciler for every kind left an effect unknown"
            self.drop_session()
            return
        except Crash:
            self.drop_session()
            return
        self.last_raised = False
        for op in self.program:
            self.last_raised = self.execute(op, data)
            if not self.alive():  # crashed or fenced: the process is gone
                return

    @rule(data=st.data())
    def operator_resolves(self, data: st.DataObject) -> None:
        """An operator settles an unknown effect after asking the provider (fencing the live writer)."""
        latest = self.observer.run(RUN).latest()
        unknown = [e for e in latest.effects if e.status in ("pending", "unknown")] if latest else []
        if not unknown:
            return
        effect = data.draw(st.sampled_from(unknown), label="effect to resolve")
        delivery = self.provider.by_key(effect.idempotency_key)
        self.drop_session()
        run = self.open().run(RUN)
        reference = delivery.reference if delivery else None
        try:  # a unique prefix of the key is enough
            run.resolve_effect(effect.idempotency_key[:12], sent=delivery is not None, reference=reference)
        except s3ckpt.InvalidArgumentError:  # not unique after all
            run.resolve_effect(effect.idempotency_key, sent=delivery is not None, reference=reference)
        finally:
            run.store.close()

    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        """An operator rolls the run back to an earlier checkpoint and compensates what it returns."""
        seqs = [c.seq for c in self.observer.run(RUN).history()]
        if not seqs:
            return
        seq = data.draw(st.sampled_from(seqs), label="rollback to")
        self.drop_session()
        store = self.open()
        try:
            undone = store.run(RUN).rollback(seq)
        except UnknownOutcomeError:
            return  # refused before writing: effects after the point are in doubt
        finally:
            store.close()
        for effect in undone:
            self.provider.compensate(effect.idempotency_key)

    # -- the promises -----------------------------------------------------------------------

    @invariant()
    def each_logical_effect_is_delivered_at_most_once(self) -> None:
        live = Counter(d.lid for d in self.provider.deliveries if not d.compensated)
        assert [lid for lid, n in live.items() if n > 1] == [], self.provider.deliveries

    @invariant()
    def each_logical_effect_has_at_most_one_key(self) -> None:
        """Keys under which the provider may have acted: delivered, or the last answer left it in doubt.
        A key the provider explicitly refused is not one (a new key after a refusal is allowed)."""
        live: defaultdict[tuple[int, int], set[str]] = defaultdict(set)
        for key, (lid, incarnation, answer) in self.provider.requests.items():
            if self.provider.by_key(key) is not None or answer in ("raise-before", "crash-before"):
                live[(lid, incarnation)].add(key)
        assert [k for k, keys in live.items() if len(keys) > 1] == [], self.provider.requests

    @invariant()
    def the_ledger_agrees_with_the_provider(self) -> None:
        latest = self.observer.run(RUN).latest()
        effects = {e.idempotency_key: e for e in latest.effects} if latest is not None else {}
        for key, effect in effects.items():
            delivery = self.provider.by_key(key)
            if effect.status == "confirmed":
                assert delivery is not None, effect
                assert delivery.reference == effect.reference, (effect, delivery)
                assert not delivery.compensated, (effect, delivery)
            elif effect.status in ("failed", "not_sent"):
                assert delivery is None, (effect, delivery)
            elif effect.status == "rolled_back":
                assert delivery is not None, effect
                assert delivery.compensated, (effect, delivery)
        for delivery in self.provider.deliveries:
            assert delivery.key in effects, f"{delivery} reached the provider but is not in the ledger"


class LocalMachine(SessionMachine):
    backend = "local"
    root: Path = Path()

    def make_location(self) -> tuple[str, dict[str, Any]]:
        return str(self.root / uuid.uuid4().hex), {"fsync": False}


class MotoMachine(SessionMachine):
    backend = "moto"
    server: MotoServer | None = None
    bucket = ""

    def make_location(self) -> tuple[str, dict[str, Any]]:
        assert self.server is not None
        return f"s3://{self.bucket}/{uuid.uuid4().hex}", {"endpoint_url": self.server.endpoint_url, "region": "us-east-1"}


def _settings(backend: str) -> settings:
    return settings(
        max_examples=EXAMPLES[backend],
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def test_effects_on_memory() -> None:
    SessionMachine.TestCase.settings = _settings("memory")
    SessionMachine.TestCase().runTest()


def test_effects_on_a_local_directory(tmp_path: Path) -> None:
    LocalMachine.root = tmp_path
    LocalMachine.TestCase.settings = _settings("local")
    LocalMachine.TestCase().runTest()


def test_effects_on_the_moto_server(moto_s3: Any) -> None:
    MotoMachine.server, MotoMachine.bucket = moto_s3.server, moto_s3.bucket
    MotoMachine.TestCase.settings = _settings("moto")
    MotoMachine.TestCase().runTest()


@pytest.fixture(autouse=True)
def _quiet_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("ERROR", logger="s3ckpt")

