"""Redaction, property-tested: a secret of any built-in kind, planted anywhere a string can hide in
random JSON, survives neither the Redactor nor the trip into a store.

Positions: dict keys, values, nested lists and tuples, inside larger text, header pairs
(``["X-Api-Key", v]``) and lists of them, name/value objects, header lines, and under secret-named
keys as strings, numbers, booleans, lists and dicts. Entry points: ``writer.commit(state, meta=...)``,
``run.claim(**provenance)``, ``store.resume(provenance=...)``, step names and results, effect kinds,
targets, payloads, references and idempotency keys, the error text of step bodies and sends, budget
units. The store check opens every object of a local store with the store's cipher (records, HEADs,
every chunk a record references) and proves that no byte of a pack was left unread.
"""

from __future__ import annotations

import copy
import json
import re
import string
import tempfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import s3ckpt
from s3ckpt import codec
from s3ckpt._names import decode_run_id
from s3ckpt.records import Manifest
from s3ckpt.redaction import DEFAULT_REDACTOR, SECRET_FIELD, marker
from tests.test_redaction import LOOKALIKES, PLAIN_KEYS, SECRET_KEYS, SECRETS

from .store_objects import assert_packs_covered

R = DEFAULT_REDACTOR
FIELD = marker(SECRET_FIELD)
_MARKER = re.compile(r"\[REDACTED:[A-Za-z0-9][A-Za-z0-9_.\-]*(?:#[0-9]+)?\]")

# A look-alike that happens to hold a corpus secret's text ("NextToken: abc123") would read as a leak.
SAFE_LOOKALIKES = [t for t in LOOKALIKES if not any(c.secret in t for c in SECRETS)]
# Secrets that a pattern finds with no context around them.
BARE = [c for c in SECRETS if c.secret not in R.redact_text(c.secret)]
HEADER_NAMES = [k for k in SECRET_KEYS if re.fullmatch(r"[A-Za-z][A-Za-z0-9_.\-]*", k)]
LABELS = {c.secret: c.name for c in SECRETS}


def test_the_corpus_covers_every_built_in_kind() -> None:
    kinds = {p.kind for p in R.patterns}
    assert {c.kind for c in SECRETS} == kinds
    assert len(BARE) >= 25
    assert len(SAFE_LOOKALIKES) >= len(LOOKALIKES) - 2
    assert len(HEADER_NAMES) >= 20


# -- generated values with what was planted in them --------------------------------------------


@dataclass(frozen=True)
class Planted:
    """A generated value, the secret strings planted in it and the sentinel numbers hidden in it."""

    value: Any
    secrets: frozenset[str] = field(default_factory=frozenset)
    numbers: frozenset[int | float] = field(default_factory=frozenset)


def _join(parts: Iterable[Planted], build: Callable[[list[Any]], Any]) -> Planted:
    parts = list(parts)
    return Planted(
        build([p.value for p in parts]),
        frozenset().union(*(p.secrets for p in parts)),
        frozenset().union(*(p.numbers for p in parts)),
    )


def _dict(items: list[tuple[Planted, Planted]]) -> Planted:
    flat = [part for pair in items for part in pair]
    return _join(flat, lambda values: dict(zip(values[::2], values[1::2], strict=True)))


CASES = st.sampled_from(SECRETS)
SEPARATORS = st.sampled_from([" ", "\n", "\t", " | ", ", ", "; ", "\r\n"])
TEXT = st.one_of(
    st.sampled_from(SAFE_LOOKALIKES),
    st.text(st.characters(codec="utf-8"), max_size=12),
)
PLAIN_KEY = st.one_of(
    st.sampled_from(PLAIN_KEYS),
    st.sampled_from(SAFE_LOOKALIKES),
    st.text(string.ascii_letters + string.digits + "_-. ", max_size=10),
)
FILLER = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-1000, 1000),
    st.sampled_from([0.5, -1.25, 3.0, 1e-3]),
    TEXT,
).map(Planted)

# What a secret name hides whole: any string at all, sentinel numbers, and containers (booleans and
# None are kept: they say nothing).
SENTINEL = st.text(string.ascii_letters + string.digits, min_size=8, max_size=16).map(lambda s: "s3nt-" + s)
RAW_SECRET = st.one_of(CASES.map(lambda c: c.secret), SENTINEL).map(lambda s: Planted(s, frozenset({s})))
HIDDEN = st.recursive(
    st.one_of(
        RAW_SECRET,
        st.integers(10**15, 10**16 - 1).map(lambda n: Planted(n, numbers=frozenset({n}))),
        st.floats(1e15, 1e16).map(lambda x: Planted(x, numbers=frozenset({x}))),
        st.booleans().map(Planted),
        st.none().map(Planted),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda ps: _join(ps, list)),
        st.lists(inner, max_size=3).map(lambda ps: _join(ps, tuple)),
        st.lists(st.tuples(PLAIN_KEY.map(Planted), inner), max_size=3).map(_dict),
    ),
    max_leaves=6,
)

IN_TEXT = st.builds(
    lambda before, sep, case, sep2, after: Planted(before + sep + case.text + sep2 + after, frozenset({case.secret})),
    TEXT,
    SEPARATORS,
    CASES,
    SEPARATORS,
    TEXT,
)
BARE_SECRET = st.sampled_from(BARE).map(lambda c: Planted(c.secret, frozenset({c.secret})))
HEADER_LINE = st.builds(
    lambda before, name, raw, rest, after: Planted(f"{before}\n{name}: {raw.value}{rest}\n{after}", raw.secrets),
    TEXT,
    st.sampled_from(HEADER_NAMES),
    RAW_SECRET,
    st.sampled_from(["", "; theme=dark", " and more words", "  "]),
    TEXT,
)
_PLAIN_SECRET_TEXT = st.one_of(CASES.map(lambda c: Planted(c.text, frozenset({c.secret}))), BARE_SECRET, IN_TEXT, HEADER_LINE)
# The same text as a repr or a JSON string shows it (an error message, a log line): line breaks and
# quotes escaped. The secret is looked for as it is written there.
ENCODINGS = {"repr": repr, "json": json.dumps}
ESCAPED = st.builds(
    lambda p, encode: Planted(encode(p.value), frozenset(encode(s)[1:-1] for s in p.secrets)),
    _PLAIN_SECRET_TEXT,
    st.sampled_from(list(ENCODINGS.values())),
)
#: Strings that carry a secret wherever they are: a value, a key, a name.
SECRET_TEXT = st.one_of(_PLAIN_SECRET_TEXT, ESCAPED)

UNDER_SECRET_KEY = st.builds(lambda key, hidden: _dict([(Planted(key), hidden)]), st.sampled_from(SECRET_KEYS), HIDDEN)
PAIR = st.builds(
    lambda name, hidden, as_tuple: _join([Planted(name), hidden], tuple if as_tuple else list),
    st.sampled_from(SECRET_KEYS),
    HIDDEN,
    st.booleans(),
)
NAME_VALUE = st.builds(
    lambda name_field, value_field, name, hidden: _dict([(Planted(name_field), Planted(name)), (Planted(value_field), hidden)]),
    st.sampled_from(["name", "Name", "key", "Key", "header"]),
    st.sampled_from(["value", "Value"]),
    st.sampled_from(SECRET_KEYS),
    HIDDEN,
)
#: A planted secret in any of its shapes.
PLANT = st.one_of(SECRET_TEXT, UNDER_SECRET_KEY, PAIR, NAME_VALUE)


def json_trees(max_leaves: int) -> st.SearchStrategy[Planted]:
    """Random JSON with secrets planted at random positions: values, keys, nested containers."""

    def extend(children: st.SearchStrategy[Planted]) -> st.SearchStrategy[Planted]:
        key = st.one_of(PLAIN_KEY.map(Planted), SECRET_TEXT)
        return st.one_of(
            st.lists(children, max_size=4).map(lambda ps: _join(ps, list)),
            st.lists(children, max_size=3).map(lambda ps: _join(ps, tuple)),
            st.lists(st.tuples(key, children), max_size=4).map(_dict),
            st.lists(PAIR, min_size=1, max_size=3).map(lambda ps: _join(ps, list)),  # a header list
        )

    tree = st.recursive(st.one_of(FILLER, PLANT), extend, max_leaves=max_leaves)
    # At least one secret for sure, at the top or beside the tree.
    return st.builds(
        lambda t, plant, key, where: [
            _join([t, plant], list),
            _dict([(Planted("v"), t), (key, plant)]),
            _join([plant, t], tuple),
        ][where],
        tree,
        PLANT.filter(lambda p: bool(p.secrets or p.numbers)),
        st.one_of(PLAIN_KEY.map(Planted), SECRET_TEXT),
        st.integers(0, 2),
    )


def json_objects(max_leaves: int) -> st.SearchStrategy[Planted]:
    """Like json_trees, always a dict (meta, provenance)."""
    return st.builds(
        lambda t, key: _dict([(key, t)]),
        json_trees(max_leaves),
        st.one_of(PLAIN_KEY.map(Planted), SECRET_TEXT),
    )


# -- what must hold of a redacted value ----------------------------------------------------------


def _scalars(value: Any, path: str = "", *, keys: bool = True) -> Iterator[tuple[str, Any]]:
    """Every scalar (and, with ``keys``, every dict key) of a JSON-like value, with where it sits."""
    if isinstance(value, dict):
        for k, v in value.items():
            if keys:
                yield f"{path} (a key)", k
            yield from _scalars(v, f"{path}[{str(k)[:40]!r}]", keys=keys)
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            yield from _scalars(v, f"{path}[{i}]", keys=keys)
    else:
        yield path, value


def leaks(value: Any, secrets: Iterable[str], numbers: Iterable[int | float] = ()) -> list[str]:
    """Where a planted secret or sentinel number is still found (empty when none is)."""
    secrets, numbers = list(secrets), set(numbers)
    found: list[str] = []
    for path, item in _scalars(value):
        if isinstance(item, str):
            found += [f"{LABELS.get(s, 'secret')} at {path or 'top'}" for s in secrets if s in item]
        elif not isinstance(item, bool) and item in numbers:
            found.append(f"a sentinel number at {path or 'top'}")
    return found


def _all_hidden(value: Any) -> bool:
    return all(
        item is None or item == "" or isinstance(item, bool) or (isinstance(item, str) and _MARKER.fullmatch(item))
        for _, item in _scalars(value, keys=False)
    )


def unhidden_secret_places(value: Any, path: str = "") -> list[str]:
    """Places a secret name governs (its dict value, its pair's second item, a name/value object's
    value) that hold anything but markers, None or "": a property of the output alone."""
    out: list[str] = []
    if isinstance(value, dict):
        names = [v for k, v in value.items() if k in ("name", "Name", "key", "Key", "header") and isinstance(v, str)]
        named_secret = len(value) <= 8 and any(R.is_secret_key(n) for n in names)
        for k, v in value.items():
            secret = isinstance(k, str) and (R.is_secret_key(k) or (named_secret and k in ("value", "Value")))
            if secret and not _all_hidden(v):
                out.append(f"{path}[{k!r}]")
            out += unhidden_secret_places(v, f"{path}[{str(k)[:40]!r}]")
    elif isinstance(value, list | tuple):
        if len(value) == 2 and isinstance(value[0], str) and R.is_secret_key(value[0]) and not _all_hidden(value[1]):
            out.append(f"{path}[1]")
        for i, v in enumerate(value):
            out += unhidden_secret_places(v, f"{path}[{i}]")
    return out


# -- at the Redactor ---------------------------------------------------------------------------

REDACTOR_EXAMPLES = 400


@settings(max_examples=REDACTOR_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_trees(max_leaves=16))
def test_no_planted_secret_survives_redact(planted: Planted) -> None:
    value = planted.value
    before = copy.deepcopy(value)
    out = R.redact(value)
    assert value == before  # the input is never changed
    assert leaks(out, planted.secrets, planted.numbers) == []
    assert unhidden_secret_places(out) == []
    assert R.redact(out) == out  # once redacted, redacted for good
    assert R.redact(value) == out  # deterministic
    if leaks(value, planted.secrets, planted.numbers):  # (a duplicate key may have dropped what was planted)
        assert R.found(value)  # something was planted, and found
    assert R.found(out) == []
    assert _shape(out) == _shape(value)  # keys may change, never how many or where


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return ("dict", [_shape(v) for v in value.values()])
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_shape(v) for v in value])
    return "scalar"


PLAIN_TREES = st.recursive(
    st.one_of(
        st.sampled_from(LOOKALIKES),
        st.integers(-(10**6), 10**6),
        st.booleans(),
        st.none(),
        st.lists(st.sampled_from(LOOKALIKES), min_size=2, max_size=4).map("\n".join),  # as lines
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.sampled_from(PLAIN_KEYS + LOOKALIKES), children, max_size=4),
        st.tuples(st.sampled_from(PLAIN_KEYS + LOOKALIKES), children).map(list),  # pairs with plain names
        st.builds(lambda n, v: {"name": n, "value": v}, st.sampled_from(PLAIN_KEYS), children),
    ),
    max_leaves=16,
)


@settings(max_examples=200, deadline=None)
@given(PLAIN_TREES)
def test_look_alikes_survive_in_any_position(value: Any) -> None:
    assert R.redact(value) == value
    assert R.found(value) == []


# -- in the store --------------------------------------------------------------------------------

STORE_EXAMPLES = 25
store_settings = settings(
    max_examples=STORE_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def decrypted_objects(root: Path, store: s3ckpt.Store) -> dict[str, Any]:
    """Every object of a local store as what it holds: records and HEADs opened with the store's
    cipher, each chunk a record references read through the blob store (JSON parsed where it is
    JSON), config and key files as stored. Fails on an object it cannot account for, and on bytes
    of a pack that no record references (they could not be checked)."""
    out: dict[str, Any] = {}
    packs: dict[str, int] = {}
    manifests: dict[str, Manifest] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        key = path.relative_to(root).as_posix()
        data = path.read_bytes()
        parts = key.split("/")
        if key == "config" or parts[0] == "keys" or parts[-1].startswith(".lock-"):
            out[key] = data.decode("utf-8", "replace")
        elif parts[0] == "runs" and len(parts) == 4 and parts[2] == "log":
            run_id = decode_run_id(parts[1])
            assert run_id is not None
            record = codec.decode_record(
                store.cipher, data, run_id=run_id, seq=int(parts[3]), key=key, segment=store.names.segment(run_id)
            )
            out[key] = json.loads(record.model_dump_json())
            found = {"state": record.state_manifest, "ledger": record.ledger_manifest}
            found.update({f"artifact {name!r}": m for name, m in record.artifacts.items()})
            manifests.update({f"{key} {name}": m for name, m in found.items() if m is not None})
        elif parts[0] == "runs" and len(parts) == 3 and parts[2] == "HEAD":
            run_id = decode_run_id(parts[1])
            assert run_id is not None
            out[key] = json.loads(codec.decode_head(
                store.cipher, data, segment=store.names.segment(run_id), key=key
            ).model_dump_json())
        elif parts[0] == "packs":
            packs[key] = len(data)
        else:
            raise AssertionError(f"an object this test cannot open: {key}")
    for where, manifest in manifests.items():
        text = store.blobs.read_all(manifest).decode("utf-8", "replace")
        try:
            out[f"chunks of {where}"] = json.loads(text)
        except ValueError:
            out[f"chunks of {where}"] = text
    assert_packs_covered(packs, manifests)
    return out


def store_leaks(root: Path, store: s3ckpt.Store, secrets: Iterable[str], numbers: Iterable[int | float] = ()) -> list[str]:
    """Every place, in every decrypted object and object key of a local store, where one of these
    secrets or numbers is found (as a value, a key or part of one, or in the raw JSON text)."""
    secrets, numbers = list(secrets), list(numbers)
    found: list[str] = []
    for key, content in decrypted_objects(root, store).items():
        found += [f"{key}: {place}" for place in leaks(content, secrets, numbers)]
        raw = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        found += [f"{key}: {LABELS.get(s, 'secret')} (raw)" for s in secrets if s in raw or json.dumps(s)[1:-1] in raw]
    for path in root.rglob("*"):  # object keys are stored in clear
        found += [f"object key {path.name}: {LABELS.get(s, 'secret')}" for s in secrets if s in str(path)]
    return sorted(set(found))


class LocalStore:
    """A store in a fresh directory, and every object in it decrypted."""

    def __init__(self, inline_limit: int = 64 << 10, redactor: s3ckpt.Redactor | None = None) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="s3ckpt-redaction-")
        self.root = Path(self._dir.name) / "store"
        self.key = s3ckpt.generate_key()
        self.options: dict[str, Any] = {"inline_limit": inline_limit, "redactor": redactor, "fsync": False}
        self._opened: list[s3ckpt.Store] = []
        self.store = self.open()

    def open(self) -> s3ckpt.Store:
        """Another store object on the same directory (as a fresh process would open it)."""
        store = s3ckpt.open_store(str(self.root), key=self.key, **self.options)
        self._opened.append(store)
        return store

    def __enter__(self) -> LocalStore:
        return self

    def __exit__(self, *exc: object) -> None:
        for store in self._opened:
            store.close()
        self._dir.cleanup()

    def objects(self) -> dict[str, Any]:
        return decrypted_objects(self.root, self.store)

    def leaks(self, planted: Iterable[Planted]) -> list[str]:
        """Every place of every object where a planted secret is found."""
        planted = list(planted)
        secrets = set().union(*(p.secrets for p in planted))
        numbers = set().union(*(p.numbers for p in planted))
        return store_leaks(self.root, self.store, secrets, numbers)


def _plain(value: Any) -> Any:
    """What a store records for a value before redaction: JSON (tuples are lists)."""
    return json.loads(json.dumps(value))


@store_settings
@given(state=json_trees(max_leaves=10), meta=json_objects(max_leaves=6), inline=st.booleans())
def test_commit_state_and_meta_keep_no_secret(state: Planted, meta: Planted, inline: bool) -> None:
    with LocalStore(64 << 10 if inline else 256) as local:
        writer = local.store.run("r").claim()
        writer.commit({"state": state.value}, meta=meta.value)
        writer.commit({"state": state.value, "again": True}, meta=meta.value)
        assert local.leaks([state, meta]) == []
        latest = local.store.run("r").latest()
        assert latest is not None
        assert latest.state == R.redact(_plain({"state": state.value, "again": True}))
        assert latest.meta == R.redact(_plain(meta.value))


@store_settings
@given(provenance=json_objects(max_leaves=8))
def test_claim_provenance_keeps_no_secret(provenance: Planted) -> None:
    with LocalStore() as local:
        writer = local.store.run("r").claim(**provenance.value)
        writer.commit({"n": 1})
        assert local.leaks([provenance]) == []


@store_settings
@given(provenance=json_objects(max_leaves=8))
def test_resume_provenance_keeps_no_secret(provenance: Planted) -> None:
    with LocalStore() as local:
        for _ in range(2):  # the second resume compares the provenance with the recorded one
            with local.open().resume("r", workflow="w", workflow_version="1", provenance=provenance.value) as session:
                session.step("s", lambda: 1)
                session.checkpoint()
        assert local.leaks([provenance]) == []


NAMES = SECRET_TEXT.filter(lambda p: len(p.value) <= 1000)


@store_settings
@given(
    names=st.lists(NAMES, min_size=1, max_size=3),
    results=st.lists(json_trees(max_leaves=6), min_size=1, max_size=3),
    inline=st.booleans(),
)
def test_step_names_and_results_keep_no_secret(names: list[Planted], results: list[Planted], inline: bool) -> None:
    with LocalStore(64 << 10 if inline else 256) as local:
        with local.store.resume("r", workflow="w", workflow_version="1") as session:
            for name, result in zip(names, results * len(names), strict=False):
                session.step(name.value, lambda r=result: r.value)
                with pytest.raises(s3ckpt.StepRejectedError):
                    session.step(name.value, lambda r=result: r.value, accept=lambda _: False)
        assert local.leaks([*names, *results]) == []


@store_settings
@given(names=st.lists(NAMES, min_size=1, max_size=3), results=st.lists(json_trees(max_leaves=6), min_size=1, max_size=3))
def test_steps_named_with_secrets_replay_without_running_again(names: list[Planted], results: list[Planted]) -> None:
    runs: Counter[int] = Counter()
    steps = list(enumerate(zip(names, results * len(names), strict=False)))

    def body(i: int, result: Planted) -> Any:
        runs[i] += 1
        return result.value

    with LocalStore() as local:
        for _ in range(2):
            with local.open().resume("r", workflow="w", workflow_version="1") as session:
                replayed = [session.step(name.value, body, i, result) for i, (name, result) in steps]
        assert list(runs.values()) == [1] * len(names)  # the second session replayed every step
        assert replayed == [R.redact(_plain(result.value)) for _, (_, result) in steps]  # as recorded: redacted


@dataclass
class Provider:
    """Records what it was sent, by idempotency key; ``reference`` is what it answers."""

    reference: Any = None
    sent: list[str] = field(default_factory=list)

    def send(self, key: str) -> Any:
        self.sent.append(key)
        return self.reference


EFFECT = st.fixed_dictionaries({
    "kind": NAMES,
    "target": json_trees(max_leaves=5),
    "payload": json_trees(max_leaves=5),
    "reference": json_trees(max_leaves=5),
    "key": st.one_of(st.none(), NAMES),
})  # fmt: skip


@store_settings
@given(effects=st.lists(EFFECT, min_size=1, max_size=3), inline=st.booleans())
def test_effects_keep_no_secret(effects: list[dict[str, Any]], inline: bool) -> None:
    with LocalStore(64 << 10 if inline else 256) as local:
        planted: list[Planted] = []
        with local.store.resume("r", workflow="w", workflow_version="1") as session:
            for i, e in enumerate(effects):
                provider = Provider(e["reference"].value)
                key = None if e["key"] is None else f"{e['key'].value} {i}"  # user keys are unique
                session.emit(
                    e["kind"].value,
                    target=e["target"].value,
                    payload=e["payload"].value,
                    send=provider.send,
                    idempotency_key=key,
                    store_payload=True,
                )
                planted += [v for v in e.values() if v is not None]
        assert local.leaks(planted) == []


@store_settings
@given(effects=st.lists(EFFECT, min_size=1, max_size=3))
def test_effects_with_secrets_in_kind_or_key_are_not_sent_again(effects: list[dict[str, Any]]) -> None:
    with LocalStore() as local:
        providers = [Provider(e["reference"].value) for e in effects]
        for _ in range(2):
            with local.open().resume("r", workflow="w", workflow_version="1") as session:
                for i, (e, provider) in enumerate(zip(effects, providers, strict=True)):
                    key = None if e["key"] is None else f"{e['key'].value} {i}"
                    session.emit(
                        e["kind"].value,
                        target=e["target"].value,
                        payload=e["payload"].value,
                        send=provider.send,
                        idempotency_key=key,
                    )
        assert [len(p.sent) for p in providers] == [1] * len(effects)


def test_two_idempotency_keys_that_redact_alike_stay_two_effects() -> None:
    # Both keys become "[REDACTED:aws-access-key-id]": recorded alike, they must still be told apart.
    keys = ["AKIA" + "IOSFODNN7EXAMPLE", "AKIA" + "ABCDEFGHIJKLMNOP"]
    with LocalStore() as local:
        provider = Provider("ok")
        for _ in range(2):
            with local.open().resume("r", workflow="w", workflow_version="1") as session:
                for key in keys:
                    session.emit("charge", target="t", payload={"amount": 1}, send=provider.send, idempotency_key=key)
        assert provider.sent == keys  # each sent once, under its own key
        assert local.leaks([Planted(None, frozenset(keys))]) == []


def test_two_step_names_that_redact_alike_stay_two_steps() -> None:
    # "fetch [REDACTED:aws-access-key-id]" twice: recorded alike, replayed in another order, each
    # step must still get its own result, as two plain names would.
    names = ["fetch AKIA" + "IOSFODNN7EXAMPLE", "fetch AKIA" + "ABCDEFGHIJKLMNOP"]
    runs: Counter[str] = Counter()

    def body(name: str) -> str:
        runs[name] += 1
        return f"result {len(runs)}"

    with LocalStore() as local:
        with local.open().resume("r", workflow="w", workflow_version="1") as session:
            first = {name: session.step(name, body, name) for name in names}
        with local.open().resume("r", workflow="w", workflow_version="1") as session:
            replayed = {name: session.step(name, body, name) for name in reversed(names)}
        assert replayed == first
        assert runs == dict.fromkeys(names, 1)
        assert local.leaks([Planted(None, frozenset(n.removeprefix("fetch ") for n in names))]) == []


@store_settings
@given(
    errors=st.lists(SECRET_TEXT, min_size=1, max_size=3), kind=st.sampled_from([RuntimeError, ValueError, KeyError, OSError])
)
def test_error_text_of_bodies_and_sends_keeps_no_secret(errors: list[Planted], kind: type[Exception]) -> None:
    with LocalStore() as local:
        with local.store.resume("r", workflow="w", workflow_version="1") as session:
            for i, error in enumerate(errors):

                def body(e: Planted = error) -> None:
                    raise kind(e.value)

                def refused(key: str, e: Planted = error) -> None:
                    raise s3ckpt.EffectFailedError(f"provider refused {key}: {e.value}")

                with pytest.raises(kind):
                    session.step(f"step-{i}", body)
                with pytest.raises(s3ckpt.EffectFailedError):
                    session.emit("refused", target="t", payload=i, send=refused)

            # The last send raises something else: the outcome is unknown, and its text recorded.
            def lost(key: str) -> None:
                raise kind(errors[0].value)

            with pytest.raises(kind):
                session.emit("unknown", target="t", payload=0, send=lost)
        assert local.leaks(errors) == []


@store_settings
@given(units=st.lists(NAMES, min_size=1, max_size=3), amounts=st.lists(st.integers(1, 100), min_size=1, max_size=3))
def test_budget_units_keep_no_secret(units: list[Planted], amounts: list[int]) -> None:
    with LocalStore() as local:
        with local.store.resume("r", workflow="w", workflow_version="1") as session:
            session.step(
                "work", lambda: session.spend(**{u.value: a for u, a in zip(units, amounts * len(units), strict=False)})
            )
            session.checkpoint()
        assert local.leaks(units) == []


def test_the_store_check_finds_what_no_redaction_keeps() -> None:
    # The check itself: with redaction off, a secret at each entry point is found, and where.
    case = SECRETS[0]
    planted = Planted(None, frozenset({case.secret}))
    with LocalStore(256, redactor=s3ckpt.NO_REDACTION) as local:
        with local.store.resume("r", workflow="w", workflow_version="1", provenance={"p": case.text}) as session:
            session.step(f"s {case.text}", lambda: {case.text: ["x" * 300]})
            session.step("spend", lambda: session.spend(**{case.text: 1}))
        found = local.leaks([planted])
    assert any("log/" in f and "['provenance']['p']" in f for f in found)
    assert any("chunks of" in f and "ledger" in f and "['steps'] (a key)" in f for f in found)
    assert any("['budget'] (a key)" in f for f in found)
    assert any("['result'] (a key)" in f for f in found)
