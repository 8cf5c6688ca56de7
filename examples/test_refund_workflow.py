"""Testing your own workflow with s3ckpt.testing: copy this file next to your code.

    pytest examples/test_refund_workflow.py

The fixtures come with s3ckpt (a pytest plugin, registered on install): ``s3ckpt_store`` (a store
on memory, a local directory and S3 on a moto server), ``moto_s3``, ``faulty`` and
``kill_and_resume``. The workflow below is the code under test; in a real project it is imported.
"""

from __future__ import annotations

from typing import Any

import pytest

import s3ckpt
from s3ckpt.testing import FaultyBackend, Report, StoreTarget, World

# -- the workflow under test -----------------------------------------------------------------


def decide(session: s3ckpt.Session, order: dict[str, Any]) -> int:
    session.spend(usd=0.01)  # inside the step that costs it: top-level code runs again on a resume
    return int(order["total"]) // 2


def refund(session: s3ckpt.Session, world: World) -> None:
    """Look the order up, decide the refund, pay it, tell the customer."""
    order = session.step("lookup", lambda: {"id": "o-42", "total": 120, "email": "ann@example.com"})
    amount = session.step("decide", decide, session, order, accept=lambda a: 0 < a <= order["total"])
    # Every effect goes through session.emit; send gets the idempotency key to pass to the provider.
    # Here the provider is the harness's World, which records deliveries outside the process.
    payment = session.emit(
        "refund", target=order["id"], payload={"amount": amount},
        send=lambda key: world.deliver("refund", key, {"amount": amount}),
    )  # fmt: skip
    session.emit(
        "email", target=order["email"], payload={"payment": payment},
        send=lambda key: world.deliver("email", key, {"payment": payment}),
    )  # fmt: skip
    session.state["refunded"] = amount


# -- the tests ---------------------------------------------------------------------------------


def test_refund_runs_on_every_backend(s3ckpt_store: s3ckpt.Store, tmp_path: Any) -> None:
    world = World(tmp_path / "world")
    for _ in range(2):  # the second run resumes and must not pay again
        with s3ckpt_store.resume("order-42", workflow="refund", workflow_version="1") as session:
            refund(session, world)
    assert [d["kind"] for d in world.deliveries()] == ["refund", "email"]


def test_refund_survives_a_kill_anywhere(tmp_path: Any, kill_and_resume: Any) -> None:
    key = s3ckpt.generate_key()
    store = StoreTarget(str(tmp_path / "store"), key)
    s3ckpt.open_store(store.url, key=key).close()
    # The workload is named "module:function" so that child processes can import it.
    report: Report = kill_and_resume(f"{__name__}:refund", store, workflow="refund", random_kills=3)
    assert report.kill_points > 10  # kill_and_resume already raised, with a diff, if any run went wrong


@pytest.mark.parametrize("s3ckpt_store", ["moto"], indirect=True)
def test_refund_on_flaky_s3(s3ckpt_store: s3ckpt.Store, faulty: Any, tmp_path: Any, s3ckpt_key: str) -> None:
    backend: FaultyBackend = faulty(s3ckpt_store.backend, rate=0.3)
    store = s3ckpt.open_store(backend=backend, key=s3ckpt_key)
    world = World(tmp_path / "world")
    for _ in range(3):
        with store.resume("order-42", workflow="refund", workflow_version="1") as session:
            refund(session, world)
    assert sum(backend.injected.values()) > 0
    assert sorted(world.delivered_keys().values()) == [1, 1]  # paid once, told once
