"""The CLI: its real entry points in subprocesses, and every command in-process (typer's
CliRunner) in every state an operator meets (no store, wrong or no key, a missing run, S3 with no
credentials, an endpoint that is down, a missing bucket), with exit codes as documented in
s3ckpt/cli.py, one line that names the fix, and never a traceback for an expected failure."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest
import typer
import typer.main
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner, Result

import s3ckpt
from s3ckpt.cli import EXIT_CONFLICT, EXIT_NO_STORE, EXIT_WRONG_KEY, _Cli, app, exit_code
from s3ckpt.errors import BucketNotFoundError, StoreNotFoundError


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", "from s3ckpt.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=120,
    )


def test_demo_on_embedded_default() -> None:
    result = _cli("demo")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "killed with SIGKILL" in result.stdout
    assert "the run finished with no committed step repeated" in result.stdout
    # It says how to open its store, and the command it prints works as printed.
    (command,) = [line.strip() for line in result.stdout.splitlines() if line.strip().startswith("S3CKPT_KEY=")]
    shell = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    opened = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=shell, timeout=120)
    assert opened.returncode == 0, opened.stderr
    assert "demo-run" in opened.stdout
    assert "finished" in opened.stdout


def test_demo_on_moto_s3() -> None:
    result = _cli("demo", "--s3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "on moto S3" in result.stdout
    assert "the run finished with no committed step repeated" in result.stdout


def test_operator_commands(tmp_path: Path) -> None:
    key = _cli("key", "new").stdout.strip()
    assert len(key) == 44
    env = {"S3CKPT_KEY": key, "S3CKPT_URL": str(tmp_path / "store")}
    assert _cli("init", env=env).returncode == 0
    with s3ckpt.open_store(str(tmp_path / "store"), key=key) as store:
        writer = store.run("order/42").claim(model="m")
        writer.commit({"step": 1})
        writer.commit({"step": 2}, artifacts={"out.txt": b"hello"})
    runs = _cli("--json", "runs", env=env)
    assert [r["run"] for r in json.loads(runs.stdout)] == ["order/42"]
    log = json.loads(_cli("--json", "log", "order/42", env=env).stdout)
    assert [(r["seq"], r["kind"]) for r in log] == [(0, "claim"), (1, "checkpoint"), (2, "checkpoint")]
    shown = json.loads(_cli("--json", "show", "order/42", env=env).stdout)
    assert shown["state"] == {"step": 2}
    assert shown["artifacts"]["out.txt"]["size"] == 5
    assert json.loads(_cli("--json", "show", "order/42", "1", env=env).stdout)["state"] == {"step": 1}

    second = s3ckpt.generate_key()
    added = json.loads(_cli("--json", "key", "add", second, "--label", "ops", env=env).stdout)
    keys = json.loads(_cli("--json", "key", "list", env={**env, "S3CKPT_KEY": second}).stdout)
    assert {k["key_id"] for k in keys} >= {added["key_id"]}
    assert _cli("key", "remove", added["key_id"], env=env).returncode == 0
    denied = _cli("runs", env={**env, "S3CKPT_KEY": second})
    assert denied.returncode == EXIT_WRONG_KEY
    assert "does not open the store" in denied.stderr
    assert second not in denied.stderr + denied.stdout
    assert key not in denied.stderr + denied.stdout


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["no-such-command"], 2, "No such command"),
        (["show"], 2, "Missing argument"),
        (["runs"], 1, "no encryption key"),
        (["--key", "not-a-key", "runs"], 1, "not a base64 key"),
        (["--key", "K" * 43 + "=", "show", "missing-run"], EXIT_NO_STORE, "no s3ckpt store"),
    ],
)
def test_errors_and_exit_codes(tmp_path: Path, args: list[str], code: int, message: str) -> None:
    env = {"S3CKPT_URL": str(tmp_path / "none"), "S3CKPT_KEY": ""}
    result = _cli(*args, env=env)
    assert result.returncode == code, result.stdout + result.stderr
    assert message in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_effects_and_resolve(tmp_path: Path) -> None:
    key = s3ckpt.generate_key()
    url = str(tmp_path / "store")
    store = s3ckpt.open_store(url, key=key)

    def lost(idempotency_key: str) -> str:
        raise TimeoutError("no answer")

    with store.resume("r", workflow="w", workflow_version="1") as session, pytest.raises(TimeoutError):
        session.emit("send-email", target="a@example.com", payload="hi", send=lost)
    env = {"S3CKPT_KEY": key, "S3CKPT_URL": url}
    listed = _cli("--json", "effects", "r", env=env)
    assert listed.returncode == 0, listed.stderr
    (effect,) = json.loads(listed.stdout)
    assert (effect["kind"], effect["status"]) == ("send-email", "unknown")
    assert _cli("resolve", "r", effect["idempotency_key"], env=env).returncode == 2  # neither --sent nor --not-sent
    settled = _cli("resolve", "r", effect["idempotency_key"], "--sent", "msg-7", env=env)
    assert settled.returncode == 0, settled.stderr
    assert "confirmed" in settled.stdout
    with store.resume("r", workflow="w", workflow_version="1") as session:
        assert session.emit("send-email", target="a@example.com", payload="hi", send=lost) == "msg-7"
    missing = _cli("resolve", "r", "s3c-nope", "--not-sent", env=env)
    assert missing.returncode == 1
    assert "no effect with idempotency key" in missing.stderr


# -- every command, in every state an operator meets: one line that names the fix --------------

RUN = "order/42"
DEAD_ENDPOINT = "http://127.0.0.1:1"

COMMANDS: dict[str, list[str]] = {
    "init": ["init"],
    "runs": ["runs"],
    "log": ["log", RUN],
    "show": ["show", RUN],
    "show seq": ["show", RUN, "{seq}"],
    "effects": ["effects", RUN],
    "resolve": ["resolve", RUN, "s3c-none", "--not-sent"],
    "restore": ["restore", RUN, "a.bin", "{out}"],
    "restore seq": ["restore", RUN, "a.bin", "{out}", "--seq", "{seq}"],
    "rollback": ["rollback", RUN, "{seq}"],
    "migrate": ["migrate", "--dry-run"],
    "verify": ["verify"],
    "verify run": ["verify", RUN, "--read-data"],
    "rm": ["rm", RUN, "--yes"],
    "prune": ["prune", "--keep-last", "1", "--run", RUN],
    "gc": ["gc", "--dry-run"],
    "stats": ["stats"],
    "key add": ["key", "add", "{new_key}"],
    "key list": ["key", "list"],
    "key remove": ["key", "remove", "0000000000000000"],
}
RUN_COMMANDS = {"log", "show", "show seq", "effects", "resolve", "restore", "restore seq", "rollback", "verify run", "rm"}
SEQ_COMMANDS = {"show seq", "restore seq", "rollback"}
NO_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": None,
    "AWS_SECRET_ACCESS_KEY": None,
    "AWS_SESSION_TOKEN": None,
    "AWS_PROFILE": None,
    "AWS_CONFIG_FILE": "/nonexistent/aws-config",
    "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent/aws-credentials",
    "AWS_EC2_METADATA_DISABLED": "true",
}


@dataclass
class State:
    """Where the operator is: what the CLI is pointed at, and what it must answer."""

    name: str
    code: int
    fixes: tuple[str, ...]
    env: dict[str, str | None]
    options: list[str] = field(default_factory=list)
    run: str = RUN
    seq: str = "1"


STATES = [
    "no store", "wrong key", "no key", "bad key", "missing run", "missing seq", "S3 no credentials", "S3 unreachable",
    "S3 no bucket",
]  # fmt: skip


def _store_with_a_run(path: Path) -> tuple[str, str]:
    key = s3ckpt.generate_key()
    with s3ckpt.open_store(str(path), key=key) as store:
        writer = store.run(RUN).claim(workflow="w", workflow_version="1")
        writer.commit({"step": 1}, artifacts={"a.bin": b"hello"})
        writer.commit({"step": 2})
    return str(path), key


@pytest.fixture
def state(request: pytest.FixtureRequest, tmp_path: Path) -> State:
    name = request.param
    base: dict[str, str | None] = {"S3CKPT_URL": None, "S3CKPT_KEY": None, "AWS_MAX_ATTEMPTS": "1"}
    if name in ("S3 no credentials", "S3 unreachable", "S3 no bucket"):
        s3 = {"S3 no credentials": DEAD_ENDPOINT, "S3 unreachable": DEAD_ENDPOINT}.get(name)
        env = {**base, "S3CKPT_KEY": s3ckpt.generate_key(), "AWS_DEFAULT_REGION": "us-east-1"}
        if name == "S3 no credentials":
            env.update(NO_CREDENTIALS)
            code, fixes = 1, ("AWS_ACCESS_KEY_ID",)
        elif name == "S3 unreachable":
            env.update({"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"})
            code, fixes = 1, ("--endpoint-url",)
        else:
            s3 = request.getfixturevalue("moto_s3").endpoint_url
            code, fixes = EXIT_NO_STORE, ("aws s3 mb",)
        bucket = f"s3://no-bucket-{uuid.uuid4().hex[:8]}/p" if name == "S3 no bucket" else "s3://bucket/p"
        return State(name, code, fixes, env, ["--url", bucket, "--endpoint-url", str(s3)])
    other_key = s3ckpt.generate_key()
    if name == "no store":
        env = {**base, "S3CKPT_URL": str(tmp_path / "none"), "S3CKPT_KEY": other_key}
        return State(name, EXIT_NO_STORE, ("s3ckpt init",), env)
    url, key = _store_with_a_run(tmp_path / "store")
    if name == "wrong key":
        return State(name, EXIT_WRONG_KEY, ("s3ckpt key",), {**base, "S3CKPT_URL": url, "S3CKPT_KEY": other_key})
    if name == "no key":
        return State(name, 1, ("s3ckpt key new",), {**base, "S3CKPT_URL": url})
    if name == "bad key":
        return State(name, 1, ("s3ckpt key new",), {**base, "S3CKPT_URL": url}, ["--key", "not-a-key"])
    env = {**base, "S3CKPT_URL": url, "S3CKPT_KEY": key}
    if name == "missing seq":
        return State(name, 1, ("s3ckpt log",), env, seq="7")
    assert name == "missing run"
    return State(name, 1, ("s3ckpt runs", "s3ckpt effects", "s3ckpt log"), env, run="missing")


def _argv(state: State, command: str, tmp_path: Path) -> list[str]:
    fill = {"out": tmp_path / "restored.bin", "new_key": s3ckpt.generate_key(), "seq": state.seq}
    return [*state.options, *(a.replace(RUN, state.run).format(**fill) for a in COMMANDS[command])]


def _invoke(argv: list[str], env: dict[str, str | None]) -> Result:
    return CliRunner().invoke(app, argv, env=env)


def assert_failed_with_one_line(result: Result, code: int, fixes: tuple[str, ...], *, as_json: bool) -> str:
    """The command failed as documented: exit ``code``, one line (or one JSON object) naming a fix."""
    shown = f"exit {result.exit_code}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(result.exception))
        raise AssertionError(f"{shown}\nan exception escaped the CLI:\n{trace}")
    assert "Traceback" not in result.stdout + result.stderr, shown
    assert result.exit_code == code, shown
    if as_json:
        error = json.loads(result.stdout)["error"]
        assert error["exit_code"] == code, shown
        message = error["message"]
        assert "error:" not in result.stderr, shown
    else:
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, shown
        assert lines[0].startswith("error: "), shown
        message = lines[0]
        assert result.stdout == "", shown
    assert any(fix in message for fix in fixes), f"the message names none of {fixes}: {message}"
    return str(message)


#: The commands that must fail in a state (every command, unless listed here).
APPLIES = {"no store": set(COMMANDS) - {"init"}, "missing run": RUN_COMMANDS, "missing seq": SEQ_COMMANDS}
CASES = [(state, command) for state in STATES for command in COMMANDS if command in APPLIES.get(state, COMMANDS)]


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
@pytest.mark.parametrize(("state", "command"), CASES, indirect=["state"])
def test_every_command_fails_with_one_line_naming_the_fix(state: State, command: str, as_json: bool, tmp_path: Path) -> None:
    argv = _argv(state, command, tmp_path)
    if as_json:
        argv.append("--json")  # after the command: accepted anywhere
    result = _invoke(argv, state.env)
    message = assert_failed_with_one_line(result, state.code, state.fixes, as_json=as_json)
    secrets = [state.env.get("S3CKPT_KEY"), *(argv[argv.index("add") + 1 :] if "add" in argv else [])]
    for secret in secrets:
        assert not secret or secret not in message, "a key was printed"


@pytest.mark.parametrize("state", ["missing run"], indirect=True)
def test_a_failed_command_changes_nothing(state: State, tmp_path: Path) -> None:
    """Refusals come before writes: a command on a missing run must not create it."""
    url, key = state.env["S3CKPT_URL"], state.env["S3CKPT_KEY"]
    assert url is not None
    assert key is not None
    for command in sorted(RUN_COMMANDS):
        _invoke(_argv(state, command, tmp_path), state.env)
    with s3ckpt.open_store(url, key=key, create=False) as store:
        assert list(store.runs()) == [RUN]


def test_exit_codes_are_distinct_per_kind_of_failure() -> None:
    cases: list[tuple[BaseException, int | None]] = [
        (StoreNotFoundError("no store"), EXIT_NO_STORE),
        (BucketNotFoundError("b"), EXIT_NO_STORE),
        (s3ckpt.DecryptionError("wrong key"), EXIT_WRONG_KEY),
        (s3ckpt.ConflictError("taken", run_id="r", seq=1), EXIT_CONFLICT),
        (s3ckpt.FencedError(run_id="r", seq=1, epoch=1, newer_epoch=2), EXIT_CONFLICT),
        (s3ckpt.RunDeletedError(run_id="r", seq=1, epoch=1, newer_epoch=2), EXIT_CONFLICT),
        (s3ckpt.IntegrityError("damaged"), 1),
        (s3ckpt.MissingKeyError(), 1),
        (PermissionError(13, "Permission denied"), 1),
        (botocore.exceptions.NoCredentialsError(), 1),
        (ValueError("a bug"), None),
    ]
    for exc, code in cases:
        assert exit_code(exc) == code, exc
    assert len({EXIT_NO_STORE, EXIT_WRONG_KEY, EXIT_CONFLICT, 0, 1, 2}) == 6


def test_a_conflict_exits_5_and_a_bug_keeps_its_traceback() -> None:
    """Through the CLI's own error handling: a fenced writer exits 5 with one line; an error that
    is not an expected failure is not disguised as one."""
    probe = typer.Typer(cls=_Cli)

    @probe.callback()
    def options(ctx: typer.Context, as_json: bool = typer.Option(False, "--json")) -> None:
        ctx.obj = argparse.Namespace(as_json=as_json)

    @probe.command()
    def fenced() -> None:
        raise s3ckpt.FencedError(run_id="r", seq=3, epoch=1, newer_epoch=2)

    @probe.command()
    def bug() -> None:
        raise ZeroDivisionError("a bug")

    for as_json in (False, True):
        result = CliRunner().invoke(probe, ["fenced", *(["--json"] if as_json else [])])
        assert_failed_with_one_line(result, EXIT_CONFLICT, ("Claim the run again",), as_json=as_json)
    result = CliRunner().invoke(probe, ["bug"])
    assert isinstance(result.exception, ZeroDivisionError)


def test_help_documents_the_exit_codes() -> None:
    result = _invoke(["--help"], {})
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    for phrase in ("3 no store here", "4 wrong key", "5 conflict"):
        assert phrase in text


def test_usage_errors_exit_2_and_come_as_json_with_json() -> None:
    plain = _invoke(["show"], {})
    assert plain.exit_code == 2
    assert "Missing argument" in plain.stdout + plain.stderr
    as_json = _invoke(["show", "--json"], {})
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout)["error"]["exit_code"] == 2
    for argv in (["show", RUN, "-1"], ["show", RUN, "1.5"], ["rollback", RUN, "x"], ["demo", "--steps", "0"]):
        result = _invoke(argv, {})
        assert result.exit_code == 2, argv
        assert "Traceback" not in result.stdout + result.stderr


# -- generated command lines: whatever is typed, no traceback ----------------------------------


@pytest.fixture(scope="module")
def fuzz_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("cli-fuzz")
    url, key = _store_with_a_run(root / "store")
    (root / "dir").mkdir()
    (root / "file").write_bytes(b"x")
    env: dict[str, str | None] = {
        "S3CKPT_URL": url,
        "S3CKPT_KEY": key,
        "AWS_ENDPOINT_URL": DEAD_ENDPOINT,
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": None,
    }
    paths = [str(root / "out" / "x"), str(root / "dir"), str(root / "missing" / "x"), "", str(root / "file" / "below")]
    return {"root": root, "env": env, "key": key, "paths": paths}


def _command_lines(paths: list[str], key: str) -> st.SearchStrategy[list[str]]:
    text = st.text(max_size=12)
    run = st.one_of(st.sampled_from([RUN, "missing", "", "\ud800", "a\x00b"]), text)
    seq = st.sampled_from(["0", "1", "2", "-1", "1.5", "1e3", "99999999999999999999999", "x", ""])
    keys = st.sampled_from(
        [key, s3ckpt.generate_key(), "", "not-a-key", "env:S3CKPT_NOPE", "passphrase:short", "kms:", "kms:alias/x"]
    )
    path = st.sampled_from(paths)
    durations = st.sampled_from(["7d", "12h", "30m", "2h", "1d12h", "0s", "5x", "", "-1h", "99999999999w", "1.5h"])
    urls = st.sampled_from(
        ["memory://fuzz", "foo://x", "gs://b/x", "s3://", "s3://bucket/p", "/etc/passwd", "file:///etc/passwd"]
    )
    command = st.one_of(
        st.tuples(st.just("runs")),
        st.tuples(st.just("log"), run),
        st.tuples(st.just("show"), run),
        st.tuples(st.just("show"), run, seq),
        st.tuples(st.just("effects"), run),
        st.tuples(st.just("resolve"), run, text, st.sampled_from(["--not-sent", "--sent"])),
        st.tuples(st.just("restore"), run, text, path),
        st.tuples(st.just("restore"), run, st.just("a.bin"), path, st.just("--seq"), seq),
        st.tuples(st.just("rollback"), run, seq),
        st.tuples(st.just("migrate"), st.sampled_from(["--dry-run", "--force", "x"])),
        st.tuples(st.just("key"), st.sampled_from(["add", "list", "remove", "rotate"]), text),
        st.tuples(st.just("init")),
        st.tuples(st.just("demo"), st.just("--steps"), st.sampled_from(["0", "-1", "1000", "x", "1.5"])),
        st.tuples(st.sampled_from(["verify", "", "--", "-x", "rm", "stats"])),
        st.tuples(st.just("verify"), run, st.sampled_from(["--read-data", "--json", "x"])),
        st.tuples(st.just("rm"), run, st.sampled_from(["--yes", "-y", "--json", ""])),
        st.tuples(st.just("prune"), st.sampled_from(["--keep-last", "--keep-within", "--run"]), st.one_of(seq, durations, run)),
        st.tuples(st.just("gc"), st.sampled_from(["--grace", "--dry-run"]), durations),
        st.tuples(st.just("runs"), st.sampled_from(["--status", "--workflow"]), st.sampled_from(["running", "w", "x", ""])),
        st.tuples(st.just("show"), run, st.just("--full")),
    )
    option = st.one_of(st.tuples(st.just("--url"), urls), st.tuples(st.just("--key"), keys), st.tuples(st.just("--json")))
    options = st.lists(option, max_size=2)
    return st.tuples(options, command, st.booleans()).map(
        lambda t: [*(a for opt in t[0] for a in opt), *t[1], *(["--json"] if t[2] else [])]
    )


CLI_EXAMPLES = int(os.environ.get("S3CKPT_CLI_EXAMPLES", "60"))


@settings(max_examples=CLI_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_generated_command_lines_never_print_a_traceback(fuzz_env: dict[str, Any], data: st.DataObject) -> None:
    argv = data.draw(_command_lines(fuzz_env["paths"], fuzz_env["key"]), label="argv")
    result = _invoke(argv, fuzz_env["env"])
    shown = f"{argv!r}: exit {result.exit_code}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        trace = "".join(traceback.format_exception(result.exception))
        raise AssertionError(f"{shown}\nan exception escaped the CLI:\n{trace}")
    assert "Traceback" not in result.stdout + result.stderr, shown
    assert result.exit_code in (0, 1, 2, EXIT_NO_STORE, EXIT_WRONG_KEY, EXIT_CONFLICT), shown
    event(f"exit {result.exit_code}")
    if result.exit_code not in (0, 2):
        if "--json" in argv[: argv.index("--") if "--" in argv else len(argv)]:
            printed = json.loads(result.stdout)
            if "verify" in argv and printed.get("ok") is False:  # its report, not an error
                return
            assert printed["error"]["exit_code"] == result.exit_code, shown
        else:
            lines = result.stderr.strip().splitlines()
            assert len(lines) == 1, shown
            assert lines[0].startswith("error: "), shown


# -- the real entry points, in real processes ----------------------------------------------------


@pytest.mark.parametrize("entry", [["-m", "s3ckpt"], ["-m", "s3ckpt.cli"]], ids=["python -m s3ckpt", "python -m s3ckpt.cli"])
def test_python_dash_m_runs_the_cli(entry: list[str], tmp_path: Path) -> None:
    version = subprocess.run([sys.executable, *entry, "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"s3ckpt {s3ckpt.__version__}"
    env = {**os.environ, "S3CKPT_URL": str(tmp_path / "none"), "S3CKPT_KEY": s3ckpt.generate_key()}
    missing = subprocess.run([sys.executable, *entry, "runs", "--json"], capture_output=True, text=True, env=env, timeout=60)
    assert missing.returncode == EXIT_NO_STORE, missing.stdout + missing.stderr
    assert "s3ckpt init" in json.loads(missing.stdout)["error"]["message"]


def _cli_bytes(*args: str | bytes, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "s3ckpt", *args], capture_output=True, env={**os.environ, **env}, timeout=120)


def test_real_processes_fail_with_one_line(tmp_path: Path) -> None:
    url, key = _store_with_a_run(tmp_path / "store")
    no_aws = {k: v for k, v in NO_CREDENTIALS.items() if v is not None}
    clean = {k: v for k, v in os.environ.items() if k not in NO_CREDENTIALS}
    cases: list[tuple[list[str | bytes], dict[str, str], int, str]] = [
        (["show", RUN], {"S3CKPT_URL": str(tmp_path / "none"), "S3CKPT_KEY": key}, EXIT_NO_STORE, "s3ckpt init"),
        (["show", RUN], {"S3CKPT_URL": url, "S3CKPT_KEY": s3ckpt.generate_key()}, EXIT_WRONG_KEY, "s3ckpt key"),
        (["show", "missing"], {"S3CKPT_URL": url, "S3CKPT_KEY": key}, 1, "s3ckpt runs"),
        (["show", b"\xff\xfe"], {"S3CKPT_URL": url, "S3CKPT_KEY": key}, 1, "run id"),
        (["restore", RUN, "a.bin", str(tmp_path)], {"S3CKPT_URL": url, "S3CKPT_KEY": key}, 1, "give a file path"),
        (
            ["--url", "s3://bucket/p", "--endpoint-url", DEAD_ENDPOINT, "runs"],
            {**no_aws, "S3CKPT_KEY": key, "AWS_DEFAULT_REGION": "us-east-1"},
            1,
            "AWS_ACCESS_KEY_ID",
        ),
    ]
    for args, env, code, fix in cases:
        result = subprocess.run(
            [sys.executable, "-m", "s3ckpt", *args],
            capture_output=True,
            env={**clean, **env},
            timeout=120,
        )
        stderr = result.stderr.decode("utf-8", "backslashreplace")
        assert result.returncode == code, (args, result.stdout, stderr)
        assert "Traceback" not in stderr, (args, stderr)
        lines = stderr.strip().splitlines()
        assert len(lines) == 1, (args, stderr)
        assert lines[0].startswith("error: "), (args, stderr)
        assert fix in lines[0], (args, stderr)
        assert key not in stderr


def test_run_ids_that_are_not_ascii_list_and_show(tmp_path: Path) -> None:
    url, key = _store_with_a_run(tmp_path / "store")
    with s3ckpt.open_store(url, key=key) as store:
        store.run("café/☃").claim().commit({"x": "ü"})
    env = {"S3CKPT_URL": url, "S3CKPT_KEY": key}
    listed = _cli_bytes("runs", "--quiet", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "café/☃" in listed.stdout.decode("utf-8").splitlines()
    table = _cli_bytes("runs", env=env)
    assert table.returncode == 0, table.stderr
    assert "café/☃" in table.stdout.decode("utf-8")
    shown = _cli_bytes("show", "café/☃", "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["state"] == {"x": "ü"}


def test_every_command_a_message_names_exists() -> None:
    """A message that tells the user to run `s3ckpt X` names a command this CLI has."""
    root = typer.main.get_command(app)
    assert isinstance(root, _Cli)
    named: dict[str, set[str]] = {}
    package = Path(s3ckpt.__file__).parent
    for source in sorted(package.rglob("*.py")):
        for match in re.finditer(r"`s3ckpt ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", source.read_text()):
            command, sub = match.groups()
            group = root.commands.get(command)
            exists = group is not None and (sub is None or not hasattr(group, "commands") or sub in group.commands)
            if not exists:
                named.setdefault(match.group(0).lstrip("`"), set()).add(str(source.relative_to(package.parent)))
    assert not named, f"messages name commands that do not exist: {named}"
