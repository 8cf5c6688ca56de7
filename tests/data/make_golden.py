"""Write a small golden store in the current format: ``python -m tests.data.make_golden <dir>``.

Every format version keeps its fixture in tests/data/format-v<N>/ forever, so that each later
version proves it still reads (and migrates) what earlier versions wrote. The key is a test key
committed beside the store; it protects nothing.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import s3ckpt

KEY = "pLp1kQYq0g1l2mBQxQm0f5s6Vd0zF0kq0Yw7p3oQ2mE="
PASSPHRASE = "passphrase:golden fixture passphrase"
ARTIFACT = bytes(range(256)) * 64  # 16 KiB, deterministic
BIG_STATE = {"rows": [{"i": i, "text": f"row {i} " * 8} for i in range(1500)]}  # > 64 KiB: stored as chunks


def expected() -> dict[str, object]:
    """What a reader must find in the golden store, whatever version wrote it."""
    return {
        "runs": ["golden/run 1", "big-state"],
        "golden/run 1": [{"step": 1, "cursor": "a"}, {"step": 2, "cursor": "b"}],
        "artifact": ARTIFACT,
        "big-state": BIG_STATE,
    }


def write(root: Path) -> None:
    if root.exists():
        shutil.rmtree(root)
    with s3ckpt.open_store(str(root), key=KEY) as store:
        store.add_key(PASSPHRASE, label="golden")
        writer = store.run("golden/run 1").claim(workflow="refund", workflow_version="1", model="m-1")
        writer.commit({"step": 1, "cursor": "a"}, meta={"note": "first"})
        writer.commit({"step": 2, "cursor": "b"}, artifacts={"report.bin": ARTIFACT})
        store.run("big-state").claim().commit(BIG_STATE)
    (root.parent / "KEY").write_text(KEY + "\n")
    (root.parent / "EXPECTED.json").write_text(json.dumps({"runs": expected()["runs"]}, indent=2) + "\n")
    for lock in root.rglob(".lock-*"):
        lock.unlink()


if __name__ == "__main__":
    write(Path(sys.argv[1]))
