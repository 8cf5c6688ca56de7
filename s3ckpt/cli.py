"""The operator CLI: ``s3ckpt [--url URL] [--key KEY] [--json] COMMAND``.

Exit status: 0 when all is well, 1 when a command fails (or verify finds a problem), 2 for a
usage error. Errors print one line that says what is wrong and what to do; never a key.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from .crypto import generate_key
from .errors import S3ckptError
from .store import Store, open_store

app = typer.Typer(add_completion=False, no_args_is_help=True, help="Durable, encrypted checkpoints in object storage.")
key_app = typer.Typer(no_args_is_help=True, help="Manage the keys that open a store.")
app.add_typer(key_app, name="key")

out = Console(soft_wrap=True)
err = Console(stderr=True)
T = TypeVar("T")


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
            out.print_json(json.dumps(data, default=str))
        else:
            render()


@app.callback()
def main_options(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Option(help="Store URL (default $S3CKPT_URL, else ./.s3ckpt).")] = None,
    key: Annotated[str | None, typer.Option(help="Key, env:NAME, passphrase:..., or kms:<id> (default $S3CKPT_KEY).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    endpoint_url: Annotated[str | None, typer.Option(help="S3 endpoint (or set AWS_ENDPOINT_URL).")] = None,
    region: Annotated[str | None, typer.Option(help="AWS region.")] = None,
) -> None:
    ctx.obj = Context(url, key, as_json, endpoint_url, region)


def _guard(fn: Callable[[], T]) -> T:
    try:
        return fn()
    except S3ckptError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False, markup=True)
        raise typer.Exit(1) from None


@app.command()
def init(ctx: typer.Context) -> None:
    """Create a store at --url (a local directory by default) with --key."""
    c: Context = ctx.obj

    def go() -> None:
        with c.open(create=True) as store:
            c.emit(
                {"url": store.backend.url, "store_id": store.config.store_id},
                lambda: out.print(f"store {store.config.store_id} ready at {store.backend.url}"),
            )

    _guard(go)


@key_app.command("new")
def key_new() -> None:
    """Print a new random key (base64 of 32 bytes). Store it in a secret manager."""
    print(generate_key())


@key_app.command("add")
def key_add(
    ctx: typer.Context,
    new_key: Annotated[str, typer.Argument(help="The key to add: base64, env:NAME, passphrase:..., kms:<id>.")],
    label: Annotated[str, typer.Option(help="A note to tell keys apart.")] = "",
) -> None:
    """Let another key open the store (run with a key that already opens it)."""
    c: Context = ctx.obj

    def go() -> None:
        with c.open() as store:
            key_id = store.add_key(new_key, label=label)
            c.emit({"key_id": key_id}, lambda: out.print(f"added key {key_id}"))

    _guard(go)


@key_app.command("list")
def key_list(ctx: typer.Context) -> None:
    """List the key files of the store."""
    c: Context = ctx.obj

    def go() -> None:
        with c.open() as store:
            keys = store.key_files()
            rows = [
                {"key_id": k.key_id, "kind": k.kind, "label": k.label, "created_at": k.created_at.isoformat()} for k in keys
            ]

            def render() -> None:
                table = Table("key id", "kind", "label", "created")
                for r in rows:
                    table.add_row(r["key_id"], r["kind"], r["label"], r["created_at"])
                out.print(table)

            c.emit(rows, render)

    _guard(go)


@key_app.command("remove")
def key_remove(ctx: typer.Context, key_id: str) -> None:
    """Remove a key file (never the last one)."""
    c: Context = ctx.obj

    def go() -> None:
        with c.open() as store:
            store.remove_key(key_id)
            c.emit({"removed": key_id}, lambda: out.print(f"removed key {key_id}"))

    _guard(go)


@app.command()
def runs(ctx: typer.Context) -> None:
    """List the runs in the store."""
    c: Context = ctx.obj

    def go() -> None:
        with c.open() as store:
            ids = list(store.runs())

            def render() -> None:
                for run_id in ids:
                    out.print(run_id, highlight=False, markup=False)

            c.emit(ids, render)

    _guard(go)


@app.command("log")
def log_cmd(ctx: typer.Context, run: str) -> None:
    """Every record of RUN (claims and checkpoints), oldest first, hash chain checked."""
    c: Context = ctx.obj

    def go() -> None:
        with c.open() as store:
            records = list(store.run(run).records())
            if not records:
                raise typer.Exit(_not_found(run))
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
                    table.add_row(str(r.seq), r.kind, str(r.epoch), r.writer_id, created, ", ".join(sorted(r.artifacts)))
                out.print(table)

            c.emit(rows, render)

    _guard(go)


def _not_found(run: str) -> int:
    err.print(f"error: no run {run!r} in this store; `s3ckpt runs` lists them", highlight=False, markup=False)
    return 1


@app.command()
def show(ctx: typer.Context, run: str, seq: Annotated[int | None, typer.Argument()] = None) -> None:
    """The decoded checkpoint SEQ of RUN (default: the latest)."""
    c: Context = ctx.obj

    def go() -> None:
        with c.open() as store:
            cp = store.run(run).latest() if seq is None else store.run(run).get(seq)
            if cp is None:
                raise typer.Exit(_not_found(run))
            data = cp.to_dict()
            c.emit(data, lambda: out.print_json(json.dumps(data, default=str)))

    _guard(go)


@app.command()
def effects(ctx: typer.Context, run: str) -> None:
    """The effects ledger of RUN: each effect's status (unknown ones need `s3ckpt resolve`)."""
    c: Context = ctx.obj

    def go() -> None:
        with c.open() as store:
            cp = store.run(run).latest()
            if cp is None:
                raise typer.Exit(_not_found(run))
            rows = [e.model_dump(mode="json") for e in cp.effects]

            def render() -> None:
                table = Table("idempotency key", "kind", "target", "status", "reference", "intent at")
                for e in cp.effects:
                    status = "unknown (pending)" if e.status == "pending" else e.status
                    table.add_row(
                        e.idempotency_key,
                        e.kind,
                        json.dumps(e.target),
                        status,
                        json.dumps(e.reference),
                        e.intent_at.isoformat(),
                    )
                out.print(table)

            c.emit(rows, render)

    _guard(go)


@app.command()
def resolve(
    ctx: typer.Context,
    run: str,
    effect: Annotated[str, typer.Argument(help="The effect's idempotency key (`s3ckpt effects RUN`).")],
    sent: Annotated[str | None, typer.Option("--sent", help="It happened: the provider's reference.")] = None,
    not_sent: Annotated[bool, typer.Option("--not-sent", help="It did not happen: it may be sent again.")] = False,
) -> None:
    """Settle an effect whose outcome is unknown, after checking with the provider."""
    c: Context = ctx.obj
    if (sent is None) == (not not_sent):
        err.print("error: give exactly one of --sent REF or --not-sent", highlight=False, markup=False)
        raise typer.Exit(2)

    def go() -> None:
        with c.open() as store:
            settled = store.run(run).resolve_effect(effect, sent=sent is not None, reference=sent)
            data = settled.model_dump(mode="json")
            c.emit(data, lambda: out.print(f"{effect}: {settled.status}", highlight=False, markup=False))

    _guard(go)


@app.command()
def migrate(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would change; change nothing.")] = False,
) -> None:
    """Upgrade the store's format where that is safe, and say what changes."""
    c: Context = ctx.obj

    def go() -> None:
        with c.open() as store:
            changes = store.migrate(dry_run=dry_run)

            def render() -> None:
                verb = "would change" if dry_run else "changed"
                if not changes:
                    out.print(f"store {store.config.store_id} is at the current format; nothing to do")
                for line in changes:
                    out.print(f"{verb}: {line}", highlight=False, markup=False)

            c.emit({"dry_run": dry_run, "changes": changes}, render)

    _guard(go)


@app.command()
def demo(
    s3: Annotated[bool, typer.Option("--s3", help="Run against a moto S3 server started for the demo.")] = False,
    steps: Annotated[int, typer.Option(min=4, max=50)] = 8,
) -> None:
    """Kill a worker with SIGKILL mid-run and resume it in a fresh process; no committed step repeats."""
    from .demo import run_demo

    result = _guard(lambda: run_demo(use_s3=s3, steps=steps, echo=lambda m: out.print(m, highlight=False)))
    for line in result.lines:
        out.print(line, highlight=False, markup=False)
    raise typer.Exit(0 if result.ok else 1)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover
        sys.exit(130)
