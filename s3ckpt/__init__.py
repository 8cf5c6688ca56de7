"""s3ckpt: durable, encrypted, content-addressed checkpoints for work that dies and resumes elsewhere.

key = s3ckpt.generate_key()
store = s3ckpt.open_store("s3://bucket/prefix", key=key)
writer = store.run("order-42").claim()
writer.commit({"step": 3}, artifacts={"model.bin": "/tmp/model.bin"})
store.run("order-42").latest().state  # {"step": 3}
"""

from .checkpoint import ArtifactNotFoundError, Checkpoint
from .crypto import generate_key
from .errors import (
    AccessDeniedError,
    BackendError,
    BucketNotFoundError,
    BudgetExceededError,
    CommitDeadlineError,
    ConfigurationError,
    ConflictError,
    CredentialsError,
    DecryptionError,
    EffectFailedError,
    EffectMismatchError,
    EffectSettledError,
    EndpointUnreachableError,
    FencedError,
    IncompatibleSchemaError,
    IntegrityError,
    InvalidArgumentError,
    InvalidArtifactError,
    InvalidRunIdError,
    LocalPathError,
    MissingKeyError,
    RunDeletedError,
    RunNotFoundError,
    S3ckptError,
    StepMismatchError,
    StepRejectedError,
    StoreNotFoundError,
    UnknownOutcomeError,
    UnsupportedBackendError,
)
from .log import Run
from .records import AttemptRecord, ChunkRef, EffectRecord, Ledger, Manifest, StepRecord
from .redaction import DEFAULT_REDACTOR, NO_REDACTION, Redactor, SecretPattern
from .ref import Ref
from .session import Session
from .store import Store, StoreOptions, open_store
from .writer import Writer

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_REDACTOR",
    "NO_REDACTION",
    "AccessDeniedError",
    "ArtifactNotFoundError",
    "AttemptRecord",
    "BackendError",
    "BucketNotFoundError",
    "BudgetExceededError",
    "Checkpoint",
    "ChunkRef",
    "CommitDeadlineError",
    "ConfigurationError",
    "ConflictError",
    "CredentialsError",
    "DecryptionError",
    "EffectFailedError",
    "EffectMismatchError",
    "EffectRecord",
    "EffectSettledError",
    "EndpointUnreachableError",
    "FencedError",
    "IncompatibleSchemaError",
    "IntegrityError",
    "InvalidArgumentError",
    "InvalidArtifactError",
    "InvalidRunIdError",
    "Ledger",
    "LocalPathError",
    "Manifest",
    "MissingKeyError",
    "Redactor",
    "Ref",
    "Run",
    "RunDeletedError",
    "RunNotFoundError",
    "S3ckptError",
    "SecretPattern",
    "Session",
    "StepMismatchError",
    "StepRecord",
    "StepRejectedError",
    "Store",
    "StoreNotFoundError",
    "StoreOptions",
    "UnknownOutcomeError",
    "UnsupportedBackendError",
    "Writer",
    "__version__",
    "generate_key",
    "open_store",
]
