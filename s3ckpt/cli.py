"""The operator CLI: ``s3ckpt [--url URL] [--key KEY] [--json] COMMAND``.

Errors print one line, ``error: <what is wrong>; <what to do>``, on stderr (never a key, never a
traceback for an expected failure); with ``--json`` (before or after the command) they are one
JSON object on stdout instead: ``{"error": {"type": ..., "message": ..., "exit_code": ...}}``.
Every command's ``--json`` output is one JSON document on stdout; progress goes to stderr.

Exit status:

====  ==========================================================================================
0     all is well
1     the command failed (a missing run, a bad argument value, a storage or network error, ...),
      or ``verify`` found a problem (its report says which)
2     usage error: an unknown command or option, a missing or malformed argument or duration
3     no store here: nothing at the URL yet (``s3ckpt init`` creates it), or the bucket is missing
4     wrong key: the key does not open this store (``s3ckpt key list`` shows the kinds it takes)
5     conflict: another writer took the seq, or claimed the run (fenced), or the run was deleted
130   interrupted (Ctrl-C)
====  ==========================================================================================

The key: ``--key`` or ``$S3CKPT_KEY``; ``prompt`` or a bare ``passphrase:`` asks for a passphrase
(hidden input, on the terminal), and so does no key at all when stdin is a terminal.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from .blobs import stored_at
from .checkpoint import Checkpoint
from .collector import GcReport, StoreStats
from .crypto import generate_key
from .errors import (
    ConfigurationError,
    ConflictError,
    DecryptionError,
    IncompatibleSchemaError,
    IntegrityError,
    RunNotFoundError,
    S3ckptError,
    StoreNotFoundError,
)
from .log import Run
from .records import CommitRecord, Manifest
from .retention import PruneReport
from .store import Store, open_store
from .verify import VerifyReport

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_STORE = 3
EXIT_WRONG_KEY = 4
EXIT_CONFLICT = 5
EXIT_INTERRUPTED = 130

#: A restore larger than this shows a progress bar (on a terminal).
PROGRESS_MIN_BYTES = 4 << 20

T = TypeVar("T")


def _json_requested(args: Sequence[str]) -> bool:
    end = args.index("--") if "--" in args else len(args)
    return "--json" in args[:end]


class _Cli(TyperGroup):
    """The root command: ``--json`` anywhere before ``--``, and every expected error as one line
    (or one JSON object) with its exit status, whichever command raised it."""

    # ctx is typed Any: typer >= 0.29 passes its own vendored click's Context, older ones click's.
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if _json_requested(args):  # the root option, wherever it was typed
            end = args.index("--") if "--" in args else len(args)
            args = ["--json", *[a for a in args[:end] if a != "--json"], *args[end:]]
        return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            code = exit_code(exc)
            if code is None or isinstance(exc, BrokenPipeError):  # `s3ckpt runs | head`: click ends quietly
                raise  # typer's own exits and usage errors, or a bug: its traceback is what a report needs
            _print_error(exc, code, as_json=bool(getattr(ctx.obj, "as_json", False)))
            raise typer.Exit(code) from None

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        if not standalone_mode or not _json_requested(argv):
            return super().main(argv, prog_name, complete_var, standalone_mode, windows_expand_args, **extra)
        try:
            code = super().main(argv, prog_name, complete_var, False, windows_expand_args, **extra)
        except typer.Abort:
            sys.exit(EXIT_FAILED)
        except Exception as exc:
            usage_code = getattr(exc, "exit_code", None)
            if not isinstance(usage_code, int) or not hasattr(exc, "format_message"):
                raise
            _print_json_error(type(exc).__name__, exc.format_message(), usage_code)  # usage errors, as JSON too
            sys.exit(usage_code)
        sys.exit(code if isinstance(code, int) else EXIT_OK)


def exit_code(exc: BaseException) -> int | None:
    """The exit status for an expected failure; None for anything else (a bug)."""
    if isinstance(exc, StoreNotFoundError):
        return EXIT_NO_STORE
    if isinstance(exc, DecryptionError):
        return EXIT_WRONG_KEY
    if isinstance(exc, ConflictError):
        return EXIT_CONFLICT
    if isinstance(exc, S3ckptError | OSError) or _is_botocore(exc):
        return EXIT_FAILED
    return None


def _is_botocore(exc: BaseException) -> bool:
    # A KMS or STS call that the library did not translate; botocore is imported only if used.
    return type(exc).__module__.startswith("botocore")


def _message(exc: BaseException) -> str:
    if isinstance(exc, S3ckptError):
        text = str(exc)
    elif isinstance(exc, OSError):
        text = f"{exc}; check the path, its permissions and the free space"
    elif _is_botocore(exc):
        text = (
            f"AWS: {exc}; check the endpoint (--endpoint-url or AWS_ENDPOINT_URL), the region (--region) and the "
            "AWS credentials"
        )
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())  # one line, whatever the message held


def _printable(text: str, *, lines: bool = False) -> str:
    # Run ids and paths may hold lone surrogates (undecodable argv bytes) and control characters (an
    # escape sequence in a run id must not drive the operator's terminal): show both escaped. Messages
    # keep their own line breaks (``lines``).
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    kept = " \n" if lines else " "
    return "".join(c if c.isprintable() or c in kept else c.encode("unicode_escape").decode("ascii") for c in text)


def _print_error(exc: BaseException, code: int, *, as_json: bool) -> None:
    if as_json:
        _print_json_error(type(exc).__name__, _message(exc), code)
    else:
        typer.secho("error:", fg="red", nl=False, err=True)
        typer.echo(" " + _printable(_message(exc), lines=True), err=True)


def _print_json_error(kind: str, message: str, code: int) -> None:
    typer.echo(json.dumps({"error": {"type": kind, "message": message, "exit_code": code}}))


class NotConfirmedError(S3ckptError):
    """The operator did not confirm a destructive command."""


app = typer.Typer(
    cls=_Cli,
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Durable, encrypted checkpoints in object storage.\n\n"
    "Exit status: 0 ok, 1 failed (or verify found a problem), 2 usage error, 3 no store here, 4 wrong key, "
    "5 conflict or fenced (or the run was deleted), 130 interrupted.\n\n"
    "Key: --key or $S3CKPT_KEY. `--key prompt` or a bare `passphrase:` asks for a passphrase (hidden input); "
    "so does no key at all when stdin is a terminal.\n\n"
    "Shell completion: `s3ckpt --install-completion` installs it for your shell (bash, zsh, fish, PowerShell); "
    "`s3ckpt --show-completion` prints the script instead.",
)
key_app = typer.Typer(no_args_is_help=True, help="Manage the keys that open a store.")
app.add_typer(key_app, name="key")

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

#: ``--key`` values that ask for a passphrase instead of carrying one.
PROMPT_KEYS = ("prompt", "passphrase:")


def _interactive() -> bool:
    """Whether a person can answer a prompt (stdin is a terminal)."""
    isatty = getattr(sys.stdin, "isatty", None)
    return bool(isatty and isatty())


def ask_passphrase(where: str, *, confirm: bool) -> str:
    """A passphrase typed with hidden input; ``confirm`` asks twice (a new store, a new key)."""
    try:
        typed = typer.prompt(f"Passphrase for {where}", hide_input=True, confirmation_prompt=confirm, err=True)
    except typer.Abort:
        raise ConfigurationError(
            "no passphrase was typed; type it at the prompt, or pass --key (a key, env:NAME, passphrase:..., kms:<id>)"
        ) from None
    return f"passphrase:{typed}"


@dataclass
class Context:
    url: str | None
    key: str | None
    as_json: bool
    endpoint_url: str | None
    region: str | None

    def open(self, *, create: bool = False) -> Store:
        options: dict[str, Any] = {}
        if self.endpoint_url:
            options["endpoint_url"] = self.endpoint_url
        if self.region:
            options["region"] = self.region
        return open_store(self.url, key=self.user_key(create=create), create=create, **options)

    def user_key(self, *, create: bool = False) -> str | None:
        """The key to open with: --key, else $S3CKPT_KEY (None lets open_store read it), else a
        passphrase typed at the prompt when that is what was asked for or a person is there."""
        spec = self.key if self.key is not None else os.environ.get("S3CKPT_KEY")
        if spec in PROMPT_KEYS or (not spec and self.key is None and _interactive()):
            return ask_passphrase(self.where(), confirm=create)
        return self.key

    def where(self) -> str:
        return _printable(self.url or os.environ.get("S3CKPT_URL") or "./.s3ckpt")

    def emit(self, data: Any, render: Callable[[], None]) -> None:
        if self.as_json:
            typer.echo(json.dumps(data, default=str))
        else:
            render()


def _version(value: bool) -> None:
    if value:
        from . import __version__

        typer.echo(f"s3ckpt {__version__}")
        raise typer.Exit(EXIT_OK)


@app.callback()
def main_options(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(help="Store URL (default $S3CKPT_URL, else ./.s3ckpt).")] = None,
    key: Annotated[
        str | None,
        typer.Option(
            help="Key: base64, env:NAME, passphrase:..., kms:<id>, or `prompt` to type a passphrase (default "
            "$S3CKPT_KEY; with neither, a terminal prompts)."
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON (errors too).")] = False,
    endpoint_url: Annotated[str | None, typer.Option(help="S3 endpoint (or set AWS_ENDPOINT_URL).")] = None,
    region: Annotated[str | None, typer.Option(help="AWS region.")] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    ctx.obj = Context(url, key, as_json, endpoint_url, region)


def _guard(fn: Callable[[], T]) -> T:
    """Run a command body. Errors are reported in one place (``_Cli.invoke``); this stays so that
    every command reads the same."""
    return fn()


# -- shared helpers ------------------------------------------------------------------------------


def _no_run(run: str) -> NoReturn:
    raise RunNotFoundError(f"no run {run!r} in this store; `s3ckpt runs` lists them")


def _existing_run(store: Store, run: str) -> Run:
    """The run, known to exist: "no such run" says which runs there are, before a seq is looked up."""
    handle = store.run(run)
    if not handle.exists():
        _no_run(run)
    return handle


def _checkpoint(handle: Run, seq: int | None) -> Checkpoint:
    """Checkpoint ``seq`` of the run (default: the latest); a run with none says why."""
    if seq is not None:
        return handle.get(seq)
    cp = handle.latest()
    if cp is not None:
        return cp
    tail = _tail(handle)
    if tail is None:
        _no_run(handle.run_id)
    if tail.kind == "deleted":
        raise RunNotFoundError(f"run {handle.run_id!r} was deleted (`s3ckpt rm`); nothing of it can be read any more")
    raise RunNotFoundError(f"run {handle.run_id!r} has no checkpoint yet; `s3ckpt log RUN` lists its records")


def _tail(handle: Run) -> CommitRecord | None:
    """The run's last record (a claim, a checkpoint, or its deletion), found as readers find it."""
    entry, _ = handle._tail()
    return None if entry is None else entry.record


def _cell(value: Any) -> Text:
    # Run ids, labels and paths come from users: never rich markup, never terminal escapes.
    return Text(_printable(str(value)))


def _say(text: str) -> None:
    out.print(Text(_printable(text, lines=True)))


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _when(record: CommitRecord) -> str:
    return record.created_at.isoformat(timespec="seconds")


def _seqs(seqs: Sequence[int]) -> str:
    """``0-4, 7, 9-10``: a run's seqs, short."""
    spans: list[list[int]] = []
    for seq in sorted(seqs):
        if spans and seq == spans[-1][1] + 1:
            spans[-1][1] = seq
        else:
            spans.append([seq, seq])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans)


_DURATION = re.compile(r"(\d{1,9})([wdhms])")
_UNITS = {"w": "weeks", "d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_duration(value: str | timedelta) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``45s``, ``2w``, or a sum such as ``1d12h``."""
    if isinstance(value, timedelta):
        return value
    text = value.strip().lower()
    parts = _DURATION.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise typer.BadParameter(f"{_printable(value)!r} is not a duration; give a number and a unit: 7d, 12h, 30m, 45s, 1d12h")
    try:
        return sum((timedelta(**{_UNITS[u]: int(n)}) for n, u in parts), timedelta(0))
    except OverflowError:
        raise typer.BadParameter(f"{value!r} is too long a duration; give at most a few thousand years") from None


def _age(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@contextmanager
def _activity(what: str) -> Iterator[Callable[[str], None]]:
    """A progress callback for a long command: a spinner on a terminal; elsewhere (a CI log, cron)
    a line on stderr at most every PROGRESS_EVERY seconds. Never on stdout, which --json owns."""
    if err.is_terminal:
        with err.status(Text(what)) as status:
            yield lambda message: status.update(Text(_printable(f"{what}: {message}")))
        return
    last = [time.monotonic()]

    def line(message: str) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY:
            last[0] = now
            err.print(Text(_printable(f"{what}: {message}")))

    yield line


#: Seconds between progress lines when stderr is not a terminal.
PROGRESS_EVERY = 10.0


# -- store and keys ------------------------------------------------------------------------------


@app.command()
def init(ctx: typer.Context) -> None:
    """Create a store at --url (a local directory by default) with --key. An S3 bucket must exist."""
    c: Context = ctx.obj
    with c.open(create=True) as store:
        c.emit(
            {"url": store.backend.url, "store_id": store.config.store_id},
            lambda: out.print(f"store {store.config.store_id} ready at {_printable(store.backend.url)}", markup=False),
        )


@key_app.command("new")
def key_new() -> None:
    """Print a new random key (base64 of 32 bytes). Store it in a secret manager."""
    typer.echo(generate_key())


@key_app.command("add")
def key_add(
    ctx: typer.Context,
    new_key: Annotated[
        str, typer.Argument(help="The key to add: base64, env:NAME, passphrase:..., kms:<id>, or `prompt` to type one.")
    ],
    label: Annotated[str, typer.Option(help="A note to tell keys apart.")] = "",
) -> None:
    """Let another key open the store (run with a key that already opens it)."""
    c: Context = ctx.obj
    with c.open() as store:
        if new_key in PROMPT_KEYS:
            new_key = ask_passphrase("the new key", confirm=True)
        key_id = store.add_key(new_key, label=label)
        c.emit({"key_id": key_id}, lambda: out.print(f"added key {key_id}", markup=False))


@key_app.command("list")
def key_list(ctx: typer.Context) -> None:
    """List the key files of the store."""
    c: Context = ctx.obj
    with c.open() as store:
        keys = store.key_files()
        rows = [{"key_id": k.key_id, "kind": k.kind, "label": k.label, "created_at": k.created_at.isoformat()} for k in keys]

        def render() -> None:
            table = Table("key id", "kind", "label", "created")
            for r in rows:
                table.add_row(r["key_id"], r["kind"], _cell(r["label"]), r["created_at"])
            out.print(table)

        c.emit(rows, render)


@key_app.command("remove")
def key_remove(ctx: typer.Context, key_id: str) -> None:
    """Remove a key file (never the last one)."""
    c: Context = ctx.obj
    with c.open() as store:
        store.remove_key(key_id)
        c.emit({"removed": key_id}, lambda: out.print(f"removed key {_printable(key_id)}", markup=False))


# -- runs ----------------------------------------------------------------------------------------


class RunStatus(StrEnum):
    running = "running"
    finished = "finished"
    unknown_effects = "unknown-effects"
    deleted = "deleted"
    damaged = "damaged"


#: A checkpoint committed with this meta marks its run finished (until a writer claims it again).
FINISHED_META = {"status": "finished"}


def run_row(store: Store, run_id: str) -> dict[str, Any]:
    """One line of ``s3ckpt runs``: the run's status, where its log ends, and who writes it."""
    row: dict[str, Any] = {"run": run_id, "status": RunStatus.damaged.value, "last_seq": None, "last_update": None}
    row.update(workflow=None, workflow_version=None, checkpoint_seq=None, unknown_effects=0, problem=None)
    handle = store.run(run_id)
    try:
        tail = _tail(handle)
        latest = handle.latest() if tail is not None and tail.kind != "deleted" else None
        unknown = [e for e in latest.effects if e.status in ("pending", "unknown")] if latest is not None else []
    except (IntegrityError, DecryptionError, IncompatibleSchemaError) as exc:  # this run's: list the others
        row["problem"] = f"{type(exc).__name__}: {exc}"
        return row
    if tail is None:
        row["problem"] = "the run has no records"
        return row
    provenance = tail.provenance or (latest.provenance if latest is not None else {})
    row.update(last_seq=tail.seq, last_update=tail.created_at.isoformat(), unknown_effects=len(unknown))
    row.update(workflow=provenance.get("workflow"), workflow_version=provenance.get("workflow_version"))
    row.update(checkpoint_seq=None if latest is None else latest.seq, status=_status(tail, bool(unknown)).value)
    return row


def _status(tail: CommitRecord, unknown_effects: bool) -> RunStatus:
    if tail.kind == "deleted":
        return RunStatus.deleted
    if unknown_effects:
        return RunStatus.unknown_effects
    if tail.kind == "checkpoint" and all(tail.meta.get(k) == v for k, v in FINISHED_META.items()):
        return RunStatus.finished
    return RunStatus.running


@app.command()
def runs(
    ctx: typer.Context,
    status: Annotated[
        list[RunStatus] | None, typer.Option("--status", help="Only runs with this status (repeat for several).")
    ] = None,
    workflow: Annotated[str | None, typer.Option("--workflow", help="Only runs of this workflow.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only the run ids, one per line (for scripts).")] = False,
) -> None:
    """The runs in the store: status, last seq and update, workflow and version.

    Status: deleted (`s3ckpt rm`); unknown-effects (its latest checkpoint has effects whose outcome is
    unknown: `s3ckpt effects RUN`); finished (its last record is a checkpoint committed with
    meta={"status": "finished"}); running (anything else: a live or an interrupted run); damaged
    (`s3ckpt verify RUN` says why)."""
    c: Context = ctx.obj
    with c.open() as store:
        ids = list(store.runs())
        with ThreadPoolExecutor(max_workers=8) as pool:
            rows = list(pool.map(lambda run_id: run_row(store, run_id), ids))
        wanted = {s.value for s in status or ()}
        rows = [r for r in rows if (not wanted or r["status"] in wanted) and (workflow is None or r["workflow"] == workflow)]
        c.emit(rows, lambda: _render_run_ids(rows) if quiet else _render_runs(rows))


def _render_run_ids(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        out.print(_printable(r["run"]), highlight=False, markup=False)


def _render_runs(rows: list[dict[str, Any]]) -> None:
    table = Table("run", "status", "last seq", "last update", "workflow", "version")
    for r in rows:
        status = r["status"] + (f" ({r['unknown_effects']})" if r["unknown_effects"] else "")
        last = "" if r["last_update"] is None else r["last_update"][:19].replace("T", " ")
        seq = "" if r["last_seq"] is None else str(r["last_seq"])
        table.add_row(_cell(r["run"]), status, seq, last, _cell(r["workflow"] or ""), _cell(r["workflow_version"] or ""))
    out.print(table)


@app.command("log")
def log_cmd(ctx: typer.Context, run: str) -> None:
    """Every record of RUN (claims and checkpoints), oldest first, hash chain checked."""
    c: Context = ctx.obj
    with c.open() as store:
        records = list(store.run(run).records())
        if not records:
            _no_run(run)
        rows = [
            {
                "seq": r.seq,
                "kind": r.kind,
                "epoch": r.epoch,
                "writer": r.writer_id,
                "created_at": r.created_at.isoformat(),
                "artifacts": sorted(r.artifacts),
            }
            for r in records
        ]

        def render() -> None:
            table = Table("seq", "kind", "epoch", "writer", "created", "artifacts")
            for r in records:
                names = ", ".join(sorted(r.artifacts))
                table.add_row(str(r.seq), r.kind, str(r.epoch), r.writer_id, r.created_at.isoformat(), _cell(names))
            out.print(table)

        c.emit(rows, render)


Seq = Annotated[int, typer.Argument(min=0, help="A sequence number (`s3ckpt log RUN` lists them).")]


def artifact_summary(manifest: Manifest) -> dict[str, int]:
    """An artifact as ``show`` lists it: its size, how many chunks, in how many stored objects."""
    return {"size": manifest.size, "chunks": len(manifest.chunks), "packs": len({stored_at(r) for r in manifest.chunks})}


@app.command()
def show(
    ctx: typer.Context,
    run: str,
    seq: Annotated[int | None, typer.Argument(min=0)] = None,
    full: Annotated[bool, typer.Option("--full", help="The whole record, with every artifact's chunk list.")] = False,
) -> None:
    """Checkpoint SEQ of RUN (default: the latest): state, provenance, and each artifact's size and
    chunks (their chunk lists only with --full)."""
    c: Context = ctx.obj
    with c.open() as store:
        cp = _checkpoint(_existing_run(store, run), seq)
        data = cp.to_dict()
        if not full:
            data["artifacts"] = {name: artifact_summary(m) for name, m in cp.record.artifacts.items()}
        if full:
            c.emit(data, lambda: out.print_json(json.dumps(data, default=str), ensure_ascii=True))
        else:
            c.emit(data, lambda: _render_checkpoint(cp, data))


def _render_checkpoint(cp: Checkpoint, data: dict[str, Any]) -> None:
    _say(f"run {cp.run_id}, checkpoint {cp.seq} (epoch {cp.epoch}), committed {_when(cp.record)}")
    if cp.provenance:
        _say("provenance: " + json.dumps(cp.provenance, ensure_ascii=True))
    if cp.meta:
        _say("meta: " + json.dumps(cp.meta, ensure_ascii=True))
    _say("state:")
    out.print_json(json.dumps(cp.state, default=str), ensure_ascii=True)
    if data["artifacts"]:
        table = Table("artifact", "size", "chunks", "packs")
        for name, a in sorted(data["artifacts"].items()):
            table.add_row(_cell(name), _size(a["size"]), str(a["chunks"]), str(a["packs"]))
        out.print(table)
    counts: dict[str, int] = {}
    for effect in cp.effects:
        counts[effect.status] = counts.get(effect.status, 0) + 1
    effects = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none"
    _say(f"ledger: {len(cp.steps)} steps completed; effects: {effects}; budget: {json.dumps(cp.budget)}")
    _say("--full prints the whole record, with chunk lists; `s3ckpt effects RUN` lists the effects")


@app.command()
def effects(ctx: typer.Context, run: str) -> None:
    """The effects ledger of RUN: each effect's status (unknown ones need `s3ckpt resolve`)."""
    c: Context = ctx.obj
    with c.open() as store:
        cp = _checkpoint(_existing_run(store, run), None)
        rows = [e.model_dump(mode="json") for e in cp.effects]

        def render() -> None:
            table = Table("idempotency key", "kind", "target", "status", "reference", "intent at")
            for e in cp.effects:
                status = "unknown (pending)" if e.status == "pending" else e.status
                table.add_row(
                    _cell(e.idempotency_key),
                    _cell(e.kind),
                    _cell(json.dumps(e.target)),
                    status,
                    _cell(json.dumps(e.reference)),
                    e.intent_at.isoformat(),
                )
            out.print(table)

        c.emit(rows, render)


@app.command()
def resolve(
    ctx: typer.Context,
    run: str,
    effect: Annotated[str, typer.Argument(help="Its idempotency key, or a unique start of it (`s3ckpt effects RUN`).")],
    sent: Annotated[str | None, typer.Option("--sent", help="It happened: the provider's reference.")] = None,
    not_sent: Annotated[bool, typer.Option("--not-sent", help="It did not happen: it is sent again, under its key.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an outcome that is already known.")] = False,
) -> None:
    """Settle an effect whose outcome is unknown, after checking with the provider.

    Everything is checked first (the effect exists and is unknown, unless --force); then the run is
    claimed, which fences its live writer: a worker still running it stops at its next commit."""
    c: Context = ctx.obj
    if (sent is None) == (not not_sent):
        err.print("error: give exactly one of --sent REF or --not-sent", highlight=False, markup=False)
        raise typer.Exit(2)

    def go() -> None:
        with c.open() as store:
            settled = store.run(run).resolve_effect(effect, sent=sent is not None, reference=sent, force=force)
            data = settled.model_dump(mode="json")
            c.emit(
                data,
                lambda: out.print(
                    _printable(
                        f"{settled.idempotency_key}: {settled.status}. The run was claimed: a worker still running "
                        f"{run!r} is fenced (it stops at its next commit); resume the run to go on."
                    ),
                    highlight=False,
                    markup=False,
                ),
            )

    _guard(go)


@app.command()
def restore(
    ctx: typer.Context,
    run: str,
    artifact: str,
    path: Annotated[str, typer.Argument(help="The file to write (its directory must exist).")],
    seq: Annotated[int | None, typer.Option(min=0, help="Restore from checkpoint N instead of the latest.")] = None,
) -> None:
    """Write ARTIFACT of RUN's latest checkpoint (or --seq N) to PATH, every chunk verified. A bar
    shows the progress of a large one on a terminal; a restore that is killed leaves a temporary file
    that the next restore to PATH removes."""
    c: Context = ctx.obj
    with c.open() as store:
        cp = _checkpoint(_existing_run(store, run), seq)
        _restore_with_progress(cp, artifact, path)
        size = cp.artifacts[artifact]
        data = {"run": run, "seq": cp.seq, "artifact": artifact, "path": path, "bytes": size}
        c.emit(data, lambda: _say(f"restored {artifact} ({_size(size)}) of {run}@{cp.seq} to {path}"))


def _restore_with_progress(cp: Checkpoint, artifact: str, path: str) -> None:
    total = cp.artifacts.get(artifact, 0)
    if total < PROGRESS_MIN_BYTES or not err.is_terminal:
        cp.restore_artifact(artifact, path)
        return
    columns = (BarColumn(), DownloadColumn(binary_units=True), TransferSpeedColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("restore", total=total)
        cp.restore_artifact(artifact, path, progress=lambda done, _total: bar.update(task, completed=done))


@app.command()
def rollback(ctx: typer.Context, run: str, seq: Seq) -> None:
    """Append a checkpoint that restores checkpoint SEQ of RUN (history is kept). This claims the run,
    so a live writer of it is fenced. Lists the effects confirmed after SEQ: compensate them."""
    c: Context = ctx.obj
    with c.open() as store:
        undone = _existing_run(store, run).rollback(seq)
        rows = [e.model_dump(mode="json") for e in undone]

        def render() -> None:
            _say(f"{run} rolled back to checkpoint {seq}")
            for e in undone:
                _say(f"compensate: {e.kind} to {json.dumps(e.target)} (reference {json.dumps(e.reference)})")

        c.emit({"run": run, "rolled_back_to": seq, "compensate": rows}, render)


# -- lifecycle -----------------------------------------------------------------------------------


@app.command()
def verify(
    ctx: typer.Context,
    run: Annotated[str | None, typer.Argument(help="Check only this run (default: every run, and orphaned packs).")] = None,
    read_data: Annotated[
        bool, typer.Option("--read-data", help="Also read every chunk and check it against its id (slow).")
    ] = False,
) -> None:
    """Check that every record decodes, chains and names data that is stored (exit 1 if not).

    Orphaned packs (garbage for `s3ckpt gc`) and effects whose outcome is unknown (`s3ckpt resolve`)
    are listed apart: they are not damage. Progress goes to stderr."""
    c: Context = ctx.obj
    with c.open() as store:
        if run is not None:
            _known_run(store, run)
        with _activity("verify") as progress:
            report = store.verify(run, read_data=read_data, progress=progress)
        c.emit(report.to_dict(), lambda: _render_verify(report))
        if not report.ok:
            if not c.as_json:
                _print_error_line(
                    f"verify found {len(report.problems)} problem(s) (listed above): committed data is missing or "
                    'unreadable; see docs/operations.md ("Verify") for what each means and what to do'
                )
            raise typer.Exit(EXIT_FAILED)


def _known_run(store: Store, run: str) -> None:
    """Refuse a run with no records; a damaged one is verify's to report, not a refusal."""
    try:
        known = store.run(run).exists()
    except IntegrityError:
        known = True
    if not known:
        _no_run(run)


def _print_error_line(message: str) -> None:
    typer.secho("error:", fg="red", nl=False, err=True)
    typer.echo(" " + _printable(message), err=True)


#: How many orphaned packs the text report names (``--json`` lists them all).
SHOWN_ORPHANS = 10


def _render_verify(report: VerifyReport) -> None:
    read = f", read and checked {report.chunks_read} chunks" if report.read_data else ""
    _say(f"checked {report.runs_checked} runs, {report.records_checked} records, {report.packs_checked} packs{read}")
    if report.problems:
        # Lines, not a table: object keys and messages are long, and whole they can be copied.
        out.print(f"{len(report.problems)} problem(s):", style="red", highlight=False)
        for p in report.problems:
            where = f" ({p.key})" if p.key and p.key not in p.message else ""
            _say(f"  {p.message}{where}")
    if report.orphans:
        _say(f"{len(report.orphans)} orphaned pack(s) that no record names (not damage; `s3ckpt gc` frees them):")
        for key in report.orphans[:SHOWN_ORPHANS]:
            _say(f"  {key}")
        if len(report.orphans) > SHOWN_ORPHANS:
            _say(f"  ... and {len(report.orphans) - SHOWN_ORPHANS} more (--json lists them all)")
    if report.unknown_effects:
        table = Table("run", "kind", "idempotency key", "status", title="effects whose outcome is unknown")
        for run_id, e in report.unknown_effects:
            table.add_row(_cell(run_id), _cell(e.kind), _cell(e.idempotency_key), e.status)
        out.print(table)
        _say("check each with its provider, then `s3ckpt resolve RUN KEY --sent REF` or `--not-sent`")
    if report.ok:
        out.print("ok: every record decodes and chains, and the data it names is stored", style="green", highlight=False)


@app.command("rm")
def rm(
    ctx: typer.Context,
    run: str,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation (needed without a terminal).")] = False,
) -> None:
    """Delete RUN for good: a deletion record fences its writers (they fail with RunDeletedError)
    and makes nothing of it readable; `s3ckpt gc` then frees its data, after the grace."""
    c: Context = ctx.obj
    with c.open() as store:
        handle = _existing_run(store, run)
        if not yes:
            _confirm_delete(handle)
        seq = store.delete_run(run)
        c.emit(
            {"run": run, "deleted_seq": seq},
            lambda: _say(f"deleted run {run} (its deletion is record {seq}); `s3ckpt gc` frees its data after the grace"),
        )


def _confirm_delete(handle: Run) -> None:
    tail = _tail(handle)
    if not _interactive():
        raise typer.BadParameter(
            f"deleting run {handle.run_id!r} needs confirmation and there is no terminal to ask on; pass --yes",
            param_hint="'--yes'",
        )
    last = "" if tail is None else f" (last record {tail.seq}, {_when(tail)})"
    question = _printable(f"Delete run {handle.run_id!r}{last} for good? Its writers are fenced and its data freed")
    if not typer.confirm(question, default=False, err=True):
        raise NotConfirmedError(f"run {handle.run_id!r} was not deleted: not confirmed; pass --yes to skip the question")


@app.command()
def prune(
    ctx: typer.Context,
    keep_last: Annotated[
        int | None, typer.Option("--keep-last", min=0, help="Keep the last N checkpoints of each run.")
    ] = None,
    keep_within: Annotated[
        timedelta | None,
        typer.Option(
            "--keep-within",
            parser=parse_duration,
            metavar="DURATION",
            help="Keep checkpoints younger than this (7d, 12h, 30m).",
        ),
    ] = None,
    runs_: Annotated[list[str] | None, typer.Option("--run", help="Only this run (repeat for several; default: all).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be removed; remove nothing.")] = False,
) -> None:
    """Remove old checkpoints: keep the last N (--keep-last) and those younger than a duration
    (--keep-within), and always each run's latest checkpoint and what a kept record names. Removed
    records become tombstones; `s3ckpt gc` then frees their data."""
    c: Context = ctx.obj
    if keep_last is None and keep_within is None:
        raise typer.BadParameter("give --keep-last N or --keep-within DURATION, or both", param_hint="'--keep-last'")
    with c.open() as store:
        report = store.prune(keep_last=keep_last, keep_within=keep_within, run_ids=runs_, dry_run=dry_run)
        c.emit(report.to_dict(), lambda: _render_prune(report))


def _render_prune(report: PruneReport) -> None:
    removed: dict[str, list[int]] = {}
    kept: dict[str, list[int]] = {}
    for run_id, seq in report.pruned:
        removed.setdefault(run_id, []).append(seq)
    for run_id, seq in report.kept:
        kept.setdefault(run_id, []).append(seq)
    verb = "would remove" if report.dry_run else "removed"
    if removed or kept:
        table = Table("run", verb, "checkpoints kept")
        for run_id in sorted({*removed, *kept}):
            table.add_row(_cell(run_id), _seqs(removed.get(run_id, [])), _seqs(kept.get(run_id, [])))
        out.print(table)
    for run_id, why in report.skipped:
        _say(f"left alone: {run_id}: {why}")
    _say(f"{verb} {report.records_pruned} record(s) of {report.runs_checked} run(s)")
    if report.records_pruned and not report.dry_run:
        _say("their data is garbage now: `s3ckpt gc` frees it once the grace has passed")


@app.command()
def gc(
    ctx: typer.Context,
    grace: Annotated[
        timedelta,
        typer.Option(
            parser=parse_duration,
            metavar="DURATION",
            help="Only delete packs older than this by the storage's clock; above the writers' commit deadline (30m).",
        ),
    ] = timedelta(hours=1),
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would be deleted; delete nothing.")] = False,
) -> None:
    """Delete the packs that no record needs and that are older than --grace (default 1h); safe
    while writers commit. Progress goes to stderr."""
    c: Context = ctx.obj
    with c.open() as store:
        with _activity("gc") as progress:
            report = store.gc(grace=grace, dry_run=dry_run, progress=progress)
        c.emit(report.to_dict(), lambda: _render_gc(report, grace))


def _render_gc(report: GcReport, grace: timedelta) -> None:
    verb = "would delete" if report.dry_run else "deleted"
    _say(f"{verb} {report.packs_deleted} pack(s), {_size(report.bytes_freed)}")
    _say(f"{report.packs_live} of {report.packs_total} packs are live")
    if report.packs_kept_young:
        _say(
            f"{report.packs_kept_young} unreferenced pack(s) are younger than the grace ({_age(grace)}) and stay: a "
            "commit in flight may name them; a later gc frees those that stay unreferenced"
        )


@app.command()
def stats(ctx: typer.Context) -> None:
    """What the store holds: runs, records, packs, and stored, live and garbage bytes."""
    c: Context = ctx.obj
    with c.open() as store:
        found = store.stats()
        c.emit(found.to_dict(), lambda: _render_stats(found))


def _render_stats(found: StoreStats) -> None:
    table = Table("", "", show_header=False, box=None)
    table.add_row("runs", str(found.runs))
    table.add_row("records", str(found.records))
    table.add_row("packs", str(found.packs))
    table.add_row("stored", _size(found.stored_bytes))
    table.add_row("live", _size(found.live_bytes))
    table.add_row("garbage", f"{_size(found.garbage_bytes)} (`s3ckpt gc` frees it once its grace has passed)")
    out.print(table, highlight=False)


# -- format and demo -----------------------------------------------------------------------------


@app.command()
def migrate(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would change; change nothing.")] = False,
) -> None:
    """Upgrade the store's format where that is safe, and say what changes."""
    c: Context = ctx.obj
    with c.open() as store:
        changes = store.migrate(dry_run=dry_run)

        def render() -> None:
            verb = "would change" if dry_run else "changed"
            if not changes:
                out.print(f"store {store.config.store_id} is at the current format; nothing to do")
            for line in changes:
                out.print(f"{verb}: {line}", highlight=False, markup=False)

        c.emit({"dry_run": dry_run, "changes": changes}, render)


@app.command()
def demo(
    s3: Annotated[bool, typer.Option("--s3", help="Run against a moto S3 server started for the demo.")] = False,
    steps: Annotated[int, typer.Option(min=4, max=50)] = 8,
) -> None:
    """Kill a worker with SIGKILL mid-run and resume it in a fresh process; no committed step repeats.
    Prints where the store is and the command that opens it."""
    from .demo import run_demo

    result = run_demo(use_s3=s3, steps=steps, echo=lambda m: out.print(m, highlight=False, markup=False))
    for line in result.lines:
        out.print(line, highlight=False, markup=False)
    raise typer.Exit(EXIT_OK if result.ok else EXIT_FAILED)


def open_command(url: str, key_file: str) -> str:
    """The shell command that lists the runs of a store whose key is in ``key_file``."""
    return f"S3CKPT_KEY=$(cat {shlex.quote(key_file)}) s3ckpt --url {shlex.quote(url)} runs"


def _one_line_paragraphs(text: str) -> str:
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in text.split("\n\n"))


def _reflow_help(typer_app: typer.Typer) -> None:
    # Help shows a docstring's line breaks as they are: the source's 128 columns are no terminal's.
    for info in typer_app.registered_commands:
        doc = inspect.getdoc(info.callback) if info.callback is not None else None
        if info.help is None and doc:
            info.help = _one_line_paragraphs(doc)


_reflow_help(app)
_reflow_help(key_app)


def main() -> None:
    """The ``s3ckpt`` entry point (also ``python -m s3ckpt`` and ``python -m s3ckpt.cli``)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")  # a run id with undecodable bytes must not crash a listing
    app()


if __name__ == "__main__":
    main()
