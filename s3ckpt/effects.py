"""A session's effects by position: which recorded effect decides what an emit does, and which
idempotency key a new request gets (docs/sessions.md, "Positions and idempotency keys").

A position (``<scope><kind>#<n>``) holds the effects tried there: at most one in doubt and, apart
from rolled-back ones, at most one that happened, because an emit settles the first before it tries
again and stops at the second. The rest did not happen (refused, not sent, rolled back). So what
decides an emit is found by status, whatever order the keys were issued in.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from . import values
from .records import EffectRecord

UNSETTLED = frozenset({"pending", "unknown"})
#: What an emit compares: the recorded (redacted) target and the payload's hash.
Content = tuple[Any, str]


def payload_hash(payload: Any) -> str:
    """``sha256:<hex>`` of bytes as they are, or of canonical JSON (sorted keys, no spaces)."""
    if isinstance(payload, bytes | bytearray | memoryview):
        data = bytes(payload)
    else:
        value = values.json_value(payload, "the effect's payload")
        data = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return "sha256:" + hashlib.sha256(data).hexdigest()


def derive_idempotency_key(store_id: str, run_id: str, position: str, kind: str, index: int) -> str:
    """The ``index``-th key of a position: the same store, run and position give the same key on
    every host and every resume, and no two stores (or runs, or positions) share one."""
    # JSON, not a separator: run ids and names may contain any character, NUL included.
    material = json.dumps(["s3ckpt/v2 effect", store_id, run_id, position, kind, index], ensure_ascii=True).encode()
    return "s3c-" + hashlib.sha256(material).hexdigest()[:40]


def escape(name: str) -> str:
    """A name as part of a position: ``#`` and ``%`` escaped, so ``#<n>/`` only ever separates scopes
    (a top-level step named ``a#0/b`` is not the step ``b`` inside ``a#0``)."""
    return name.replace("%", "%25").replace("#", "%23")


def describe(effect: EffectRecord) -> str:
    return (
        f"{effect.kind} to {json.dumps(effect.target)[:80]} (idempotency key {effect.idempotency_key}, position "
        f"{effect.position}, {effect.status} since {effect.intent_at.isoformat()})"
    )


def content_of(effect: EffectRecord) -> Content:
    return effect.target, effect.payload_hash


def _slot(position: str, content: Content) -> str:
    """The scope and kind of a position (``<scope><kind>#<n>`` without ``#<n>``), with the content."""
    target, digest = content
    return position.rsplit("#", 1)[0] + "\0" + json.dumps(target, sort_keys=True) + "\0" + digest


class EffectBook:
    """The effects of a session by idempotency key (the ledger's order), indexed by position and by
    scope, kind and content."""

    def __init__(self, effects: Mapping[str, EffectRecord]) -> None:
        self.effects: dict[str, EffectRecord] = dict(effects)
        #: position -> keys issued there
        self._at: dict[str, list[str]] = {}
        #: (scope, kind, content) -> keys issued for it, wherever its position was
        self._like: dict[str, list[str]] = {}
        for key, effect in self.effects.items():
            self._index(key, effect.position, content_of(effect))

    def _index(self, key: str, position: str, content: Content) -> None:
        for keys in (self._at.setdefault(position, []), self._like.setdefault(_slot(position, content), [])):
            if key not in keys:
                keys.append(key)

    def _unindex(self, key: str, position: str, content: Content) -> None:
        for keys in (self._at.get(position, []), self._like.get(_slot(position, content), [])):
            if key in keys:
                keys.remove(key)

    def deciding(self, position: str, caller_key: str | None) -> EffectRecord | None:
        """The effect that decides what an emit at ``position`` does. The position first: one in
        doubt there, else one that happened there. Then the caller's key, when it names an effect
        elsewhere (the same key used at another position is the same effect). Else the newest tried
        at the position."""
        here = [self.effects[key] for key in self._at.get(position, ())]
        for wanted in (UNSETTLED, {"confirmed"}):
            found = [effect for effect in here if effect.status in wanted]
            if found:
                return found[-1]
        if caller_key is not None and caller_key in self.effects:
            return self.effects[caller_key]
        return here[-1] if here else None

    def not_sent(self, position: str, content: Content, caller_key: str | None) -> EffectRecord | None:
        """An effect with this content, kind and scope that was not sent (its position may have moved
        since): it goes out again under its own key, so the provider never sees it under two."""
        if caller_key is not None and caller_key in self.effects:
            candidates = [caller_key]
        else:
            candidates = self._like.get(_slot(position, content), [])
        for key in candidates:
            effect = self.effects[key]
            if effect.status == "not_sent" and content_of(effect) == content:
                return effect
        return None

    def refused(self, position: str, content: Content) -> EffectRecord | None:
        """An effect with this content that did not happen at ``position``."""
        for key in self._at.get(position, ()):
            effect = self.effects[key]
            if effect.status in ("failed", "not_sent") and content_of(effect) == content:
                return effect
        return None

    def unreturned(self, scope: str, kind: str, content: Content, used: set[str]) -> EffectRecord | None:
        """The first effect of ``kind`` in ``scope`` (not nested deeper) with this content that
        happened or is in doubt, and that no emit call of this attempt has returned (``used``)."""
        for key in self._like.get(_slot(f"{scope}{escape(kind)}#0", content), ()):
            effect = self.effects[key]
            if effect.status in (*UNSETTLED, "confirmed") and key not in used and effect.kind == kind:
                return effect
        return None

    def new_key(self, store_id: str, run_id: str, position: str, kind: str) -> str:
        """The first derived key of ``position`` never issued: keys of effects that moved on to a
        later position (a not-sent effect sent again there) stay theirs."""
        index = len(self._at.get(position, ()))
        while (key := derive_idempotency_key(store_id, run_id, position, kind, index)) in self.effects:
            index += 1
        return key

    def put(self, effect: EffectRecord) -> EffectRecord | None:
        """Record ``effect`` (an intent, or a not-sent effect sent again, possibly at another
        position); returns what was recorded under its key before."""
        key = effect.idempotency_key
        previous = self.effects.get(key)
        if previous is not None:
            self._unindex(key, previous.position, content_of(previous))
        self.effects[key] = effect
        self._index(key, effect.position, content_of(effect))
        return previous

    def restore(self, effect: EffectRecord, previous: EffectRecord | None) -> None:
        """Undo :meth:`put` (its intent never became durable, so it never was)."""
        key = effect.idempotency_key
        self._unindex(key, effect.position, content_of(effect))
        if previous is None:
            del self.effects[key]
        else:
            self.effects[key] = previous
            self._index(key, previous.position, content_of(previous))

    def settle(self, key: str, status: Any, *, by: str, reference: Any = None, error: str | None = None) -> EffectRecord:
        self.effects[key] = self.effects[key].settled(status, by=by, reference=reference, error=error)
        return self.effects[key]
