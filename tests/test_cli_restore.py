"""Restores: ``restore_artifact(progress=)``, the CLI's progress bar, and the temporary files of a
restore killed with SIGKILL, which the next restore to the same path removes (and only those)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

import s3ckpt
from s3ckpt import checkpoint, cli

SIZE = 3 << 20  # about 24 chunks at the default 128 KiB average


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, bytes]:
    url = str(tmp_path_factory.mktemp("restore") / "store")
    key = s3ckpt.generate_key()
    data = os.urandom(SIZE)
    with s3ckpt.open_store(url, key=key) as store:
        store.run("r").claim().commit({}, artifacts={"big": data})
    return url, key, data


def _latest(store: s3ckpt.Store) -> s3ckpt.Checkpoint:
    cp = store.run("r").latest()
    assert cp is not None
    return cp


def _temps(target: Path) -> list[Path]:
    return sorted(target.parent.glob(f".{target.name}.s3ckpt-*"))


def test_progress_reports_every_byte_in_order(saved: tuple[str, str, bytes], tmp_path: Path) -> None:
    url, key, data = saved
    calls: list[tuple[int, int]] = []
    with s3ckpt.open_store(url, key=key) as store:
        _latest(store).restore_artifact("big", tmp_path / "out", progress=lambda done, total: calls.append((done, total)))
    assert (tmp_path / "out").read_bytes() == data
    assert calls[0] == (0, SIZE)
    assert calls[-1] == (SIZE, SIZE)
    assert len(calls) > 3
    assert [done for done, _ in calls] == sorted(done for done, _ in calls)
    assert {total for _, total in calls} == {SIZE}


def test_a_progress_callback_that_raises_leaves_nothing(saved: tuple[str, str, bytes], tmp_path: Path) -> None:
    url, key, _ = saved

    def stop(done: int, total: int) -> None:
        if done > 0:
            raise KeyboardInterrupt

    with s3ckpt.open_store(url, key=key) as store:
        with pytest.raises(KeyboardInterrupt):
            _latest(store).restore_artifact("big", tmp_path / "out", progress=stop)
        with pytest.raises(s3ckpt.S3ckptError, match="progress is a callable"):
            _latest(store).restore_artifact("big", tmp_path / "out", progress=42)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


KILLED_RESTORE = textwrap.dedent(
    """
    import os, signal, sys
    import s3ckpt

    url, key, out = sys.argv[1:4]

    def die(done, total):
        if done > 0:  # the temporary file holds part of the artifact now
            os.kill(os.getpid(), signal.SIGKILL)

    with s3ckpt.open_store(url, key=key) as store:
        store.run("r").latest().restore_artifact("big", out, progress=die)
    """
)


def test_a_killed_restore_leaves_a_temporary_file_the_next_restore_removes(
    saved: tuple[str, str, bytes], tmp_path: Path
) -> None:
    url, key, data = saved
    target = tmp_path / "model.bin"
    killed = subprocess.run([sys.executable, "-c", KILLED_RESTORE, url, key, str(target)], capture_output=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    (left,) = _temps(target)
    assert not target.exists()
    assert left.name.startswith(f".model.bin{checkpoint.TEMP_MARK}")
    host, pid, _ = left.name[len(f".model.bin{checkpoint.TEMP_MARK}") :].split("-")
    assert host == checkpoint._host_tag()
    assert int(pid) != os.getpid()
    with s3ckpt.open_store(url, key=key) as store:
        _latest(store).restore_artifact("big", target)
    assert target.read_bytes() == data
    assert _temps(target) == []


def _temp(target: Path, *, host: str | None = None, pid: int, age: float = 0.0) -> Path:
    name = checkpoint.temp_name(target.name)
    if host is not None or pid != os.getpid():
        prefix = f".{target.name}{checkpoint.TEMP_MARK}"
        _, _, rand = name[len(prefix) :].split("-")
        name = f"{prefix}{host or checkpoint._host_tag()}-{pid}-{rand}"
    path = target.with_name(name)
    path.write_bytes(b"partial")
    if age:
        os.utime(path, (time.time() - age, time.time() - age))
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # reaped: no process has it (until the kernel reuses it)


def test_only_stale_temporary_files_are_removed(tmp_path: Path) -> None:
    target = tmp_path / "out"
    day = checkpoint.STALE_AFTER
    mine = _temp(target, pid=os.getpid())  # a restore running in this process
    live = _temp(target, pid=os.getppid())  # another live process on this host
    dead = _temp(target, pid=_dead_pid())
    elsewhere = _temp(target, host="0badc0de", pid=_dead_pid())  # another host's: its pids mean nothing here
    abandoned = _temp(target, host="0badc0de", pid=1, age=day + 60)
    old_style = target.with_name(".out.s3ckpt-0123abcd")
    old_style.write_bytes(b"partial")
    os.utime(old_style, (time.time() - day - 60, time.time() - day - 60))
    young_old_style = target.with_name(".out.s3ckpt-4567abcd")
    young_old_style.write_bytes(b"partial")
    others = [target.with_name(n) for n in (".out.s3ckpt-tmp-nothex", "out.s3ckpt-tmp-0badc0de-1-00000000", ".other")]
    for path in others:
        path.write_bytes(b"not ours")
        os.utime(path, (time.time() - day - 60, time.time() - day - 60))
    removed = checkpoint.remove_stale_temps(target)
    assert sorted(removed) == sorted([dead, abandoned, old_style])
    for path in (mine, live, elsewhere, young_old_style, *others):
        assert path.exists(), path.name


def test_the_cli_shows_a_bar_for_a_large_restore_on_a_terminal(
    saved: tuple[str, str, bytes], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, key, data = saved
    screen = io.StringIO()
    monkeypatch.setattr(cli, "err", Console(file=screen, force_terminal=True, width=100))
    monkeypatch.setattr(cli, "PROGRESS_MIN_BYTES", 1 << 20)
    env = {"S3CKPT_URL": url, "S3CKPT_KEY": key}
    result = CliRunner().invoke(cli.app, ["restore", "r", "big", str(tmp_path / "out")], env=env)
    assert result.exit_code == 0, result.stdout + result.stderr
    assert "restored big (3.0 MiB) of r@1" in result.stdout
    assert (tmp_path / "out").read_bytes() == data
    assert "MiB" in screen.getvalue()  # the bar's byte counts
    as_json = CliRunner().invoke(cli.app, ["--json", "restore", "r", "big", str(tmp_path / "again")], env=env)
    assert as_json.exit_code == 0
    assert json.loads(as_json.stdout)["bytes"] == SIZE  # the bar went to stderr
