"""Public helpers for object names, for integrations that keep objects beside a run's log.

``encode_segment`` is the injective escape s3ckpt uses for run ids in object keys: any non-empty
string becomes one path segment that cannot escape its prefix (docs/FORMAT.md, "Object layout").
``parse_seq`` reads the seq back from a log object's name.
"""

from __future__ import annotations

from ._names import encode_run_id, parse_seq

__all__ = ["encode_segment", "parse_seq"]


def encode_segment(text: str) -> str:
    """The single path segment that stands for ``text`` (a non-empty string) in object keys:
    readable where it can be, injective, never ``.`` or ``..``; very long text ends in a digest.
    The same escape as run ids (InvalidRunIdError for an empty or non-text ``text``)."""
    return encode_run_id(text)
