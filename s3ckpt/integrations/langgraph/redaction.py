"""Redaction of what the saver stores that is not a channel value (docs/langgraph.md, "Redaction").

Checkpoint metadata and task paths go through the store's redactor; names LangGraph reads back
(channel and node names, task and checkpoint ids, its own metadata keys) are checked and refused
when the redactor finds a secret in them, since a redacted name would no longer name what it names.
"""

from __future__ import annotations

import builtins
import secrets
from collections.abc import Iterable, Mapping
from typing import Any, cast

from ...errors import InvalidArgumentError
from ...redaction import MAX_DEPTH, Redactor
from ...store import Store

#: Metadata LangGraph writes and reads back by name (its loop resumes from them): checked as names
#: are, never changed (docs/langgraph.md, "Redaction").
_LANGGRAPH_METADATA = frozenset({"source", "step", "parents", "counters_since_delta_snapshot"})
#: Names a saver remembers as checked (a graph repeats its channel and node names every step).
_MAX_CLEAN_NAMES = 4096


def _recorded_run_id(store: Store, run_id: str) -> str:
    """A metadata ``run_id`` as stored: redacted, and, when redaction changed it, followed by a
    keyed digest of itself (as s3ckpt records names), so ``delete_for_runs`` still finds it."""
    recorded = store.options.redactor.redact_text(run_id)
    return recorded if recorded == run_id else f"{recorded}~{store.name_digest(run_id)}"


def _redact_any(redactor: Redactor, value: Any) -> Any:
    """``redactor.redact`` of a value that may hold objects JSON has no type for (a datetime, a
    set, a model: metadata is serialized by LangGraph's serde). Each such object is scanned by its
    repr: kept when that holds no secret, else replaced by the redacted repr; under a secret-named
    key it is hidden like any scalar."""
    token = secrets.token_hex(8)
    objects: builtins.list[Any] = []

    def stand_in(obj: Any) -> str:
        objects.append(obj)
        return f"\x00s3ckpt-object-{token}-{len(objects) - 1}\x00"

    def shadow(v: Any, depth: int) -> Any:
        if v is None or isinstance(v, str | int | float):
            return v
        if depth >= MAX_DEPTH:
            raise InvalidArgumentError(f"cannot redact checkpoint metadata nested more than {MAX_DEPTH} levels deep")
        if isinstance(v, dict):
            return {
                (k if k is None or isinstance(k, str | int | float) else stand_in(k)): shadow(x, depth + 1)
                for k, x in v.items()
            }
        if isinstance(v, list):
            return [shadow(x, depth + 1) for x in v]
        if isinstance(v, tuple) and type(v) is tuple:
            return tuple(shadow(x, depth + 1) for x in v)
        return stand_in(v)

    def back(v: Any) -> Any:
        if isinstance(v, str):
            if v.startswith("\x00s3ckpt-object-") and v.endswith("\x00"):
                _, _, tail = v[:-1].rpartition("-")
                if v == f"\x00s3ckpt-object-{token}-{tail}\x00":
                    obj = objects[int(tail)]
                    text = repr(obj)
                    redacted = redactor.redact_text(text)
                    return obj if redacted == text else redacted
            return v
        if isinstance(v, dict):
            return {back(k): back(x) for k, x in v.items()}
        if isinstance(v, list):
            return [back(x) for x in v]
        if isinstance(v, tuple):
            return tuple(back(x) for x in v)
        return v

    return back(redactor.redact(shadow(value, 0)))


class NameChecks:
    """The saver's checks of names and its redaction of metadata (a part of :class:`S3ckptSaver`)."""

    store: Store
    #: names checked against the store's redactor and found clean
    _clean_names: dict[str, None]

    def _check_name(self, text: str, what: str, *, remember: bool = True) -> None:
        """Refuse a name LangGraph reads back by name (a channel, a node, a task or checkpoint id)
        in which the store's redactor finds a secret: stored redacted, it would no longer name what
        it names; stored as it is, the secret would be in the store."""
        if text in self._clean_names:
            return
        redactor = self.store.options.redactor
        if redactor.redact_text(text) != text:
            kinds = ", ".join(sorted(set(redactor.found(text))))
            raise InvalidArgumentError(
                f"the LangGraph {what} {redactor.redact_text(text)!r} holds what the store's redactor takes for "
                f"a secret ({kinds}). S3ckptSaver stores such names as they are, because LangGraph finds channels, "
                "nodes, tasks and checkpoints by them, so it does not store this one: rename it, or, if it is no "
                "secret, allow it in the store's redactor (open_store(..., redactor=s3ckpt.Redactor(allow=[...])))."
            )
        if remember and len(self._clean_names) < _MAX_CLEAN_NAMES:
            self._clean_names[text] = None

    def _check_names(self, value: Any, what: str, depth: int = 0) -> None:
        """``_check_name`` for every string of a structure (dict keys too); other values are not text."""
        if isinstance(value, str):
            self._check_name(value, what, remember=False)
        elif depth >= MAX_DEPTH:
            raise InvalidArgumentError(f"cannot check a LangGraph {what} nested more than {MAX_DEPTH} levels deep")
        elif isinstance(value, dict):
            for k, v in value.items():
                if isinstance(k, str):
                    self._check_name(k, what)
                self._check_names(v, what, depth + 1)
        elif isinstance(value, list | tuple):
            for v in value:
                self._check_names(v, what, depth + 1)

    def _redact_metadata(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """Checkpoint metadata as stored: LangGraph's own keys checked as names, ``run_id`` in its
        recorded form, everything else (the strings LangGraph copies from ``configurable`` and the
        config's ``metadata``, a caller's own) through the store's redactor."""
        own = {k: v for k, v in metadata.items() if k in _LANGGRAPH_METADATA}
        self._check_names(own, "checkpoint metadata")
        rest = {k: v for k, v in metadata.items() if k not in _LANGGRAPH_METADATA}
        run_id = rest.pop("run_id", None)
        out = cast(dict[str, Any], _redact_any(self.store.options.redactor, rest))
        if isinstance(run_id, str):
            out["run_id"] = _recorded_run_id(self.store, run_id)
        elif run_id is not None:
            out["run_id"] = _redact_any(self.store.options.redactor, {"run_id": run_id})["run_id"]
        return {**own, **out}

    def _run_id_forms(self, wanted: Iterable[str]) -> set[str]:
        """What a metadata ``run_id`` of one of ``wanted`` may be stored as: its recorded form, or
        the raw id (written before run ids were redacted)."""
        return {form for w in map(str, wanted) for form in (w, _recorded_run_id(self.store, w))}

    @staticmethod
    def _is_run(stored: Any, forms: set[str]) -> bool:
        return isinstance(stored, str) and stored in forms
