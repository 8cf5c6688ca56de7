"""The scheduled maintenance job: prune a store with a retention policy, then gc (AWS Lambda).

``terraform/maintenance.tf`` deploys it per tenant with the handler ``s3ckpt.aws_maintenance.handler``
and this configuration in the function's environment:

- ``S3CKPT_URL`` (required): the store, e.g. ``s3://bucket/tenant``.
- ``S3CKPT_KEY`` (required): its key, e.g. ``kms:<key arn>`` (no secret in the environment).
- ``S3CKPT_KEEP_LAST``: keep the last N checkpoints of each run.
- ``S3CKPT_KEEP_WITHIN_DAYS`` or ``S3CKPT_KEEP_WITHIN_HOURS``: keep checkpoints younger than that.
  Without any keep_* variable nothing is pruned and the job only collects garbage.
- ``S3CKPT_GC_GRACE_SECONDS``: gc deletes an unreferenced pack only when its storage age exceeds
  this (default 3600, the library's default). It must be at least twice the store's commit
  deadline (fixed in its config when it was created; 30 minutes by default).
- ``S3CKPT_COMMIT_DEADLINE_SECONDS``: optional; this job's own commit deadline, at most the store's
  (the job commits nothing itself; a larger value is a ConfigurationError).
- ``S3CKPT_DRY_RUN``: ``true`` to report without deleting; an event ``{"dry_run": true}`` overrides it.

The store is opened with ``create=False``: a wrong URL is an error, never a new empty store.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from .collector import check_grace
from .errors import ConfigurationError, InvalidArgumentError, describe
from .store import open_store

__all__ = ["ENVIRONMENT", "MaintenanceConfig", "config_from_env", "handler", "run_maintenance"]

LOG = logging.getLogger("s3ckpt.maintenance")

#: Every environment variable the handler reads (terraform/maintenance.tf sets them; a test checks).
ENVIRONMENT: Final[frozenset[str]] = frozenset(
    {
        "S3CKPT_URL",
        "S3CKPT_KEY",
        "S3CKPT_KEEP_LAST",
        "S3CKPT_KEEP_WITHIN_DAYS",
        "S3CKPT_KEEP_WITHIN_HOURS",
        "S3CKPT_GC_GRACE_SECONDS",
        "S3CKPT_COMMIT_DEADLINE_SECONDS",
        "S3CKPT_DRY_RUN",
    }
)

DEFAULT_GC_GRACE = timedelta(hours=1)
_MAX_SECONDS = 100 * 365 * 86400
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


@dataclass(frozen=True)
class MaintenanceConfig:
    url: str
    key: str
    keep_last: int | None
    keep_within: timedelta | None
    gc_grace: timedelta
    dry_run: bool
    #: The writers' commit deadline in seconds; None for the library's default.
    commit_deadline: float | None = None

    def __repr__(self) -> str:  # the key may be a raw key: never in a repr or a log line
        return (
            f"MaintenanceConfig(url={_safe_url(self.url)!r}, key=<redacted>, keep_last={self.keep_last}, "
            f"keep_within={self.keep_within}, gc_grace={self.gc_grace}, dry_run={self.dry_run})"
        )

    @property
    def prunes(self) -> bool:
        return self.keep_last is not None or self.keep_within is not None


def _required(env: Mapping[str, str], name: str, example: str) -> str:
    value = env.get(name, "").strip()
    if not value:
        raise ConfigurationError(f"the maintenance job needs {name}: set it in the function's environment, e.g. {example}")
    return value


def _number(env: Mapping[str, str], name: str, what: str, *, least: float, strict: bool = False, whole: bool) -> float | None:
    """An optional number: at least ``least`` (above it when ``strict``), whole when ``whole``."""
    raw = env.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    too_small = value <= least if strict else value < least
    # At most 100 years, which also keeps timedelta() from overflowing.
    if not math.isfinite(value) or too_small or value > _MAX_SECONDS or (whole and not value.is_integer()):
        raise ConfigurationError(f"{name} must be {what}, not {describe(raw)}: fix it or unset it")
    return value


def _flag(value: object, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigurationError(f"{name} must be true or false, not {describe(value)}")


def config_from_env(env: Mapping[str, str] | None = None, event: object = None) -> MaintenanceConfig:
    """The job's configuration from the environment (default ``os.environ``) and the invoking event.
    Raises ConfigurationError naming the variable to set or fix."""
    env = os.environ if env is None else env
    url = _required(env, "S3CKPT_URL", "s3://bucket/tenant (the Terraform module's store_urls output)")
    key = _required(env, "S3CKPT_KEY", "kms:<key arn> (the Terraform module's store_key output)")
    keep_last = _number(env, "S3CKPT_KEEP_LAST", "a whole number of checkpoints, at least 1", least=1, whole=True)
    days = _number(env, "S3CKPT_KEEP_WITHIN_DAYS", "a number of days greater than 0", least=0, strict=True, whole=False)
    hours = _number(env, "S3CKPT_KEEP_WITHIN_HOURS", "a number of hours greater than 0", least=0, strict=True, whole=False)
    if days is not None and hours is not None:
        raise ConfigurationError("set S3CKPT_KEEP_WITHIN_DAYS or S3CKPT_KEEP_WITHIN_HOURS, not both")
    keep_within = timedelta(days=days) if days is not None else timedelta(hours=hours) if hours is not None else None
    grace = _number(env, "S3CKPT_GC_GRACE_SECONDS", "a whole number of seconds, 0 or more", least=0, whole=True)
    deadline = _number(
        env, "S3CKPT_COMMIT_DEADLINE_SECONDS", "a number of seconds greater than 0", least=0, strict=True, whole=False
    )
    dry_run = _flag(env.get("S3CKPT_DRY_RUN", ""), "S3CKPT_DRY_RUN")
    if isinstance(event, Mapping) and "dry_run" in event:
        dry_run = _flag(event["dry_run"], "the event's dry_run")
    return MaintenanceConfig(
        url=url,
        key=key,
        keep_last=None if keep_last is None else int(keep_last),
        keep_within=keep_within,
        gc_grace=DEFAULT_GC_GRACE if grace is None else timedelta(seconds=grace),
        dry_run=dry_run,
        commit_deadline=deadline,
    )


def _safe_url(url: str) -> str:
    """The URL without a password, should an fsspec URL carry one (``proto://user:secret@host``)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.partition("@")
    return f"{scheme}{sep}{userinfo.split(':', 1)[0]}:<redacted>@{host}" if sep and at and ":" in userinfo else url


def _counts(report: Mapping[str, Any]) -> dict[str, Any]:
    """The numbers of a report, for the log: its lists may name runs, which stay out of logs."""
    return {k: v for k, v in report.items() if isinstance(v, bool | int | float)}


def run_maintenance(config: MaintenanceConfig) -> dict[str, Any]:
    """Prune with the configured policy (when there is one), then gc; both reports as dicts."""
    with open_store(config.url, key=config.key, create=False, commit_deadline=config.commit_deadline) as store:
        # Checked before prune, by gc's own check, so that a grace gc would refuse does not leave the
        # job half done.
        try:
            check_grace(store, config.gc_grace)
        except InvalidArgumentError as exc:
            raise ConfigurationError(f"S3CKPT_GC_GRACE_SECONDS: {exc}") from None
        pruned: dict[str, Any] | None = None
        if config.prunes:
            pruned = store.prune(
                keep_last=config.keep_last, keep_within=config.keep_within, run_ids=None, dry_run=config.dry_run
            ).to_dict()
        collected = store.gc(grace=config.gc_grace, dry_run=config.dry_run).to_dict()
    return {"prune": pruned, "gc": collected}


def handler(event: object, context: object) -> dict[str, Any]:
    """The Lambda entry point: ``{"prune": <prune report or None>, "gc": <gc report>}``."""
    if LOG.level == logging.NOTSET:  # Lambda's root logger shows WARNING and up; the summary is INFO
        LOG.setLevel(logging.INFO)
    config = config_from_env(event=event)
    result = run_maintenance(config)
    summary = {
        "store": _safe_url(config.url),
        "dry_run": config.dry_run,
        "keep_last": config.keep_last,
        "keep_within_seconds": None if config.keep_within is None else config.keep_within.total_seconds(),
        "gc_grace_seconds": config.gc_grace.total_seconds(),
        "prune": None if result["prune"] is None else _counts(result["prune"]),
        "gc": _counts(result["gc"]),
    }
    LOG.info("s3ckpt maintenance: %s", json.dumps(summary, sort_keys=True))
    return result
