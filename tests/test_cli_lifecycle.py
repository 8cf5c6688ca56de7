"""The lifecycle commands (verify, rm, prune, gc, stats) and the operator views (runs, show): each
command's happy path, its --json shape (before or after the command), its exit status, and one
line naming the fix for every expected failure. In-process with typer's CliRunner, on a local
directory store whose files the tests age or damage directly."""

from __future__ import annotations

import io
import json
import os
import secrets
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

import s3ckpt
from s3ckpt import cli
from s3ckpt.blobs import stored_at

HOURS = 3600


@dataclass
class Store:
    url: str
    key: str
    root: Path

    @property
    def env(self) -> dict[str, str | None]:
        return {"S3CKPT_URL": self.url, "S3CKPT_KEY": self.key}

    def open(self) -> s3ckpt.Store:
        return s3ckpt.open_store(self.url, key=self.key)

    def age(self, seconds: float) -> None:
        """Every object older by ``seconds``, as the storage's clock sees it (mtime on a local store)."""
        for path in self.root.rglob("*"):
            if path.is_file():
                stat = path.stat()
                os.utime(path, (stat.st_atime - seconds, stat.st_mtime - seconds))


def _lost(idempotency_key: str) -> str:
    raise TimeoutError("no answer")


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """Four runs: one finished with artifacts, one running, one with an unknown effect, one to delete."""
    key = s3ckpt.generate_key()
    url = str(tmp_path / "store")
    with s3ckpt.open_store(url, key=key) as st:
        writer = st.run("order/42").claim(workflow="refund", workflow_version="3")
        for i in range(5):
            writer.commit({"i": i}, artifacts={"a.bin": os.urandom(40_000 + i)})
        writer.commit({"i": 5}, meta={"status": "finished"})
        st.run("train-7").claim(workflow="train", workflow_version="1").commit({"epoch": 1})
        st.run("doomed").claim(workflow="train", workflow_version="1").commit({}, artifacts={"w": os.urandom(30_000)})
        with st.resume("mail", workflow="notify", workflow_version="2") as session, pytest.raises(TimeoutError):
            session.emit("send-email", target="a@example.com", payload="hi", send=_lost)
    return Store(url, key, tmp_path / "store")


def invoke(argv: list[str], env: dict[str, str | None], *, stdin: str | None = None) -> Result:
    result = CliRunner().invoke(cli.app, argv, env=env, input=stdin)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(result.exception))
        raise AssertionError(f"an exception escaped the CLI for {argv}:\n{trace}")
    assert "Traceback" not in result.stdout + result.stderr
    return result


def as_json(argv: list[str], env: dict[str, str | None], *, code: int = 0, after: bool = False) -> object:
    """The command's JSON output, with --json after the command (``after``) or before it."""
    result = invoke([*argv, "--json"] if after else ["--json", *argv], env)
    assert result.exit_code == code, f"exit {result.exit_code}: {result.stdout}{result.stderr}"
    return json.loads(result.stdout)


def one_error_line(result: Result, code: int, fix: str) -> str:
    shown = f"exit {result.exit_code}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert result.exit_code == code, shown
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: "), shown
    assert fix in line, shown
    return line


# -- verify ---------------------------------------------------------------------------------------

VERIFY_KEYS = {"ok", "read_data", "runs_checked", "records_checked", "packs_checked", "chunks_read", "problems"}
VERIFY_KEYS |= {"orphans", "unknown_effects"}


@pytest.mark.parametrize("after", [False, True], ids=["json-before", "json-after"])
def test_verify_a_sound_store(store: Store, after: bool) -> None:
    report = as_json(["verify", "--read-data"], store.env, after=after)
    assert isinstance(report, dict)
    assert set(report) == VERIFY_KEYS
    assert report["ok"] is True
    assert report["problems"] == []
    assert report["runs_checked"] == 4
    assert report["chunks_read"] > 0
    (effect,) = report["unknown_effects"]
    assert (effect["run"], effect["kind"], effect["status"]) == ("mail", "send-email", "unknown")
    text = invoke(["verify"], store.env)
    assert text.exit_code == 0, text.stdout
    assert "ok: every record decodes" in text.stdout
    assert "effects whose outcome is unknown" in text.stdout
    assert "s3ckpt resolve" in text.stdout


def test_verify_one_run_and_a_missing_one(store: Store) -> None:
    report = as_json(["verify", "order/42"], store.env)
    assert isinstance(report, dict)
    assert report["runs_checked"] == 1
    assert report["orphans"] == []  # only a whole-store verify can tell garbage
    one_error_line(invoke(["verify", "nope"], store.env), 1, "s3ckpt runs")


def test_verify_exits_1_and_names_what_is_missing(store: Store) -> None:
    with store.open() as st:
        latest = st.run("order/42").latest()
        assert latest is not None
        (chunk, *_) = latest.record.artifacts["a.bin"].chunks
    key = stored_at(chunk)
    (store.root / key).unlink()
    text = invoke(["verify"], store.env)
    line = one_error_line(text, 1, "verify found ")
    assert "docs/operations.md" in line
    assert key in text.stdout  # the report, on stdout, names the pack
    report = as_json(["verify"], store.env, code=1, after=True)
    assert isinstance(report, dict)
    assert report["ok"] is False
    assert report["problems"]
    assert all(p["run"] == "order/42" and p["key"] == key for p in report["problems"])


def _orphan(store: Store) -> str:
    """A pack that no record names, as an aborted commit leaves one."""
    (pack, *_) = sorted(store.root.glob("packs/*/*"))
    name = secrets.token_hex(32)
    orphan = store.root / "packs" / name[:2] / name
    orphan.parent.mkdir(exist_ok=True)
    orphan.write_bytes(pack.read_bytes())
    return f"packs/{name[:2]}/{name}"


def test_verify_lists_orphans_apart_and_stays_ok(store: Store) -> None:
    orphan = _orphan(store)
    report = as_json(["verify"], store.env)
    assert isinstance(report, dict)
    assert report["ok"] is True
    assert report["orphans"] == [orphan]
    text = invoke(["verify"], store.env)
    assert text.exit_code == 0
    assert "1 orphaned pack(s)" in text.stdout
    assert orphan in text.stdout
    assert "s3ckpt gc" in text.stdout


def test_verify_progress_goes_to_stderr(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "PROGRESS_EVERY", 0.0)  # a line per step, as a long run gets every 10 s
    result = invoke(["--json", "verify"], store.env)
    assert result.exit_code == 0
    assert json.loads(result.stdout)["ok"] is True  # stdout holds the report alone
    assert "verify: run 1/4" in result.stderr


def test_verify_on_a_terminal_shows_a_spinner(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    screen = io.StringIO()
    monkeypatch.setattr(cli, "err", Console(file=screen, force_terminal=True, width=100))
    result = invoke(["verify"], store.env)
    assert result.exit_code == 0
    assert "ok: every record decodes" in result.stdout


# -- rm -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("after", [False, True], ids=["json-before", "json-after"])
def test_rm_deletes_and_fences(store: Store, after: bool) -> None:
    with store.open() as st:
        writer = st.run("train-7").claim(workflow="train", workflow_version="1")
        assert as_json(["rm", "train-7", "--yes"], store.env, after=after) == {"run": "train-7", "deleted_seq": 3}
        with pytest.raises(s3ckpt.RunDeletedError):
            writer.commit({"epoch": 2})
    rows = as_json(["runs", "--status", "deleted"], store.env)
    assert [r["run"] for r in rows] == ["train-7"]  # type: ignore[attr-defined]
    shown = invoke(["show", "train-7"], store.env)
    one_error_line(shown, 1, "was deleted")
    restored = invoke(["restore", "train-7", "x", str(store.root.parent / "out")], store.env)
    one_error_line(restored, 1, "was deleted")


def test_rm_asks_on_a_terminal(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "_interactive", lambda: True)
    declined = invoke(["rm", "train-7"], store.env, stdin="n\n")
    assert declined.exit_code == 1
    # CliRunner echoes the answer to stdout; on a terminal it ends the question's line.
    question, error = declined.stderr.strip().split("[y/N]:")
    assert "Delete run 'train-7'" in question
    assert error.startswith("error: ")
    assert "pass --yes" in error
    with store.open() as st:
        assert st.run("train-7").latest() is not None
    confirmed = invoke(["rm", "train-7"], store.env, stdin="y\n")
    assert confirmed.exit_code == 0, confirmed.stderr
    assert "deleted run train-7" in confirmed.stdout
    with store.open() as st:
        assert st.run("train-7").latest() is None


def test_rm_without_a_terminal_needs_yes(store: Store) -> None:
    result = invoke(["rm", "train-7"], store.env)
    assert result.exit_code == 2
    assert "--yes" in result.stdout + result.stderr
    error = as_json(["rm", "train-7"], store.env, code=2)
    assert isinstance(error, dict)
    assert "--yes" in error["error"]["message"]
    with store.open() as st:
        assert st.run("train-7").latest() is not None


def test_rm_of_a_missing_run(store: Store) -> None:
    one_error_line(invoke(["rm", "nope", "--yes"], store.env), 1, "s3ckpt runs")


# -- prune ----------------------------------------------------------------------------------------

PRUNE_KEYS = {"dry_run", "runs_checked", "records_pruned", "pruned", "kept", "skipped"}


@pytest.mark.parametrize("after", [False, True], ids=["json-before", "json-after"])
def test_prune_dry_run_then_for_real(store: Store, after: bool) -> None:
    argv = ["prune", "--keep-last", "2", "--run", "order/42"]
    planned = as_json([*argv, "--dry-run"], store.env, after=after)
    assert isinstance(planned, dict)
    assert set(planned) == PRUNE_KEYS
    assert planned["dry_run"] is True
    assert [p["seq"] for p in planned["pruned"]] == [1, 2, 3, 4]
    assert [k["seq"] for k in planned["kept"]] == [5, 6]
    with store.open() as st:
        assert [r.kind for r in st.run("order/42").records()].count("pruned") == 0
    done = as_json(argv, store.env, after=after)
    assert isinstance(done, dict)
    assert done["records_pruned"] == 4
    with store.open() as st:
        assert [r.kind for r in st.run("order/42").records()].count("pruned") == 4
    text = invoke(["prune", "--keep-within", "7d"], store.env)
    assert text.exit_code == 0, text.stderr
    assert "removed 0 record(s) of 4 run(s)" in text.stdout


def test_prune_text_names_runs_and_what_is_next(store: Store) -> None:
    text = invoke(["prune", "--keep-last", "1", "--run", "order/42", "--run", "nope"], store.env)
    assert text.exit_code == 0, text.stderr
    assert "order/42" in text.stdout
    assert "1-5" in text.stdout
    assert "left alone: nope: no such run" in text.stdout
    assert "s3ckpt gc" in text.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["prune"], "--keep-last N or --keep-within"),
        (["prune", "--keep-within", "7x"], "not a duration"),
        (["prune", "--keep-within", ""], "not a duration"),
        (["prune", "--keep-within", "999999999w"], "too long"),
        (["prune", "--keep-within", "99999999999w"], "not a duration"),
        (["prune", "--keep-last", "-1"], "--keep-last"),
        (["gc", "--grace", "soon"], "not a duration"),
    ],
)
def test_bad_policies_and_durations_are_usage_errors(store: Store, argv: list[str], message: str) -> None:
    text = invoke(argv, store.env)
    assert text.exit_code == 2
    assert message in text.stdout + text.stderr
    error = as_json(argv, store.env, code=2, after=True)
    assert isinstance(error, dict)
    assert error["error"]["exit_code"] == 2


def test_durations() -> None:
    from datetime import timedelta

    assert cli.parse_duration("7d") == timedelta(days=7)
    assert cli.parse_duration("1d12h") == timedelta(days=1, hours=12)
    assert cli.parse_duration(" 30M ") == timedelta(minutes=30)
    assert cli.parse_duration("2w45s") == timedelta(weeks=2, seconds=45)
    for bad in ("", "7", "d", "1.5h", "-1h", "1h 2m", "1y"):
        with pytest.raises(Exception, match="not a duration"):
            cli.parse_duration(bad)


# -- gc and stats ---------------------------------------------------------------------------------

GC_KEYS = {"dry_run", "packs_total", "packs_live", "packs_deleted", "bytes_freed", "packs_kept_young", "deleted"}
STATS_KEYS = {"runs", "records", "packs", "stored_bytes", "live_bytes", "garbage_bytes"}


def test_gc_keeps_young_garbage_and_frees_old(store: Store) -> None:
    assert invoke(["rm", "doomed", "--yes"], store.env).exit_code == 0
    young = as_json(["gc"], store.env)
    assert isinstance(young, dict)
    assert set(young) == GC_KEYS
    assert young["packs_deleted"] == 0
    store.age(3 * HOURS)  # past the default grace of 1h, by the storage's clock
    before = as_json(["stats"], store.env, after=True)
    assert isinstance(before, dict)
    assert set(before) == STATS_KEYS
    assert before["garbage_bytes"] > 0
    planned = as_json(["gc", "--dry-run"], store.env, after=True)
    assert isinstance(planned, dict)
    assert planned["packs_deleted"] >= 1
    assert all((store.root / key).exists() for key in planned["deleted"])
    text = invoke(["gc", "--grace", "2h"], store.env)
    assert text.exit_code == 0, text.stderr
    assert f"deleted {planned['packs_deleted']} pack(s)" in text.stdout
    assert not any((store.root / key).exists() for key in planned["deleted"])
    after = as_json(["stats"], store.env)
    assert isinstance(after, dict)
    assert after["stored_bytes"] == before["stored_bytes"] - planned["bytes_freed"]
    assert as_json(["verify", "--read-data"], store.env)["ok"] is True  # type: ignore[index]


def test_gc_refuses_a_grace_within_the_commit_deadline(store: Store) -> None:
    one_error_line(invoke(["gc", "--grace", "5m"], store.env), 1, "commit_deadline")


def test_stats_text(store: Store) -> None:
    text = invoke(["stats"], store.env)
    assert text.exit_code == 0, text.stderr
    for word in ("runs", "records", "packs", "stored", "live", "garbage"):
        assert word in text.stdout


# -- runs and show --------------------------------------------------------------------------------

RUN_KEYS = {"run", "status", "last_seq", "last_update", "workflow", "workflow_version", "checkpoint_seq"}
RUN_KEYS |= {"unknown_effects", "problem"}


def test_runs_table_statuses_and_filters(store: Store) -> None:
    assert invoke(["rm", "doomed", "--yes"], store.env).exit_code == 0
    rows = as_json(["runs"], store.env)
    assert isinstance(rows, list)
    assert all(set(r) == RUN_KEYS for r in rows)
    by_run = {r["run"]: r for r in rows}
    assert {run: r["status"] for run, r in by_run.items()} == {
        "order/42": "finished",
        "train-7": "running",
        "mail": "unknown-effects",
        "doomed": "deleted",
    }
    assert (by_run["order/42"]["last_seq"], by_run["order/42"]["checkpoint_seq"]) == (6, 6)
    assert (by_run["order/42"]["workflow"], by_run["order/42"]["workflow_version"]) == ("refund", "3")
    assert by_run["mail"]["unknown_effects"] == 1
    filtered = as_json(["runs", "--workflow", "train", "--status", "running"], store.env, after=True)
    assert [r["run"] for r in filtered] == ["train-7"]  # type: ignore[attr-defined]
    both = as_json(["runs", "--status", "finished", "--status", "deleted"], store.env)
    assert sorted(r["run"] for r in both) == ["doomed", "order/42"]  # type: ignore[attr-defined]
    text = invoke(["runs"], store.env)
    assert text.exit_code == 0
    for word in ("finished", "running", "unknown-effects", "deleted", "refund", "train"):
        assert word in text.stdout
    quiet = invoke(["runs", "-q", "--status", "finished"], store.env)
    assert quiet.stdout.splitlines() == ["order/42"]
    bad = invoke(["runs", "--status", "sleeping"], store.env)
    assert bad.exit_code == 2


def test_runs_reports_a_damaged_run_and_lists_the_others(store: Store) -> None:
    (record,) = store.root.glob("runs/train-7/log/*1")
    record.write_bytes(b"garbage")
    rows = as_json(["runs"], store.env)
    by_run = {r["run"]: r for r in rows}  # type: ignore[attr-defined]
    assert by_run["train-7"]["status"] == "damaged"
    assert by_run["train-7"]["problem"]
    assert by_run["order/42"]["status"] == "finished"


def test_show_summarises_artifacts_and_full_lists_chunks(store: Store) -> None:
    shown = as_json(["show", "order/42", "5"], store.env)
    assert isinstance(shown, dict)
    summary = shown["artifacts"]["a.bin"]
    assert summary["size"] == 40_004
    assert summary["chunks"] >= 1
    assert summary["packs"] >= 1
    full = as_json(["show", "order/42", "5", "--full"], store.env, after=True)
    assert isinstance(full, dict)
    chunks = full["artifacts"]["a.bin"]["chunks"]
    assert isinstance(chunks, list)
    assert len(chunks) == summary["chunks"]
    text = invoke(["show", "order/42", "5"], store.env)
    assert text.exit_code == 0
    assert "a.bin" in text.stdout
    assert "39.1 KiB" in text.stdout
    assert chunks[0]["id"] not in text.stdout
    assert chunks[0]["id"] in invoke(["show", "order/42", "5", "--full"], store.env).stdout


def test_show_of_a_run_with_no_checkpoint_says_so(tmp_path: Path) -> None:
    key = s3ckpt.generate_key()
    url = str(tmp_path / "store")
    with s3ckpt.open_store(url, key=key) as st:
        st.run("fresh").claim()
    one_error_line(invoke(["show", "fresh"], {"S3CKPT_URL": url, "S3CKPT_KEY": key}), 1, "no checkpoint yet")


# -- keys: the passphrase prompt ------------------------------------------------------------------

PASSPHRASE = "correct horse battery"


@pytest.fixture
def passphrase_store(tmp_path: Path) -> Store:
    url = str(tmp_path / "store")
    with s3ckpt.open_store(url, key=f"passphrase:{PASSPHRASE}") as st:
        st.run("r").claim().commit({"x": 1})
    return Store(url, f"passphrase:{PASSPHRASE}", tmp_path / "store")


@pytest.mark.parametrize("key", ["prompt", "passphrase:"])
def test_a_passphrase_is_asked_for(passphrase_store: Store, key: str) -> None:
    env: dict[str, str | None] = {"S3CKPT_URL": passphrase_store.url, "S3CKPT_KEY": None}
    result = invoke(["--json", "--key", key, "runs", "-q"], env, stdin=PASSPHRASE + "\n")
    assert result.exit_code == 0, result.stdout + result.stderr
    assert [r["run"] for r in json.loads(result.stdout)] == ["r"]  # the prompt went to stderr
    assert "Passphrase for" in result.stderr
    assert PASSPHRASE not in result.stdout + result.stderr  # hidden input
    wrong = invoke(["--key", key, "runs"], env, stdin="not the passphrase\n")
    assert wrong.exit_code == cli.EXIT_WRONG_KEY
    in_env = invoke(["runs", "-q"], {**env, "S3CKPT_KEY": key}, stdin=PASSPHRASE + "\n")
    assert in_env.exit_code == 0, in_env.stderr


def test_no_key_on_a_terminal_prompts(passphrase_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    env: dict[str, str | None] = {"S3CKPT_URL": passphrase_store.url, "S3CKPT_KEY": None}
    assert invoke(["runs"], env).exit_code == 1  # no terminal: the usual "no encryption key"
    monkeypatch.setattr(cli, "_interactive", lambda: True)
    result = invoke(["runs", "-q"], env, stdin=PASSPHRASE + "\n")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.split() == ["r"]  # and a blank line: CliRunner echoes hidden input's newline


def test_no_passphrase_typed_is_one_error_line(passphrase_store: Store) -> None:
    env: dict[str, str | None] = {"S3CKPT_URL": passphrase_store.url, "S3CKPT_KEY": None}
    result = invoke(["--key", "prompt", "runs"], env, stdin="")
    assert result.exit_code == 1
    assert "no passphrase was typed" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")


def test_init_and_key_add_ask_twice(tmp_path: Path) -> None:
    env: dict[str, str | None] = {"S3CKPT_URL": str(tmp_path / "new"), "S3CKPT_KEY": None}
    mismatch = invoke(["--key", "prompt", "init"], env, stdin="first passphrase\nsecond passphrase\n\n")
    assert mismatch.exit_code != 0
    assert not (tmp_path / "new" / "config").exists()
    made = invoke(["--key", "prompt", "init"], env, stdin=f"{PASSPHRASE}\n{PASSPHRASE}\n")
    assert made.exit_code == 0, made.stderr
    added = invoke(["--key", "prompt", "key", "add", "prompt"], env, stdin=f"{PASSPHRASE}\nanother one!\nanother one!\n")
    assert added.exit_code == 0, added.stderr
    with s3ckpt.open_store(str(tmp_path / "new"), key="passphrase:another one!") as st:
        assert len(st.key_files()) == 2


# -- shell completion and help --------------------------------------------------------------------


def test_shell_completion_is_offered_and_documented() -> None:
    result = CliRunner().invoke(cli.app, ["--show-completion", "bash"], prog_name="s3ckpt")
    assert result.exit_code == 0
    assert "complete" in result.stdout
    assert "_S3CKPT_COMPLETE" in result.stdout
    helped = CliRunner().invoke(cli.app, ["--help"])
    text = " ".join(helped.stdout.split())
    assert "--install-completion" in text
    assert "--key prompt" in text
    for phrase in ("3 no store here", "4 wrong key", "5 conflict or fenced"):
        assert phrase in text


def test_completion_completes_commands_and_statuses() -> None:
    env = {"_S3CKPT_COMPLETE": "complete_bash", "COMP_WORDS": "s3ckpt --json ve", "COMP_CWORD": "2"}
    result = CliRunner().invoke(cli.app, [], prog_name="s3ckpt", env=env)
    assert result.stdout.split() == ["verify"]
    env.update(COMP_WORDS="s3ckpt runs --status ", COMP_CWORD="3")
    result = CliRunner().invoke(cli.app, [], prog_name="s3ckpt", env=env)
    assert set(result.stdout.split()) == {s.value for s in cli.RunStatus}


# -- exit codes of real commands ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "code", "fix"),
    [
        (["rollback", "mail", "1"], 1, "was deleted"),
        (["effects", "mail"], 1, "was deleted"),
        (["resolve", "mail", "s3c-", "--not-sent"], cli.EXIT_CONFLICT, "another run id"),
    ],
)
def test_a_deleted_run_is_refused_before_anything_is_written(store: Store, argv: list[str], code: int, fix: str) -> None:
    assert invoke(["rm", "mail", "--yes"], store.env).exit_code == 0
    one_error_line(invoke(argv, store.env), code, fix)
    with store.open() as st:
        assert [r.kind for r in st.run("mail").records()][-1] == "deleted"


def test_a_fenced_commit_exits_5(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim that loses to another writer between the check and the write (a race no test can
    time through the CLI, so the core raises it here) exits 5 with one line."""

    def fenced(self: object, seq: int) -> None:
        raise s3ckpt.FencedError(run_id="train-7", seq=2, epoch=1, newer_epoch=2)

    monkeypatch.setattr(s3ckpt.Run, "rollback", fenced)
    one_error_line(invoke(["rollback", "train-7", "1"], store.env), cli.EXIT_CONFLICT, "train-7")
    error = as_json(["rollback", "train-7", "1"], store.env, code=cli.EXIT_CONFLICT, after=True)
    assert error["error"]["type"] == "FencedError"  # type: ignore[index]


def test_ctrl_c_exits_130(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(self: s3ckpt.Store) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(s3ckpt.Store, "stats", interrupted)
    for argv in (["stats"], ["stats", "--json"]):
        result = CliRunner().invoke(cli.app, argv, env=store.env)
        assert result.exit_code == cli.EXIT_INTERRUPTED, argv
        assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("env", "code"),
    [
        ({"S3CKPT_KEY": s3ckpt.generate_key()}, cli.EXIT_WRONG_KEY),
        ({"S3CKPT_URL": "/nonexistent/store"}, cli.EXIT_NO_STORE),
    ],
    ids=["wrong key", "no store"],
)
@pytest.mark.parametrize("command", [["verify"], ["rm", "x", "--yes"], ["prune", "--keep-last", "1"], ["gc"], ["stats"]])
def test_lifecycle_commands_exit_with_the_documented_codes(
    store: Store, env: dict[str, str], code: int, command: list[str]
) -> None:
    result = invoke(command, {**store.env, **env})
    assert result.exit_code == code, result.stdout + result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("error: ")
