"""Opening a store: find or create its config, unwrap the master key, hand out runs."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic
import pydantic_core

from . import codec, collector, retention, values
from ._names import RunNames, parse_seq
from .backends import Backend, Match, PutMode, open_backend
from .backends._retry import RetryingBackend
from .blobs import DEFAULT_CHUNKER, BlobStore, Upload
from .crypto import Cipher
from .errors import (
    BackendError,
    ConfigurationError,
    DecryptionError,
    IncompatibleSchemaError,
    IntegrityError,
    InvalidArgumentError,
    ObjectNotFoundError,
    PreconditionFailedError,
    StoreNotFoundError,
    UnsupportedBackendError,
    describe,
)
from .keyring import PassphraseKey, UserKey, matches, parse_key, unwrap_master_key, wrap_master_key
from .log import Run, SeenTails
from .records import (
    FORMAT_VERSION,
    KEYED_NAMES_FORMAT_VERSION,
    KEYFILE_VERSION,
    NEWEST_FORMAT_VERSION,
    RECORD_SCHEMA_VERSION,
    ChunkerParams,
    ChunkRef,
    KeyFile,
    Manifest,
    StoreConfig,
)
from .redaction import DEFAULT_REDACTOR, Redactor
from .references import DEFAULT_COMMIT_DEADLINE
from .verify import Progress, VerifyReport, verify_store
from .workflows import OnVersionChange, StateMigration, WorkflowMigrations

if TYPE_CHECKING:
    from .session import Reconciler, Session

log = logging.getLogger("s3ckpt")

_R = TypeVar("_R")

#: Where a key removal marks the key it removes while it checks that others remain.
KEY_REMOVALS = "key-removals/"


@dataclass(frozen=True)
class StoreOptions:
    """Tuning knobs, each with a default that suits both S3 and a local disk."""

    #: Threads for chunk uploads and downloads (and at most 2x this many chunks in memory).
    concurrency: int = 8
    #: States whose JSON is larger than this are stored as chunks instead of inside the record.
    inline_limit: int = 64 << 10
    #: Attempts at one log create when the backend reports a transient failure.
    commit_attempts: int = 8
    #: Applied to every string of a state, meta and ledger before it is encrypted.
    redactor: Redactor = DEFAULT_REDACTOR
    #: Seconds a commit may take from its start to its record's create. Later, the record is not
    #: written (CommitDeadlineError): ``store.gc`` deletes unreferenced packs older than its grace,
    #: which must be at least twice the store's (its config fixes it when the store is created; a
    #: process may keep a shorter one). docs/operations.md, "The collector".
    commit_deadline: float = DEFAULT_COMMIT_DEADLINE


_BACKEND_OPTIONS = (
    "endpoint_url", "region", "credentials", "retry_mode", "max_attempts",
    "max_pool_connections", "storage_options", "fsync",
)  # fmt: skip


class Store:
    """A checkpoint store: one config, one master key, many runs."""

    def __init__(
        self,
        backend: Backend,
        config: StoreConfig,
        master_key: bytes,
        *,
        options: StoreOptions,
        kms_client: Callable[[], Any] | None = None,
    ) -> None:
        self.backend = backend
        self.config = config
        self.options = options
        self.cipher = Cipher(master_key, config.store_id)
        #: How run ids become object names: readable, or keyed digests (``private_run_ids``)
        self.names = RunNames(self.cipher.run_name_key if config.run_names == "keyed" else None)
        self._master_key = master_key
        self._kms_client = kms_client
        self.pool = ThreadPoolExecutor(max_workers=options.concurrency, thread_name_prefix="s3ckpt")
        self.blobs = BlobStore(backend, self.cipher, config.chunker, self.pool, max_inflight=2 * options.concurrency)
        self.migrations = WorkflowMigrations()
        #: The newest record of each run this object has seen: a log never goes backwards.
        self.seen = SeenTails()

    def __repr__(self) -> str:
        return f"Store({self.backend.url!r}, id={self.config.store_id})"

    def register_migration(self, workflow: str, from_version: str, to_version: str, fn: StateMigration) -> None:
        """Teach the store to bring a run's state from one workflow version to the next:
        ``fn(state) -> state``. Versions chain (1 -> 2 -> 3); resume applies them in order."""
        self.migrations.register(workflow, from_version, to_version, fn)

    def resume(
        self,
        run_id: str,
        *,
        workflow: str,
        workflow_version: str,
        provenance: Mapping[str, Any] | None = None,
        reconcile: Mapping[str, Reconciler] | None = None,
        on_version_change: OnVersionChange = "migrate",
        budget: Mapping[str, float] | None = None,
    ) -> Session:
        """Claim ``run_id`` and resume it as a Session (a context manager that commits on a clean
        exit). Effects with an intent and no outcome go to ``reconcile[kind](effect)``; one with no
        reconciler raises UnknownOutcomeError. ``budget`` ({"usd": 5}) stops a step or effect that
        would start over it with BudgetExceededError. ``on_version_change``: "migrate" the state
        through registered migrations, "invalidate" the completed steps (effects are kept), or
        "accept" the checkpoint as it is."""
        from .resume import open_session  # sessions are optional: import on first use

        return open_session(
            self.run(run_id),
            workflow=workflow,
            workflow_version=workflow_version,
            provenance=provenance,
            reconcile=reconcile,
            on_version_change=on_version_change,
            budget=budget,
        )

    def run(self, run_id: str) -> Run:
        """A handle on one run's log; any non-empty string is a valid run id."""
        return Run(self, run_id)

    def runs(self) -> Iterator[str]:
        """Every run id in the store (in the order of their encoded names)."""
        for segment in self.backend.list_dirs("runs/"):
            run_id = self.names.decode(segment)
            if run_id is None:
                run_id = self._run_id_from_records(segment)
            if run_id is not None:
                yield run_id

    def _run_id_from_records(self, segment: str) -> str | None:
        # A hashed or keyed name cannot be decoded: the run id lives, authenticated, in each record.
        prefix = f"runs/{segment}/log/"
        for info in self.backend.list(prefix):
            seq = parse_seq(info.key[len(prefix) :])
            if seq is None:
                continue
            sealed = self.backend.get(info.key).data
            run_id = codec.peek_run_id(self.cipher, sealed, segment=segment, seq=seq, key=info.key)
            if self.names.segment(run_id) != segment:
                raise IntegrityError(f"{info.key} holds a record of another run", key=info.key)
            return run_id
        return None

    # -- format ------------------------------------------------------------------------------

    def migrate(self, *, dry_run: bool = False) -> list[str]:
        """Upgrade the store's format where that is safe, and say what changed (or would).

        Only the config is rewritten: log records are immutable (their hash chain depends on their
        bytes), so records of an older schema stay as written and are migrated in memory on read.
        """
        changes: list[str] = []
        schemas: dict[int, int] = {}
        for segment in self.backend.list_dirs("runs/"):
            prefix = f"runs/{segment}/log/"
            for info in self.backend.list(prefix):
                seq = parse_seq(info.key[len(prefix) :])
                if seq is None:
                    continue
                sealed = self.backend.get(info.key).data
                version = codec.record_schema_version(self.cipher, sealed, segment=segment, seq=seq, key=info.key)
                if version is not None:
                    schemas[version] = schemas.get(version, 0) + 1
        for version, count in sorted(schemas.items()):
            if version < RECORD_SCHEMA_VERSION:
                changes.append(
                    f"{count} record(s) of schema {version} stay as written (immutable, hash-chained) and are "
                    f"migrated to schema {RECORD_SCHEMA_VERSION} in memory on every read"
                )
        if self.config.version < FORMAT_VERSION:
            changes.append(
                f"config: format {self.config.version} -> {FORMAT_VERSION}; clients older than this one will "
                "refuse the store from then on"
            )
            if not dry_run:
                draft = self.config.model_copy(update={"version": FORMAT_VERSION, "key_check": ""})
                upgraded = draft.model_copy(update={"key_check": self.cipher.key_check(_config_check_message(draft))})
                current = self.backend.get("config")
                cas = self.backend.capabilities.compare_and_swap and current.etag
                mode: PutMode = Match(current.etag) if cas and current.etag else "overwrite"
                self.backend.put("config", upgraded.document(), mode=mode)
                self.config = upgraded
        return changes

    # -- keys --------------------------------------------------------------------------------

    # -- lifecycle (docs/operations.md) -------------------------------------------------------

    def verify(self, run_id: str | None = None, *, read_data: bool = False, progress: Progress | None = None) -> VerifyReport:
        """Check that every record decodes, chains and names data that is stored; with ``read_data``,
        read every chunk and check it against its id. ``.ok`` is False when anything committed is
        lost or unreadable; orphaned packs and unknown effects are listed apart."""
        if run_id is not None:
            self.run(run_id)  # a valid run id, or InvalidRunIdError
        return verify_store(
            self, run_id, read_data=values.flag(read_data, "read_data"), progress=values.callback(progress, "progress")
        )

    def delete_run(self, run_id: str) -> int:
        """Delete a run for good (see ``Run.delete``): its writers are fenced (RunDeletedError), its
        records become tombstones and its data garbage for ``gc``. Returns the deletion's seq."""
        return self.run(run_id).delete()

    def prune(
        self,
        *,
        keep_last: int | None = None,
        keep_within: timedelta | None = None,
        run_ids: Iterable[str] | None = None,
        dry_run: bool = False,
    ) -> retention.PruneReport:
        """Remove old checkpoints: keep the last ``keep_last`` and those younger than ``keep_within``
        of each run, and always its latest checkpoint and what a kept record names. A removed record
        becomes a tombstone, so no fenced writer can re-create its key; its data becomes garbage."""
        if run_ids is not None:
            if isinstance(run_ids, str | bytes) or not isinstance(run_ids, Iterable):
                raise InvalidArgumentError(f"run_ids is a list of run ids or None, not {describe(run_ids)}")
            run_ids = [self.run(run_id).run_id for run_id in run_ids]
        return retention.prune(
            self, keep_last=keep_last, keep_within=keep_within, run_ids=run_ids, dry_run=values.flag(dry_run, "dry_run")
        )

    def gc(
        self, *, grace: timedelta = timedelta(hours=1), dry_run: bool = False, progress: Progress | None = None
    ) -> collector.GcReport:
        """Delete packs that no record needs and whose storage-clock age exceeds ``grace`` (which
        must be at least twice the store's ``commit_deadline``). Never a pack a committed record needs, even
        against writers committing while it runs."""
        return collector.collect(
            self, grace=grace, dry_run=values.flag(dry_run, "dry_run"), progress=values.callback(progress, "progress")
        )

    def stats(self) -> collector.StoreStats:
        """Runs, records, packs, and stored, live and garbage bytes."""
        return collector.stats(self)

    def add_key(self, key: str | bytes, *, label: str = "") -> str:
        """Wrap the master key under another user key; returns the new key file's id."""
        label = values.name(label, "a key label") if label != "" else ""
        user_key = parse_key(key)
        passphrases = sum(k.kind == "passphrase" for k in self.key_files())
        if isinstance(user_key, PassphraseKey) and passphrases >= _MAX_PASSPHRASE_FILES:
            raise ConfigurationError(
                f"the store already has {_MAX_PASSPHRASE_FILES} passphrase keys, as many as an open tries; remove one "
                "(`s3ckpt key remove ID`) or add a raw or kms: key instead"
            )
        keyfile = wrap_master_key(
            self._master_key, user_key, store_id=self.config.store_id, kms_client=self._kms_client, label=label
        )
        self.backend.put(f"keys/{keyfile.key_id}", keyfile.model_dump_json().encode(), mode="create")
        return keyfile.key_id

    def key_files(self) -> list[KeyFile]:
        return _load_keyfiles(self.backend, self.config.store_id)

    def remove_key(self, key_id: str) -> None:
        """Remove a key file; never the last one, however many removals run at once.

        A removal marks its key (``key-removals/<id>/<random>``) before it looks at the others, and
        counts only key files that no removal has marked. Of two removals racing for the last two keys, the one
        that looks second sees the other's mark (or its key file already gone) and refuses; storage
        that is read-after-write consistent (S3, a local directory) is all this needs. An interrupted
        removal leaves its mark: that key still opens the store, but no longer counts for other
        removals until `s3ckpt key remove <id>` is run again to finish it."""
        if not isinstance(key_id, str) or not re.fullmatch(r"[0-9a-f]{16}", key_id):
            raise ConfigurationError(f"a key id is 16 hex digits (`s3ckpt key list` shows them), not {describe(key_id)}")
        if key_id not in {k.key_id for k in self.key_files()}:
            raise ConfigurationError(f"no key file {key_id!r} in this store; `s3ckpt key list` shows them")
        # One mark per removal, so that one removal never takes away another's (two removals of the
        # same key, a retried command, ...). Deleting it while it is absent proves the credentials may
        # delete before anything is written: a worker role is refused here, leaving nothing behind.
        mark = f"{KEY_REMOVALS}{key_id}/{secrets.token_hex(8)}"
        self.backend.delete(mark)
        self.backend.put(mark, b"{}")
        try:
            being_removed = {info.key[len(KEY_REMOVALS) :].split("/", 1)[0] for info in self.backend.list(KEY_REMOVALS)}
            others = [k.key_id for k in self.key_files() if k.key_id != key_id and k.key_id not in being_removed]
            if not others:
                busy = sorted(being_removed - {key_id})
                raise ConfigurationError(
                    "refusing to remove the last key: the store could never be opened again. Add another key first "
                    "(`s3ckpt key add`)"
                    + (f"; keys {', '.join(busy)} are being removed (or a removal of them was interrupted)" if busy else "")
                )
            self.backend.delete(f"keys/{key_id}")
        finally:
            self.backend.delete(mark)

    # -- for integrations (the LangGraph saver) ----------------------------------------------
    # Values carried by reference (content-addressed chunks a record names in its ``artifacts``),
    # the keyed digest s3ckpt records names with, and the store's thread pool.

    def upload(self, reuse: Iterable[Manifest] | Mapping[str, ChunkRef] = ()) -> ValueUpload:
        """Start storing values as chunks, for a record (``Run.append(artifacts=...)``) or a
        document to name: ``with store.upload(reuse) as up: manifest = up.put(data)``. The chunks
        of ``reuse`` (manifests, or chunk id -> stored chunk) are named again, not uploaded again.
        Leaving the block uploads what is left; an error in it aborts (the packs written become
        garbage for ``store.gc``). Take ``started = time.monotonic()`` before choosing ``reuse``:
        the record naming these chunks is held to ``commit_deadline`` from then."""
        known: dict[str, ChunkRef] = {}
        if isinstance(reuse, Mapping):
            for chunk_id, ref in reuse.items():
                if not isinstance(ref, ChunkRef) or chunk_id != ref.id:
                    raise InvalidArgumentError(f"reuse maps chunk ids to their ChunkRef, not {describe(ref)}")
                known[chunk_id] = ref
        elif isinstance(reuse, Iterable) and not isinstance(reuse, str | bytes | bytearray | memoryview):
            for manifest in reuse:
                if not isinstance(manifest, Manifest):
                    raise InvalidArgumentError(f"reuse holds Manifests, not {describe(manifest)}")
                known.update((c.id, c) for c in manifest.chunks)
        else:
            raise InvalidArgumentError(f"reuse is Manifests or a chunk id -> ChunkRef mapping, not {describe(reuse)}")
        return ValueUpload(self.blobs.begin(known))

    def read_value(self, manifest: Manifest) -> bytes:
        """The bytes a manifest (from ``store.upload``, or a record's artifacts) names, every
        chunk verified."""
        if not isinstance(manifest, Manifest):
            raise InvalidArgumentError(f"read_value takes a Manifest, not {describe(manifest)}")
        return self.blobs.read_all(manifest)

    def name_digest(self, name: str) -> str:
        """A short keyed digest of a name (as s3ckpt records a name that redaction changed): two
        names that redact alike stay apart, and nobody without the key can test a guess."""
        if not isinstance(name, str):
            raise InvalidArgumentError(f"name_digest takes a str, not {describe(name)}")
        try:
            return self.cipher.name_digest(name)
        except UnicodeEncodeError as exc:
            raise InvalidArgumentError(f"{name!r} is not valid Unicode text: {exc}") from None

    def submit(self, fn: Callable[..., _R], *args: Any) -> Future[_R]:
        """Run ``fn(*args)`` on the store's thread pool (which also moves chunks)."""
        if not callable(fn):
            raise InvalidArgumentError(f"submit takes a callable, not {describe(fn)}")
        return self.pool.submit(fn, *args)

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.backend.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ValueUpload:
    """Values being stored as chunks (``Store.upload``): a context manager. ``put`` returns the
    manifest of each value as soon as it is cut; the chunks are stored when the block ends."""

    def __init__(self, upload: Upload) -> None:
        self._upload = upload
        self._done = False

    def put(self, data: bytes | bytearray | memoryview, *, previous: Manifest | None = None) -> Manifest:
        """Store ``data``; ``previous`` (the same value as stored before) guides the cut, so an
        edit costs the chunks it touches."""
        if self._done:
            raise InvalidArgumentError("this upload has ended: start another with store.upload()")
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidArgumentError(f"put takes bytes, not {describe(data)}")
        if previous is not None and not isinstance(previous, Manifest):
            raise InvalidArgumentError(f"previous is a Manifest or None, not {describe(previous)}")
        return self._upload.write(bytes(data) if isinstance(data, bytearray) else data, previous=previous)

    def __enter__(self) -> ValueUpload:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._done:
            return
        self._done = True
        if exc_type is not None:
            self._upload.abort()
            return
        try:
            self._upload.finish()
        except BaseException:
            self._upload.abort()
            raise


def _config_check_message(config: StoreConfig) -> bytes:
    return config.model_copy(update={"key_check": ""}).document()


def _where(backend: Backend, key: str) -> str:
    return f"{backend.url.rstrip('/')}/{key}"


#: A config or key file is a few hundred bytes; anything much larger is not one, and is not read
#: whole (a planted 200 MB file would otherwise cost every open its size in memory).
_SMALL_OBJECT = 64 << 10
#: Passphrase key files tried at most per open (scrypt costs up to a second or more each).
_MAX_PASSPHRASE_FILES = 16


def _load_config(backend: Backend) -> StoreConfig | None:
    try:
        raw = backend.get_range("config", 0, _SMALL_OBJECT + 1)
    except ObjectNotFoundError:
        return None
    invalid = f"{_where(backend, 'config')} is not a valid s3ckpt config"
    if len(raw) > _SMALL_OBJECT:
        raise IntegrityError(f"{invalid}: it is over {_SMALL_OBJECT} bytes; restore it from a backup", key="config")
    try:
        version = pydantic.TypeAdapter(dict[str, Any]).validate_json(raw).get("version")
    except pydantic.ValidationError:
        raise IntegrityError(f"{invalid}; restore it from a backup", key="config") from None
    if isinstance(version, int) and version > NEWEST_FORMAT_VERSION:
        raise IncompatibleSchemaError(
            f"the store at {backend.url} has format version {version}; this s3ckpt reads up to "
            f"{NEWEST_FORMAT_VERSION}. Upgrade s3ckpt to open it.",
            found=version,
            supported=NEWEST_FORMAT_VERSION,
        )
    try:
        return StoreConfig.model_validate_json(raw)
    except pydantic.ValidationError as exc:
        raise IntegrityError(f"{invalid} ({exc.errors()[0]['msg']}); restore it from a backup", key="config") from None


def _load_keyfiles(backend: Backend, store_id: str | None, *, newer: list[int] | None = None) -> list[KeyFile]:
    """The key files of ``store_id`` (None: of any store). Versions of key files too new to read
    are appended to ``newer``, so a failure to open can say "upgrade" instead of "wrong key"."""
    found = []
    for info in backend.list("keys/"):
        if info.size > _SMALL_OBJECT:
            log.warning("ignoring %s: %d bytes is not a key file", info.key, info.size)
            continue
        try:
            raw = backend.get(info.key).data
        except ObjectNotFoundError:  # removed since the listing
            continue
        try:
            keyfile = KeyFile.model_validate_json(raw)
        except pydantic.ValidationError:
            version = _peek_int(raw, "version")
            if version is not None and version > KEYFILE_VERSION and newer is not None:
                newer.append(version)
            else:
                log.warning("ignoring unreadable key file %s", info.key)
            continue
        if store_id is None or keyfile.store_id == store_id:
            found.append(keyfile)
    return found


def _peek_int(raw: bytes, field: str) -> int | None:
    try:
        value = pydantic_core.from_json(raw).get(field)
    except (ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def _kms_factory(region: str | None, endpoint_url: str | None, credentials: Any = None) -> Callable[[], Any]:
    """KMS with the same credentials as the S3 backend (``credentials=``), else the default chain."""

    def make() -> Any:
        import boto3

        from .backends._s3 import _botocore_session

        session = boto3.session.Session(botocore_session=_botocore_session(), **dict(credentials or {}))
        return session.client("kms", region_name=region, endpoint_url=endpoint_url)

    return make


def _unwrap(backend: Backend, config: StoreConfig, user_key: UserKey, kms: Callable[[], Any]) -> bytes:
    newer: list[int] = []
    files = _load_keyfiles(backend, None, newer=newer)
    every = [k for k in files if matches(k, user_key)]
    candidates = [k for k in every if k.store_id == config.store_id]
    if not candidates and every:
        # Key files for this key exist, but for another store id. If the config's store has key files
        # here, this key is simply not one of them: its key file is another store's, or was left by an
        # interrupted or lost creation of a store at this URL. If no key file here names the config's
        # store, the config is not the one these key files were made with: it was replaced.
        if any(k.store_id == config.store_id for k in files):
            raise DecryptionError(
                f"this key does not open the store at {backend.url}: its key file belongs to store "
                f"{every[0].store_id}, left by an interrupted or lost creation of a store here or copied from "
                f"another store, and the store here ({config.store_id}) has key files of its own. Use a key that was "
                "added to this store; `s3ckpt key list` shows which kinds exist."
            )
        raise IntegrityError(
            f"{_where(backend, 'config')} names store {config.store_id}, which no key file here opens, and the key "
            f"files for this key belong to store {every[0].store_id}: the config was replaced. Restore it from a backup.",
            key="config",
        )
    if isinstance(user_key, PassphraseKey) and len(candidates) > _MAX_PASSPHRASE_FILES:
        log.warning("%d passphrase key files; trying %d (remove those no longer used)", len(candidates), _MAX_PASSPHRASE_FILES)
        candidates = candidates[:_MAX_PASSPHRASE_FILES]
    refusals: list[str] = []
    for keyfile in candidates:
        try:
            return unwrap_master_key(keyfile, user_key, kms_client=kms)
        except DecryptionError as exc:
            refusals.append(str(exc))
    if newer:
        raise IncompatibleSchemaError(
            f"the store at {backend.url} has key files of version {max(newer)}, newer than {KEYFILE_VERSION} which "
            "this s3ckpt reads, and none of the readable ones opens with this key; upgrade s3ckpt",
            found=max(newer),
            supported=KEYFILE_VERSION,
        )
    kind = type(user_key).__name__.replace("Key", "").lower()
    raise DecryptionError(
        f"the given {kind} key does not open the store at {backend.url} (tried {len(candidates)} matching key "
        "file(s)). Use a key that was added to this store; `s3ckpt key list` shows which kinds exist, and "
        "`s3ckpt key add` (run with a working key) adds another."
        + "".join(f" {r.rstrip('.')}." for r in refusals if not r.startswith("the key does not open key file"))
    )


def open_store(
    url: str | None = None,
    *,
    key: str | bytes | None = None,
    create: bool = True,
    chunker: ChunkerParams | None = None,
    kms_endpoint_url: str | None = None,
    concurrency: int | None = None,
    inline_limit: int | None = None,
    commit_attempts: int | None = None,
    commit_deadline: float | None = None,
    redactor: Redactor | None = None,
    private_run_ids: bool | None = None,
    backend: Backend | None = None,
    **backend_options: Any,
) -> Store:
    """Open the store at ``url`` (default ``$S3CKPT_URL``, else ``./.s3ckpt``), creating it if absent.

    ``key`` is a key from generate_key(), 32 raw bytes, ``env:NAME``, ``passphrase:...`` or
    ``kms:<id|arn|alias>``; default ``$S3CKPT_KEY``. ``backend_options`` go to the backend:
    endpoint_url, region, credentials, retry_mode, max_attempts, max_pool_connections (S3),
    storage_options (fsspec), fsync (local directory). ``redactor`` replaces the default secret
    redaction (``s3ckpt.Redactor(extra_patterns=..., allow=...)``; ``s3ckpt.NO_REDACTION`` turns it off).
    ``private_run_ids=True`` creates a store whose run directories are keyed digests of the run ids
    instead of the readable ids (chosen once, when the store is created; see docs/sessions.md).
    ``commit_deadline``: seconds any commit to the store may take before its record is refused, fixed
    when the store is created (default 30 minutes; ``gc``'s grace must be at least twice it); a
    process may ask for less, never more.
    """
    _check_options(
        private_run_ids=private_run_ids, chunker=chunker, concurrency=concurrency, inline_limit=inline_limit,
        commit_attempts=commit_attempts, redactor=redactor, backend=backend, create=create,
        kms_endpoint_url=kms_endpoint_url, commit_deadline=commit_deadline,
    )  # fmt: skip
    user_key = parse_key(key)
    if backend is None:
        backend = open_backend(url, **backend_options)
    elif backend_options:
        raise ConfigurationError("pass either backend= or backend options, not both")
    if not isinstance(backend, RetryingBackend):
        backend = RetryingBackend(backend, attempts=commit_attempts or StoreOptions.commit_attempts)
    defaults = StoreOptions()
    options = StoreOptions(
        concurrency=concurrency or defaults.concurrency,
        inline_limit=defaults.inline_limit if inline_limit is None else inline_limit,
        commit_attempts=commit_attempts or defaults.commit_attempts,
        redactor=defaults.redactor if redactor is None else redactor,
    )
    kms = _kms_factory(
        backend_options.get("region"),
        kms_endpoint_url or os.environ.get("AWS_ENDPOINT_URL_KMS"),
        backend_options.get("credentials"),
    )
    config = _load_config(backend)
    if config is None:
        if not create:
            raise StoreNotFoundError(f"there is no s3ckpt store at {backend.url}; create one with `s3ckpt init`")
        if next(iter(backend.list_dirs("runs/")), None) is not None:
            # Runs exist only after a config did: creating a new store here would orphan them.
            raise IntegrityError(
                f"{_where(backend, 'config')} is missing but the store holds runs; refusing to create a new "
                "store over them. Restore the config from a backup.",
                key="config",
            )
        config, master = _create(
            backend, user_key, chunker or DEFAULT_CHUNKER, kms, private_run_ids=bool(private_run_ids), deadline=commit_deadline
        )
        if master is not None:
            options = _with_deadline(options, config, commit_deadline, backend)
            return Store(backend, config, master, options=options, kms_client=kms)
    if private_run_ids is not None and private_run_ids != (config.run_names == "keyed"):
        raise ConfigurationError(
            f"the store at {backend.url} was created with {'private' if config.run_names == 'keyed' else 'readable'} "
            "run ids, and that cannot change; leave private_run_ids out, or create another store"
        )
    options = _with_deadline(options, config, commit_deadline, backend)
    master = _unwrap(backend, config, user_key, kms)
    store = Store(backend, config, master, options=options, kms_client=kms)
    if not secrets.compare_digest(store.cipher.key_check(_config_check_message(config)), config.key_check):
        store.close()
        raise IntegrityError(
            f"the config of {backend.url} fails its key check: it was edited, or a key file belongs to "
            "another store. Restore the config from a backup.",
            key="config",
        )
    return store


def _with_deadline(options: StoreOptions, config: StoreConfig, asked: float | None, backend: Backend) -> StoreOptions:
    """The store's commit deadline, which every writer keeps (the collector counts on it); a
    process may ask for a shorter one, never a longer one."""
    store_deadline = config.commit_deadline or DEFAULT_COMMIT_DEADLINE
    if asked is not None and float(asked) > store_deadline:
        raise ConfigurationError(
            f"commit_deadline={asked:g}: the store at {backend.url} allows commits of at most {store_deadline:g} s "
            "(set when it was created), and its collector counts on that. Leave commit_deadline out, or ask for less."
        )
    return dataclasses.replace(options, commit_deadline=store_deadline if asked is None else float(asked))


def _check_options(**options: Any) -> None:
    """The options of open_store that are not the backend's, checked before anything is opened."""
    for name in ("private_run_ids", "create"):
        if options[name] is not None and not isinstance(options[name], bool):
            raise ConfigurationError(f"{name} is True or False, not {describe(options[name])}")
    for name in ("concurrency", "commit_attempts"):
        value = options[name]
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1024):
            raise ConfigurationError(f"{name} is an int from 1 to 1024, not {describe(value)}")
    limit = options["inline_limit"]
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= 16 << 20):
        raise ConfigurationError(f"inline_limit is a size in bytes from 0 to 16 MiB, not {describe(limit)}")
    if options["chunker"] is not None and not isinstance(options["chunker"], ChunkerParams):
        raise ConfigurationError(
            f"chunker is a s3ckpt.records.ChunkerParams(avg_size=, min_size=, max_size=), not {describe(options['chunker'])}"
        )
    if options["redactor"] is not None and not isinstance(options["redactor"], Redactor):
        raise ConfigurationError(f"redactor is a s3ckpt.Redactor (or s3ckpt.NO_REDACTION), not {describe(options['redactor'])}")
    if options["backend"] is not None and not isinstance(options["backend"], Backend):
        raise ConfigurationError(f"backend is a s3ckpt.backends.Backend, not {describe(options['backend'])}")
    deadline = options["commit_deadline"]
    if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, int | float) or not 0 < deadline < 1e9):
        raise ConfigurationError(f"commit_deadline is a number of seconds > 0, not {describe(deadline)}")
    url = options["kms_endpoint_url"]
    if url is not None and not isinstance(url, str):
        raise ConfigurationError(f"kms_endpoint_url is a URL string, not {describe(url)}")


def _create(
    backend: Backend,
    user_key: UserKey,
    chunker: ChunkerParams,
    kms: Callable[[], Any],
    *,
    private_run_ids: bool,
    deadline: float | None = None,
) -> tuple[StoreConfig, bytes | None]:
    """Create config and first key file. Returns the winner's config and, if we won, the master key."""
    if not backend.capabilities.atomic_create:
        raise UnsupportedBackendError(f"{backend.url} cannot create objects atomically; s3ckpt cannot commit there")
    master = os.urandom(32)
    store_id = secrets.token_hex(16)
    keyfile = wrap_master_key(master, user_key, store_id=store_id, kms_client=kms)
    # The key file goes first: a config is never visible without a key that opens it.
    backend.put(f"keys/{keyfile.key_id}", keyfile.model_dump_json().encode(), mode="create")
    draft = StoreConfig(
        version=KEYED_NAMES_FORMAT_VERSION if private_run_ids else FORMAT_VERSION,
        store_id=store_id,
        created_at=datetime.now(UTC),
        chunker=chunker,
        run_names="keyed" if private_run_ids else "escaped",
        commit_deadline=None if deadline is None else float(deadline),
    )
    config = draft.model_copy(update={"key_check": Cipher(master, store_id).key_check(_config_check_message(draft))})
    try:
        # A config of ours that landed with its answer lost is success (backends/_retry.py); only a
        # config with another store id is another process's.
        backend.put("config", config.document(), mode="create")
    except PreconditionFailedError:
        winner = _load_config(backend)
        if winner is None:
            raise IntegrityError("config vanished while creating the store", key="config") from None
        if winner.store_id == store_id:  # ours after all (a backend without the retry layer)
            return config, master
        # Another process created the store first: ours is an orphan key file that no config names.
        # It is harmless (opening filters key files by store id), so a worker that may not delete
        # keeps it.
        try:
            backend.delete(f"keys/{keyfile.key_id}")
        except BackendError as exc:
            log.info("left orphan key file keys/%s of a lost store-creation race: %s", keyfile.key_id, exc)
        return winner, None
    return config, master
