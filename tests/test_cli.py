"""The CLI through its real entry point, in subprocesses, with exit codes as documented."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import s3ckpt


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
    assert json.loads(runs.stdout) == ["order/42"]
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
    assert denied.returncode == 1
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
        (["--key", "K" * 43 + "=", "show", "missing-run"], 1, "no s3ckpt store"),
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
