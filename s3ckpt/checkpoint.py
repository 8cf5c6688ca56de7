"""The validated, decrypted view of one committed checkpoint."""

from __future__ import annotations

import os
import secrets
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import pydantic

from .errors import IntegrityError, S3ckptError
from .records import CommitRecord, EffectRecord, Ledger, Manifest, StepRecord

if TYPE_CHECKING:
    from .blobs import BlobStore
    from .workflows import VersionChange


class ArtifactNotFoundError(S3ckptError, KeyError):
    """The checkpoint has no artifact of that name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Checkpoint:
    """One committed checkpoint of a run. ``state`` is already decoded; artifacts stream on demand."""

    def __init__(self, record: CommitRecord, state: Any, blobs: BlobStore, *, ledger: Ledger | None = None) -> None:
        self._record = record
        self._blobs = blobs
        self._ledger = ledger
        self.state = state
        #: Set when the checkpoint was resumed under another workflow version or provenance.
        self.version_change: VersionChange | None = None

    def evolved(self, *, state: Any, change: VersionChange) -> Checkpoint:
        """This checkpoint as seen by code of another version: migrated state, change recorded."""
        out = Checkpoint(self._record, state, self._blobs, ledger=self._ledger)
        out.version_change = change
        return out

    @property
    def run_id(self) -> str:
        return self._record.run_id

    @property
    def seq(self) -> int:
        return self._record.seq

    @property
    def epoch(self) -> int:
        return self._record.epoch

    @property
    def created_at(self) -> datetime:
        return self._record.created_at

    @property
    def schema_version(self) -> int:
        return self._record.schema_version

    @property
    def meta(self) -> dict[str, Any]:
        return dict(self._record.meta)

    @property
    def provenance(self) -> dict[str, Any]:
        return dict(self._record.provenance)

    @property
    def artifacts(self) -> dict[str, int]:
        """Artifact names and their sizes in bytes."""
        return {name: manifest.size for name, manifest in self._record.artifacts.items()}

    @property
    def record(self) -> CommitRecord:
        return self._record

    def _manifest(self, name: str) -> Manifest:
        manifest = self._record.artifacts.get(name)
        if manifest is None:
            raise ArtifactNotFoundError(
                f"checkpoint {self.run_id!r}@{self.seq} has no artifact {name!r}; it has: "
                f"{', '.join(sorted(self._record.artifacts)) or 'none'}"
            )
        return manifest

    def open_artifact(self, name: str) -> BinaryIO:
        """A binary file that streams the artifact, verifying every chunk as it arrives."""
        return self._blobs.open(self._manifest(name))

    def restore_artifact(self, name: str, path: str | os.PathLike[str]) -> None:
        """Write the artifact to ``path``: chunks are fetched, verified and written in parallel.
        The file appears under ``path`` only when complete (a temporary file is renamed over it);
        it is not fsynced, as a restore that a crash interrupts is simply run again."""
        manifest = self._manifest(name)
        target = Path(path)
        tmp = target.with_name(f".{target.name}.s3ckpt-{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, manifest.size)
            self._blobs.read_into(manifest, fd)
        except BaseException:
            os.close(fd)
            tmp.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(tmp, target)

    def read_artifact(self, name: str) -> bytes:
        with self.open_artifact(name) as fh:
            return fh.read()

    @property
    def ledger(self) -> Ledger:
        """Steps, attempts, effects and budget recorded by sessions (empty for plain commits)."""
        if self._ledger is None:
            manifest = self._record.ledger_manifest
            if manifest is None:
                self._ledger = self._record.ledger or Ledger()
            else:
                try:
                    self._ledger = Ledger.model_validate_json(self._blobs.read_all(manifest))
                except pydantic.ValidationError as exc:
                    raise IntegrityError(f"{self!r}: the stored ledger is not valid: {exc}") from None
        return self._ledger

    @property
    def steps(self) -> dict[str, StepRecord]:
        return dict(self.ledger.steps)

    @property
    def effects(self) -> list[EffectRecord]:
        return list(self.ledger.effects.values())

    @property
    def budget(self) -> dict[str, int | float]:
        return dict(self.ledger.budget)

    def to_dict(self) -> dict[str, Any]:
        """The whole decoded record, with the state and ledger inline even when stored as chunks."""
        out = self._record.model_dump(mode="json", exclude={"state_manifest", "ledger", "ledger_manifest"})
        out["state"] = self.state
        out.update(self.ledger.model_dump(mode="json"))
        return out

    def __repr__(self) -> str:
        return f"Checkpoint(run_id={self.run_id!r}, seq={self.seq}, epoch={self.epoch})"
