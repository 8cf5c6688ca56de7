"""langgraph-checkpoint-conformance against S3ckptSaver, on a local directory and on moto's S3 server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

# No importorskip: the dev extra installs LangGraph, and a missing install must fail, not skip.
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import BASE_CAPABILITIES, EXTENDED_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport, ProgressCallbacks

import s3ckpt
from s3ckpt.integrations.langgraph import S3ckptSaver
from s3ckpt.testing.plugin import S3Bucket


def _run(store: s3ckpt.Store, name: str) -> CapabilityReport:
    @checkpointer_test(name=name)
    async def factory() -> AsyncGenerator[S3ckptSaver, None]:
        yield S3ckptSaver(store)

    failures: list[str] = []

    def on_result(capability: str, test: str, passed: bool, error: str | None) -> None:
        if not passed:
            failures.append(f"{capability}.{test}:\n{error}")

    report = asyncio.run(validate(factory, progress=ProgressCallbacks(on_test_result=on_result)))
    assert not failures, "\n".join(failures)
    return report


def _counts(report: CapabilityReport) -> tuple[int, int, int, int]:
    base = [report.results[c.value] for c in BASE_CAPABILITIES]
    extended = [report.results[c.value] for c in EXTENDED_CAPABILITIES]
    return (
        sum(r.tests_passed for r in base),
        sum(r.tests_failed for r in base),
        sum(r.tests_passed for r in extended),
        sum(r.tests_failed for r in extended),
    )


def _check(report: CapabilityReport) -> None:
    assert report.passed_all_base(), report.to_dict()
    assert report.passed_all(), report.to_dict()
    assert all(report.results[c.value].detected for c in EXTENDED_CAPABILITIES)
    base_passed, base_failed, ext_passed, ext_failed = _counts(report)
    print(f"conformance: base {base_passed} passed, {base_failed} failed; extended {ext_passed} passed, {ext_failed} failed")
    assert (base_failed, ext_failed) == (0, 0)
    assert base_passed >= 58
    assert ext_passed >= 23


def test_conformance_local_directory(tmp_path: Path) -> None:
    with s3ckpt.open_store(str(tmp_path / "store"), key=s3ckpt.generate_key()) as store:
        _check(_run(store, "S3ckptSaver[local]"))


def test_conformance_moto_server(moto_s3: S3Bucket) -> None:
    with s3ckpt.open_store(
        moto_s3.url, key=s3ckpt.generate_key(), endpoint_url=moto_s3.endpoint_url, region="us-east-1"
    ) as store:
        _check(_run(store, "S3ckptSaver[moto]"))
