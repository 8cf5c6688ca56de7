"""A reference to content that can be read again, recorded in place of the content itself."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Ref(BaseModel):
    """``s3ckpt.Ref(uri, version=None, sha256=None)``: a step result that names where its content
    lives (an S3 object version, a file, a document id) instead of carrying it. A step that
    returns one gets the same Ref back when it is replayed; reading the content is the caller's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    uri: str
    version: str | None = None
    sha256: str | None = None

    def __init__(self, uri: str, version: str | None = None, sha256: str | None = None, **extra: Any) -> None:
        super().__init__(uri=uri, version=version, sha256=sha256, **extra)
