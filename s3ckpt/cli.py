"""The operator CLI: ``s3ckpt [--url URL] [--key KEY] [--json] COMMAND``.

Errors print one line, ``error: <what is wrong>; <what to do>``, on stderr (never a key, never a
traceback for an expected failure); with ``--json`` (before or after the command) they are one
JSON object on stdout instead: ``{"error": {"type": ..., "message": ..., "exit_code": ...}}``.

Exit status:

====  ==========================================================================================
0     all is well
1     the command failed (a missing run, a bad argument value, a storage or network error, ...)
2     usage error: an unknown command or option, a missing or malformed argument
3     no store here: nothing at the URL yet (``s3ckpt init`` creates it), or the bucket is missing
4     wrong key: the key does not open this store (``s3ckpt key list`` shows the kinds it takes)
5     conflict: another writer took the seq, or claimed the run (fenced), or the run was deleted
130   interrupted (Ctrl-C)
====  ==========================================================================================
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from .crypto import generate_key
from .errors import ConflictError, DecryptionError, RunNotFoundError, S3ckptError, StoreNotFoundError
from .log import Run
from .store import Store, open_store

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NO_STORE = 3
EXIT_WRONG_KEY = 4
EXIT_CONFLICT = 5

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
            if code is None:
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


app = typer.Typer(
    cls=_Cli,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Durable, encrypted checkpoints in object storage. Exit status: 0 ok, 1 failed, 2 usage error, "
    "3 no store here, 4 wrong key, 5 conflict or fenced.",
)
key_app = typer.Typer(no_args_is_help=True, help="Manage the keys that open a store.")
app.add_typer(key_app, name="key")

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


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
        return open_store(self.url, key=self.key, create=create, **options)

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
    key: Annotated[str | None, typer.Option(help="Key, env:NAME, passphrase:..., or kms:<id> (default $S3CKPT_KEY).")] = None,
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


def _no_run(run: str) -> NoReturn:
    raise RunNotFoundError(f"no run {run!r} in this store; `s3ckpt runs` lists them")


def _existing_run(store: Store, run: str) -> Run:
    """The run, known to exist: "no such run" says which runs there are, before a seq is looked up."""
    handle = store.run(run)
    if not handle.exists():
        _no_run(run)
    return handle


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
    new_key: Annotated[str, typer.Argument(help="The key to add: base64, env:NAME, passphrase:..., kms:<id>.")],
    label: Annotated[str, typer.Option(help="A note to tell keys apart.")] = "",
) -> None:
    """Let another key open the store (run with a key that already opens it)."""
    c: Context = ctx.obj
    with c.open() as store:
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
                table.add_row(r["key_id"], r["kind"], _printable(r["label"]), r["created_at"])
            out.print(table)

        c.emit(rows, render)


@key_app.command("remove")
def key_remove(ctx: typer.Context, key_id: str) -> None:
    """Remove a key file (never the last one)."""
    c: Context = ctx.obj
    with c.open() as store:
        store.remove_key(key_id)
        c.emit({"removed": key_id}, lambda: out.print(f"removed key {_printable(key_id)}", markup=False))


@app.command()
def runs(ctx: typer.Context) -> None:
    """List the runs in the store."""
    c: Context = ctx.obj
    with c.open() as store:
        ids = list(store.runs())

        def render() -> None:
            for run_id in ids:
                out.print(_printable(run_id), highlight=False, markup=False)

        c.emit(ids, render)


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
                created = r.created_at.isoformat()
                names = _printable(", ".join(sorted(r.artifacts)))
                table.add_row(str(r.seq), r.kind, str(r.epoch), r.writer_id, created, names)
            out.print(table)

        c.emit(rows, render)


Seq = Annotated[int, typer.Argument(min=0, help="A sequence number (`s3ckpt log RUN` lists them).")]


@app.command()
def show(ctx: typer.Context, run: str, seq: Annotated[int | None, typer.Argument(min=0)] = None) -> None:
    """The decoded checkpoint SEQ of RUN (default: the latest)."""
    c: Context = ctx.obj
    with c.open() as store:
        handle = _existing_run(store, run)
        cp = handle.latest() if seq is None else handle.get(seq)
        if cp is None:
            _no_run(run)
        data = cp.to_dict()
        c.emit(data, lambda: out.print_json(json.dumps(data, default=str), ensure_ascii=True))


@app.command()
def effects(ctx: typer.Context, run: str) -> None:
    """The effects ledger of RUN: each effect's status (unknown ones need `s3ckpt resolve`)."""
    c: Context = ctx.obj
    with c.open() as store:
        cp = store.run(run).latest()
        if cp is None:
            _no_run(run)
        rows = [e.model_dump(mode="json") for e in cp.effects]

        def render() -> None:
            table = Table("idempotency key", "kind", "target", "status", "reference", "intent at")
            for e in cp.effects:
                status = "unknown (pending)" if e.status == "pending" else e.status
                table.add_row(
                    _printable(e.idempotency_key),
                    _printable(e.kind),
                    json.dumps(e.target),
                    status,
                    json.dumps(e.reference),
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
                    f"{settled.idempotency_key}: {settled.status}. The run was claimed: a worker still running {run!r} "
                    "is fenced (it stops at its next commit); resume the run to go on.",
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
    """Write ARTIFACT of RUN's latest checkpoint (or --seq N) to PATH, every chunk verified."""
    c: Context = ctx.obj
    with c.open() as store:
        handle = _existing_run(store, run)
        cp = handle.latest() if seq is None else handle.get(seq)
        if cp is None:
            _no_run(run)
        cp.restore_artifact(artifact, path)
        data = {"run": run, "seq": cp.seq, "artifact": artifact, "path": path, "bytes": cp.artifacts[artifact]}
        c.emit(
            data,
            lambda: out.print(
                _printable(f"restored {artifact} ({data['bytes']} bytes) of {run}@{cp.seq} to {path}"), markup=False
            ),
        )


@app.command()
def rollback(ctx: typer.Context, run: str, seq: Seq) -> None:
    """Append a checkpoint that restores checkpoint SEQ of RUN (history is kept). This claims the
    run, so a live writer of it is fenced. Lists the effects confirmed after SEQ: compensate them."""
    c: Context = ctx.obj
    with c.open() as store:
        undone = _existing_run(store, run).rollback(seq)
        rows = [e.model_dump(mode="json") for e in undone]

        def render() -> None:
            out.print(_printable(f"{run} rolled back to checkpoint {seq}"), markup=False)
            for e in undone:
                out.print(
                    _printable(f"compensate: {e.kind} to {json.dumps(e.target)} (reference {json.dumps(e.reference)})"),
                    markup=False,
                )

        c.emit({"run": run, "rolled_back_to": seq, "compensate": rows}, render)


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
    """Kill a worker with SIGKILL mid-run and resume it in a fresh process; no committed step repeats."""
    from .demo import run_demo

    result = run_demo(use_s3=s3, steps=steps, echo=lambda m: out.print(m, highlight=False))
    for line in result.lines:
        out.print(line, highlight=False, markup=False)
    raise typer.Exit(EXIT_OK if result.ok else EXIT_FAILED)


def main() -> None:
    """The ``s3ckpt`` entry point (also ``python -m s3ckpt`` and ``python -m s3ckpt.cli``)."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")  # a run id with undecodable bytes must not crash a listing
    app()


if __name__ == "__main__":
    main()
