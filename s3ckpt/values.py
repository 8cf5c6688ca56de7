"""What a record can hold: JSON values within limits that every reader accepts.

Records are immutable, so a value that commits but cannot be read back bricks a run for good. Every
value a caller hands to s3ckpt (state, meta, provenance, step results, effect targets, references,
stored payloads) goes through :func:`json_value` before anything is written: it is checked against
the limits below and copied into plain JSON (dicts with str keys, lists, str, int, float, bool,
None), or refused with InvalidArtifactError naming where in the value the problem is. The limits are
the readers' own, with headroom: pydantic's JSON parser stops at 200 levels of nesting, and a record
nests a caller's value at most six levels deep (record, ledger, steps, step, result, ...).
"""

from __future__ import annotations

import math
from typing import Any, Final

import pydantic

from .errors import InvalidArgumentError, InvalidArtifactError, describe

#: Containers nested in one value (a list in a dict is two levels).
MAX_DEPTH: Final = 100
#: The UTF-8 size of one string.
MAX_STRING_BYTES: Final = 64 << 20
#: Decimal digits of one integer (CPython refuses to print longer ones by default).
MAX_INT_DIGITS: Final = 4000
#: Names that become part of positions and keys: step names, effect kinds, budget units,
#: artifact names, idempotency keys.
MAX_NAME_CHARS: Final = 1024
#: Artifacts in one checkpoint.
MAX_ARTIFACTS: Final = 10_000
#: The JSON of one record as stored (before compression), and what a reader decompresses at most.
MAX_RECORD_BYTES: Final = 256 << 20

_SCALARS = (str, int, float, bool, type(None))


#: Where a value sits in the caller's value, as a linked list from the leaf: (parent path, key).
Path = tuple[Any, str | int] | None


def _where(path: Path, what: str) -> str:
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    shown = [f"[{p!r:.40}]" for p in reversed(keys)]
    if len(shown) > 12:
        shown = [*shown[:6], f"...({len(shown) - 10} more)...", *shown[-4:]]
    return what + "".join(shown)


def _refuse(message: str) -> InvalidArtifactError:
    return InvalidArtifactError(
        f"{message}, so it is not JSON-compatible. A checkpoint holds JSON values: dicts with str keys, lists, "
        f"str, int, finite float, bool and None (pydantic models are stored as their JSON), nested at most {MAX_DEPTH} deep; "
        "put binary data in artifacts="
    )


def _string(text: str, path: Path, what: str) -> str:
    # The plain str underneath, whatever a subclass's methods say (str.__str__ and str.encode, not
    # text.encode: a subclass may override them).
    plain = str.__str__(text) if type(text) is not str else text
    if len(plain) > MAX_STRING_BYTES // 4:  # cheap bound first: a code point is at most 4 bytes
        size = len(str.encode(plain, "utf-8", "surrogatepass"))
        if size > MAX_STRING_BYTES:
            raise _refuse(f"{_where(path, what)} is a string of {size} bytes, over the limit of {MAX_STRING_BYTES}")
    try:
        str.encode(plain, "utf-8")
    except UnicodeEncodeError as exc:
        raise _refuse(f"{_where(path, what)} is not valid Unicode text (a lone surrogate at {exc.start})") from None
    return plain


def _scalar(value: Any, path: Path, what: str) -> Any:
    if value is None or value is True or value is False:
        return value
    if isinstance(value, str):
        return _string(value, path, what)
    if isinstance(value, bool):  # a bool subclass is still a bool
        return bool(value)
    if isinstance(value, int):
        number = int.__int__(value)  # the value itself, not what a subclass's __int__ claims
        # Bits first: str() of a huge int is slow, and CPython refuses it past 4300 digits.
        if number.bit_length() > MAX_INT_DIGITS * 3.33 or len(str(abs(number))) > MAX_INT_DIGITS:
            raise _refuse(f"{_where(path, what)} is an integer of more than {MAX_INT_DIGITS} digits")
        return number
    real = float.__float__(value) if isinstance(value, float) else float(value)
    if real != real or real in (float("inf"), float("-inf")):
        raise _refuse(f"{_where(path, what)} is {real}, which JSON cannot carry")
    return real


def json_value(value: Any, what: str) -> Any:
    """``value`` as plain JSON (tuples become lists, models their JSON), or InvalidArtifactError
    saying where it breaks a limit. Nothing is recursive, so no value can exhaust the stack."""
    root: list[Any] = [None]
    # (value, container to put the copy in, slot in that container, path, depth)
    stack: list[tuple[Any, Any, Any, Path, int]] = [(value, root, 0, None, 0)]
    while stack:
        item, parent, slot, path, depth = stack.pop()
        if isinstance(item, pydantic.BaseModel):
            try:
                item = item.model_dump(mode="json")
            except Exception as exc:  # noqa: BLE001 - a model's own serializers may raise anything
                raise _refuse(f"{_where(path, what)} is a {type(item).__name__} whose dump fails ({describe(exc)})") from None
        if isinstance(item, _SCALARS):
            parent[slot] = _scalar(item, path, what)
            continue
        if isinstance(item, dict):
            if depth >= MAX_DEPTH:
                raise _refuse(f"{_where(path, what)} is nested more than {MAX_DEPTH} levels deep")
            copy: dict[str, Any] = {}
            parent[slot] = copy
            for key, child in item.items():
                if not isinstance(key, str):
                    raise _refuse(
                        f"{_where(path, what)} has the key {describe(key)} of type {type(key).__name__}; JSON keys are "
                        "strings, so it would come back as a different key"
                    )
                key = _string(key, path, what)
                if key in copy:  # two keys that a subclass's __eq__/__hash__ told apart, or the reverse
                    raise _refuse(f"{_where(path, what)} has the key {describe(key)} twice")
                copy[key] = None
                stack.append((child, copy, key, (path, key), depth + 1))
            continue
        if isinstance(item, list | tuple):
            if depth >= MAX_DEPTH:
                raise _refuse(f"{_where(path, what)} is nested more than {MAX_DEPTH} levels deep")
            items: list[Any] = [None] * len(item)
            parent[slot] = items
            stack.extend((child, items, i, (path, i), depth + 1) for i, child in enumerate(item))
            continue
        raise _refuse(f"{_where(path, what)} is a {type(item).__name__}")
    return root[0]


def json_object(value: Any, what: str) -> dict[str, Any]:
    """Like :func:`json_value`, for values that must be a JSON object (meta, provenance)."""
    if value is None:
        return {}
    if isinstance(value, pydantic.BaseModel):
        value = json_value(value, what)
    if not isinstance(value, dict):
        raise InvalidArtifactError(f"{what} must be a dict with str keys, not {type(value).__name__}")
    out: dict[str, Any] = json_value(value, what)
    return out


def name(value: Any, what: str) -> str:
    """A name that becomes part of a position or key: a non-empty str of at most MAX_NAME_CHARS."""
    if not isinstance(value, str) or not value:
        raise InvalidArtifactError(f"{what} must be a non-empty str, not {describe(value)}")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidArtifactError(f"{what} is {len(value)} characters long; the limit is {MAX_NAME_CHARS}")
    return _string(value, None, what)


def version(value: Any, what: str) -> str:
    """A workflow name or version as recorded: a name, or an int taken as its decimal text."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**18:
        return str(value)
    return name(value, what)


def error_text(exc: BaseException, *, limit: int = 4096) -> str:
    """What an exception says, for a record: always valid text (lone surrogates escaped), bounded,
    and never an exception of its own (a ``__str__`` that raises is described instead)."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # noqa: BLE001 - whatever the caller's __str__ raises
        text = f"{type(exc).__name__}: {describe(exc)}"
    text = str.encode(text, "utf-8", "backslashreplace").decode("utf-8")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def amount(value: Any, what: str) -> int | float:
    """A budget amount: a finite int or float that JSON (and every reader) carries."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(f"{what} takes a number, not {describe(value)}")
    try:
        finite = math.isfinite(float(value))
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite:
        raise InvalidArgumentError(f"{what} takes a finite number no larger than a float, not {describe(value)}")
    return int(value) if isinstance(value, int) else float(value)


def flag(value: Any, what: str) -> bool:
    """A True/False option (not a truthy value: ``dry_run="no"`` must not mean yes)."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{what} is True or False, not {describe(value)}")
    return value


def callback(value: Any, what: str) -> Any:
    """None, or a callable (a progress callback)."""
    if value is not None and not callable(value):
        raise InvalidArgumentError(f"{what} is a callable or None, not {describe(value)}")
    return value
