"""Hostile and broken records: every one is a typed S3ckptError, never a crash or a wrong state.

The fuzzer mutates a valid record's plaintext (bit flips, cuts, splices of nasty JSON fragments),
seals each mutant with the store's key so that it reaches the decoder proper, and also feeds raw
bytes to the envelope layer. Only S3ckptError subclasses may escape; a mutant that still decodes
must still name the run and seq of its key.
"""

from __future__ import annotations

import json
import random
import time
import uuid

import pytest

import s3ckpt
from s3ckpt import codec
from s3ckpt.errors import S3ckptError
from s3ckpt.records import CommitRecord

RUN = "fuzz/run"
KEY = f"runs/{RUN}/log/1"


def _store() -> s3ckpt.Store:
    return s3ckpt.open_store(f"memory://bad-{uuid.uuid4().hex}", key=s3ckpt.generate_key())


def _valid_document(store: s3ckpt.Store) -> dict[str, object]:
    store.run(RUN).claim(model="m").commit({"cursor": 3, "items": ["a", "b"]}, artifacts={"x": b"artifact"})
    return json.loads(store.run(RUN).get(1).record.model_dump_json())


def _decode(store: s3ckpt.Store, plain: bytes, *, run_id: str = RUN, seq: int = 1) -> CommitRecord:
    flag, payload = codec.compress(plain)
    sealed = store.cipher.seal("log", f"{s3ckpt._names.encode_run_id(run_id)}/{seq}", payload, flag=flag)
    return codec.decode_record(store.cipher, sealed, run_id=run_id, seq=seq, key=KEY, segment=store.names.segment(run_id))


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("case", "mutate"),
    [
        ("truncated", lambda doc, raw: raw[: len(raw) // 2]),
        ("empty", lambda doc, raw: b""),
        ("not an object", lambda doc, raw: b"[1, 2, 3]"),
        ("wrong type seq", lambda doc, raw: json.dumps({**doc, "seq": "1"}).encode()),
        ("wrong type state", lambda doc, raw: json.dumps({**doc, "artifacts": ["x"]}).encode()),
        ("missing field", lambda doc, raw: json.dumps({k: v for k, v in doc.items() if k != "epoch"}).encode()),
        ("unexpected field", lambda doc, raw: json.dumps({**doc, "surprise": 1}).encode()),
        ("huge seq", lambda doc, raw: json.dumps({**doc, "seq": 10**30}).encode()),
        ("huge epoch", lambda doc, raw: raw.replace(b'"epoch":1', b'"epoch":' + b"9" * 5000)),
        ("deep state", lambda doc, raw: raw.replace(b'"state":{', b'"state":{"deep":' + _nested(10_000).encode() + b",")),
        ("deep meta", lambda doc, raw: raw.replace(b'"meta":{}', b'"meta":{"d":' + _nested(10_000).encode() + b"}")),
        ("invalid utf-8", lambda doc, raw: raw.replace(b'"cursor"', b'"\xff\xfe\xfd"')),
        ("lone surrogate escape", lambda doc, raw: raw.replace(b'"a"', b'"\\ud800"', 1)),
        ("nan", lambda doc, raw: raw.replace(b'"cursor":3', b'"cursor":NaN')),
        ("other run", lambda doc, raw: json.dumps({**doc, "run_id": "someone-else"}).encode()),
        ("other seq", lambda doc, raw: json.dumps({**doc, "seq": 7}).encode()),
        ("negative size", lambda doc, raw: raw.replace(b'"size":8', b'"size":-8')),
        ("path in chunk id", lambda doc, raw: _replace_chunk_id(doc, "../../config")),
        ("path in pack id", lambda doc, raw: _replace_pack(doc, "../../../etc/passwd")),
    ],
)
def test_bad_records_are_typed_errors(case: str, mutate: object) -> None:
    store = _store()
    doc = _valid_document(store)
    raw = json.dumps(doc, separators=(",", ":")).encode()
    bad = mutate(doc, raw)  # type: ignore[operator]
    assert bad != raw, f"{case}: the mutation did not apply"
    with pytest.raises(S3ckptError):
        _decode(store, bad)


def _replace_chunk_id(doc: dict[str, object], value: str) -> bytes:
    out = json.loads(json.dumps(doc))
    out["artifacts"]["x"]["chunks"][0]["id"] = value
    return json.dumps(out).encode()


def _replace_pack(doc: dict[str, object], value: str) -> bytes:
    out = json.loads(json.dumps(doc))
    out["artifacts"]["x"]["chunks"][0]["pack"] = value
    return json.dumps(out).encode()


def test_deep_state_is_refused_on_commit_and_nothing_is_written() -> None:
    store = _store()
    writer = store.run("r").claim()
    deep: object = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(s3ckpt.InvalidArtifactError):
        writer.commit({"deep": deep})
    assert store.run("r").latest() is None
    assert writer.commit({"ok": True}).seq == 1


_FRAGMENTS = [
    b"null", b"true", b"-0", b"1e999", b"18446744073709551617", b"9" * 400, b'""', b'"\\u0000"',
    b"\xff", b"\xc3\x28", b"{}", b"[]", _nested(300).encode(), b'{"a":', b'"schema_version":99',
    b'"schema_version":0', b'"kind":"deleted"', b'"prev":null', b'"seq":-1', b"NaN", b"Infinity",
]  # fmt: skip


def _mutants(seed_doc: bytes, rng: random.Random, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        data = bytearray(seed_doc)
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(5)
            at = rng.randrange(len(data) + 1)
            if op == 0 and data:
                data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
            elif op == 1:
                del data[at : at + rng.randint(1, 16)]
            elif op == 2:
                data[at:at] = rng.choice(_FRAGMENTS)
            elif op == 3:
                data = data[:at]
            else:
                data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        out.append(bytes(data))
    return out


def test_fuzz_the_decoder_with_100k_inputs() -> None:
    """Only S3ckptError escapes, and whatever decodes names the run and seq of its key."""
    store = _store()
    seed_doc = json.dumps(_valid_document(store), separators=(",", ":")).encode()
    rng = random.Random(20261129)
    started = time.monotonic()
    decoded = refused = 0
    segment = s3ckpt._names.encode_run_id(RUN)
    for mutant in _mutants(seed_doc, rng, 80_000):
        sealed = store.cipher.seal("log", f"{segment}/1", mutant, flag=codec.RAW)
        try:
            record = codec.decode_record(store.cipher, sealed, run_id=RUN, seq=1, key=KEY, segment=store.names.segment(RUN))
        except S3ckptError:
            refused += 1
        else:
            decoded += 1
            assert (record.run_id, record.seq) == (RUN, 1)
    # The envelope layer: raw bytes, truncations and bit flips of a real envelope.
    real = store.cipher.seal("log", f"{segment}/1", seed_doc, flag=codec.RAW)
    for i in range(20_000):
        blob = bytearray(real if i % 2 else rng.randbytes(rng.randrange(80)))
        if blob and i % 2:
            blob[rng.randrange(len(blob))] ^= 1 << rng.randrange(8)
            blob = blob[: rng.randrange(len(blob) + 1)] if i % 4 == 1 else blob
        with pytest.raises(S3ckptError):
            codec.decode_record(store.cipher, bytes(blob), run_id=RUN, seq=1, key=KEY, segment=store.names.segment(RUN))
        with pytest.raises(S3ckptError):
            codec.decode_head(store.cipher, bytes(blob), segment=store.names.segment(RUN), key=KEY)
    elapsed = time.monotonic() - started
    assert decoded + refused == 80_000
    assert refused > 50_000, "the mutator should mostly produce invalid records"
    print(f"fuzz: 100,000 inputs ({decoded} still valid, {refused} refused) in {elapsed:.1f} s")


def test_a_packed_chunk_without_a_length_is_refused() -> None:
    store = _store()
    doc = _valid_document(store)
    out = json.loads(json.dumps(doc))
    out["artifacts"]["x"]["chunks"][0]["length"] = None
    with pytest.raises(S3ckptError):
        _decode(store, json.dumps(out).encode())
