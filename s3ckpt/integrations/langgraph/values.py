"""Values: how a channel value or a pending write is serialized, stored and read back.

A value is serialized with the saver's ``serde`` (LangGraph's JsonPlusSerializer, pickle fallback
off; a pickle is refused both ways). Up to ``inline_limit`` bytes it is stored in the record or
writes object that names it (``{"t": type, "b": base64}``); a larger one is an artifact of that
record or object, content-addressed and deduplicated by chunk (``{"t": type, "a": name}``).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.serde.base import SerializerProtocol

from ...errors import IntegrityError, InvalidArtifactError
from ...records import CommitRecord, Manifest
from ...store import Store, ValueUpload

#: Serialized values up to this size live in the record; larger ones are chunked artifacts.
DEFAULT_INLINE_LIMIT = 4096

#: Where a value is: {"t": its serde type, and "b": its bytes (base64) or "a": its artifact's name};
#: a channel's also holds "v", its version.
_Ref = dict[str, Any]


class ValueCodec:
    """The saver's serialization of values (a part of :class:`S3ckptSaver`). Reads ``serde`` and
    ``inline_limit`` at each call: LangGraph's ``with_allowlist`` clones a saver with another serde."""

    serde: SerializerProtocol
    store: Store
    inline_limit: int

    def _dump(self, value: Any) -> tuple[str, bytes]:
        type_, data = self.serde.dumps_typed(value)
        if type_ == "pickle":
            raise InvalidArtifactError(
                f"S3ckptSaver does not store pickles, and the serializer pickled a {type(value).__name__}; "
                "use JsonPlusSerializer(pickle_fallback=False) and values it can serialize"
            )
        return type_, data

    def _load(self, type_: str, data: bytes) -> Any:
        if type_ == "pickle":
            raise IntegrityError("S3ckptSaver never writes pickles, and found one: refusing to unpickle it")
        return self.serde.loads_typed((type_, data))

    def _dump_inline(self, value: Any) -> list[str]:
        type_, data = self._dump(value)
        return [type_, base64.b64encode(data).decode("ascii")]

    def _load_inline(self, typed: Any) -> Any:
        return self._load(typed[0], base64.b64decode(typed[1]))

    def _stash(
        self, upload: ValueUpload, artifacts: dict[str, Manifest], name: str, value: Any, previous: Manifest | None
    ) -> _Ref:
        type_, data = self._dump(value)
        if len(data) <= self.inline_limit:
            return {"t": type_, "b": base64.b64encode(data).decode("ascii")}
        artifacts[name] = upload.put(data, previous=previous)
        return {"t": type_, "a": name}

    def _value(self, where: str, artifacts: Mapping[str, Manifest], ref: _Ref) -> Any:
        if "b" in ref:
            return self._load(ref["t"], base64.b64decode(ref["b"]))
        manifest = artifacts.get(ref["a"])
        if manifest is None:
            raise IntegrityError(f"{where}: value {ref['a']!r} has no manifest")
        return self._load(ref["t"], self.store.read_value(manifest))

    @staticmethod
    def _record_value_where(record: CommitRecord) -> str:
        return f"run {record.run_id!r}@{record.seq}"
