"""The error hierarchy: one root, and each error also inherits the builtin that fits.

Every message says what is wrong and what to do about it. Errors carry the facts as attributes
so that callers can act on them without parsing text.
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from typing import Any

_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 80
_SHORT.maxlevel = 3


def describe(value: object) -> str:
    """A short repr of a caller's value for a message. Never raises and never runs long: a bad
    argument may be nested too deep for repr, an int too long to print, or an object whose
    ``__repr__`` fails, and the error about it must still be the error the caller sees."""
    try:
        return _SHORT.repr(value)
    except Exception:  # noqa: BLE001 - RecursionError, ValueError (int digits), whatever a __repr__ raises
        return f"<{type(value).__name__} object>"


#: What to do about damage, in every message that reports it.
DAMAGE_FIX = "restore it from a backup, or with S3 versioning from the object's earlier version"


class S3ckptError(Exception):
    """Root of every error s3ckpt raises on purpose."""


class ConfigurationError(S3ckptError, ValueError):
    """The store was opened with options that cannot work (bad URL, missing key, unknown option)."""


class MissingKeyError(ConfigurationError):
    """No encryption key was given; encryption is never off."""

    def __init__(self) -> None:
        super().__init__(
            "no encryption key: pass key=... to open_store, or set S3CKPT_KEY. "
            "Make a new key with `s3ckpt key new` or s3ckpt.generate_key(), and keep it somewhere safe: "
            "without it the checkpoints cannot be read."
        )


class StoreNotFoundError(ConfigurationError, FileNotFoundError):
    """There is no store at the URL: nothing was created there yet (``s3ckpt init`` creates one)."""


class BucketNotFoundError(StoreNotFoundError):
    """The S3 bucket of the URL does not exist (or these credentials cannot see it)."""

    def __init__(self, bucket: str) -> None:
        super().__init__(
            f"the S3 bucket {bucket!r} does not exist, or these credentials cannot see it; s3ckpt does not create "
            f"buckets. Create it first (`aws s3 mb s3://{bucket}`, or the terraform/ module), check the bucket "
            "name, the region and the endpoint, then run `s3ckpt init`."
        )
        self.bucket = bucket


class CredentialsError(ConfigurationError):
    """No usable cloud credentials: none found, incomplete, expired, or a profile that does not exist."""


class BackendError(S3ckptError, OSError):
    """The storage backend failed in a way that retrying did not fix."""


class EndpointUnreachableError(BackendError, ConnectionError):
    """The storage or key service could not be reached (connection refused, DNS, TLS, a proxy)."""


class LocalPathError(S3ckptError, OSError):
    """A local path given to s3ckpt cannot be used: a directory where a file is needed, a missing
    parent directory, no permission, a full disk."""

    def __init__(self, message: str, *, path: str) -> None:
        super().__init__(message)
        self.path = path

    def __str__(self) -> str:
        # OSError's __str__ would print the args tuple; keep the message readable.
        return str(self.args[0]) if self.args else ""


class AccessDeniedError(BackendError, PermissionError):
    """The storage or key service refused the caller's credentials (IAM, a bucket or key policy)."""


class ObjectNotFoundError(BackendError, FileNotFoundError):
    """An object the caller asked for does not exist."""

    def __init__(self, key: str) -> None:
        super().__init__(f"object not found: {key}")
        self.key = key


class PreconditionFailedError(BackendError):
    """A conditional write lost: the object exists (create) or changed (compare-and-swap).
    ``existing`` is the object that won a create, when the retry layer has already read it."""

    def __init__(self, key: str, *, existing: Any = None) -> None:
        super().__init__(f"precondition failed for {key}")
        self.key = key
        self.existing = existing


class TransientBackendError(BackendError):
    """A write may or may not have landed and is safe to retry (409 ConditionalRequestConflict, 5xx)."""


class UnsupportedBackendError(ConfigurationError):
    """The backend lacks a capability that the operation needs (for example an atomic create)."""


class ConflictError(S3ckptError):
    """A sequence number of the run was already taken by another writer."""

    def __init__(self, message: str, *, run_id: str, seq: int) -> None:
        super().__init__(message)
        self.run_id = run_id
        self.seq = seq


class FencedError(ConflictError):
    """A newer writer claimed the run; this writer may not commit any more."""

    def __init__(self, *, run_id: str, seq: int, epoch: int, newer_epoch: int) -> None:
        super().__init__(
            f"run {run_id!r}: writer with epoch {epoch} was fenced by a newer claim (epoch {newer_epoch}) "
            f"at seq {seq}; this process must stop writing. Claim the run again only if you are sure the "
            "other writer is gone.",
            run_id=run_id,
            seq=seq,
        )
        self.epoch = epoch
        self.newer_epoch = newer_epoch


class RunDeletedError(FencedError):
    """The run was deleted (``store.delete_run``, ``s3ckpt rm``): no writer may commit to it again."""

    def __init__(self, *, run_id: str, seq: int, epoch: int, newer_epoch: int) -> None:
        ConflictError.__init__(
            self,
            f"run {run_id!r} was deleted (its deletion is record {seq}); nothing more can be committed to it and "
            "this process must stop writing it. Start the work again under another run id.",
            run_id=run_id,
            seq=seq,
        )
        self.epoch = epoch
        self.newer_epoch = newer_epoch


class CommitDeadlineError(S3ckptError, TimeoutError):
    """A commit took longer than ``StoreOptions.commit_deadline``, so its record was not written: the
    collector may already treat the packs it uploaded as garbage. Nothing was committed; commit again."""


class IntegrityError(S3ckptError, ValueError):
    """Stored data does not match what was written: bad MAC or hash, broken chain, missing object."""

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key


class DecryptionError(IntegrityError):
    """The key does not open this store (wrong key), or a key file is damaged."""


class IncompatibleSchemaError(S3ckptError, ValueError):
    """A record or store from a newer or unknown format, or a version change with no migration."""

    def __init__(self, message: str, *, found: Any = None, supported: Any = None) -> None:
        super().__init__(message)
        self.found = found
        self.supported = supported


class UnknownOutcomeError(S3ckptError, RuntimeError):
    """Effects whose outcome is unknown and for which no reconciler was given."""

    def __init__(self, message: str, *, effects: Sequence[Any] = ()) -> None:
        super().__init__(message)
        self.effects = list(effects)


class EffectMismatchError(S3ckptError, ValueError):
    """The same idempotency key was used with a different payload."""


class StepRejectedError(S3ckptError, RuntimeError):
    """A step's acceptance check failed; the resume point did not advance."""


class BudgetExceededError(S3ckptError, RuntimeError):
    """A step or effect would start with a budget unit already spent up to its limit."""

    def __init__(self, message: str, *, unit: str, spent: float, limit: float) -> None:
        super().__init__(message)
        self.unit, self.spent, self.limit = unit, spent, limit


class EffectFailedError(S3ckptError, RuntimeError):
    """Raised by an effect's ``send`` to say the provider did not act (it refused, or the request
    never left): the effect is recorded as failed, so it may be sent again. Any other exception
    from ``send`` leaves the outcome unknown."""


class RunNotFoundError(S3ckptError, KeyError):
    """The run, or the sequence number asked for, does not exist."""

    def __str__(self) -> str:
        # KeyError's __str__ adds quotes around the message; keep the message readable.
        return str(self.args[0]) if self.args else ""


class InvalidRunIdError(S3ckptError, ValueError):
    """A run id that cannot be stored (empty, or not a string)."""


class InvalidArtifactError(S3ckptError, ValueError):
    """An artifact or state value that cannot be checkpointed. ``path`` is set when the artifact was
    given as a path (missing, a directory, unreadable)."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class InvalidArgumentError(S3ckptError, ValueError):
    """An argument that cannot work: the wrong type, or out of range (a seq of 1.5, a budget of -1)."""


class EffectSettledError(S3ckptError, ValueError):
    """An effect's outcome is already known, so it cannot be settled again without ``force``."""


class StepMismatchError(S3ckptError, RuntimeError):
    """A step was called again, after an attempt at it failed, with other arguments: a retry must
    pass the same ones, and another piece of work needs its own step name."""
