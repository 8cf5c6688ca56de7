"""Golden stores: every format version's fixture must stay readable by every later version."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import s3ckpt

from .data import make_golden

DATA = Path(__file__).parent / "data"
FIXTURES = sorted(p.name for p in DATA.glob("format-v*"))


def test_there_is_a_fixture_for_every_format_version() -> None:
    from s3ckpt.records import FORMAT_VERSION

    assert [f"format-v{v}" for v in range(1, FORMAT_VERSION + 1)] == FIXTURES


@pytest.mark.parametrize("fixture", FIXTURES)
@pytest.mark.parametrize("key", [make_golden.KEY, make_golden.PASSPHRASE])
def test_golden_store_reads_back(fixture: str, key: str, tmp_path: Path) -> None:
    root = tmp_path / "store"
    shutil.copytree(DATA / fixture / "store", root)
    assert (DATA / fixture / "KEY").read_text().strip() == make_golden.KEY
    expected = make_golden.expected()
    with s3ckpt.open_store(str(root), key=key, create=False) as store:
        assert sorted(store.runs()) == sorted(expected["runs"])  # type: ignore[arg-type]
        run = store.run("golden/run 1")
        assert [c.state for c in run.history()] == expected["golden/run 1"]
        latest = run.latest()
        assert latest is not None
        assert latest.read_artifact("report.bin") == expected["artifact"]
        assert latest.provenance["workflow_version"] == "1"
        big = store.run("big-state").latest()
        assert big is not None
        assert big.state == expected["big-state"]
        # The old store accepts new commits, and they read back.
        store.run("golden/run 1").claim().commit({"step": 3})
        again = store.run("golden/run 1").latest()
        assert again is not None
        assert again.state == {"step": 3}


def test_migrate_upgrades_a_format_1_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    shutil.copytree(DATA / "format-v1" / "store", root)
    before = (root / "config").read_bytes()
    with s3ckpt.open_store(str(root), key=make_golden.KEY, create=False) as store:
        planned = store.migrate(dry_run=True)
        assert (root / "config").read_bytes() == before  # a dry run changes nothing
        assert any("config: format 1 -> 2" in line for line in planned)
        assert any("record(s) of schema 1" in line for line in planned)
        assert store.migrate() == planned
    with s3ckpt.open_store(str(root), key=make_golden.KEY, create=False) as store:
        assert store.config.version == 2
        assert not any("config" in line for line in store.migrate(dry_run=True))
        latest = store.run("golden/run 1").latest()
        assert latest is not None
        assert latest.read_artifact("report.bin") == make_golden.expected()["artifact"]


def test_migrate_cli_dry_run(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    root = tmp_path / "store"
    shutil.copytree(DATA / "format-v1" / "store", root)
    args = [sys.executable, "-c", "from s3ckpt.cli import main; main()", "--url", str(root), "--key", make_golden.KEY]
    result = subprocess.run([*args, "--json", "migrate", "--dry-run"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["dry_run"] is True
    assert any("format 1 -> 2" in line for line in report["changes"])
    assert json.loads((root / "config").read_text())["version"] == 1
