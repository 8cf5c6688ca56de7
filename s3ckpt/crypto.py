"""Authenticated encryption of every object, and keyed content ids.

One random 32-byte master key per store. From it, HKDF derives independent keys for object
encryption, content ids, the config's key check and the chunker's gear seed.

Each pack (and each record) is sealed under its own AES-256-GCM subkey,
``HMAC-SHA256(object_key, seed)`` for a fresh random 16-byte seed; the chunks of a pack take the
nonces 0, 1, 2, ... under that subkey. A subkey seals at most one pack, so GCM's limit of 2^32
messages per key never comes into play however many objects the store holds: the bound is a seed
collision, negligible below 2^48 packs.
The associated data binds the store id, the object kind and its name (run and seq, or blob id), so
an object copied to another key, run, seq or store fails authentication.

Content ids are keyed BLAKE3 of the plaintext: equal chunks dedupe, and nobody without the key
can test whether a store holds a known plaintext.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import itertools
import os
import struct
import threading

import blake3
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ._names import BlobId
from .errors import DAMAGE_FIX, ConfigurationError, IntegrityError

MASTER_KEY_SIZE = 32
_MAGIC_V1 = b"S3C\x01"  # format 1: the compression flag was the first plaintext byte
_MAGIC = b"S3C\x02"  # format 2: the flag sits in the header, authenticated as associated data
_SALT_SIZE = 24  # format 2: a 16-byte subkey seed, then an 8-byte counter
_SEED_SIZE = 16
_NONCE_PAD = bytes(4)
_ZERO_NONCE = bytes(12)
_TAG_SIZE = 16
HEADER_SIZE = len(_MAGIC) + 1 + _SALT_SIZE
ENVELOPE_OVERHEAD = HEADER_SIZE + _TAG_SIZE


def sealed_size(payload_size: int) -> int:
    return payload_size + ENVELOPE_OVERHEAD


def generate_key() -> str:
    """A new random key, as the base64 text that ``open_store(key=...)`` and ``S3CKPT_KEY`` take."""
    return base64.b64encode(os.urandom(MASTER_KEY_SIZE)).decode("ascii")


def decode_raw_key(text: str) -> bytes | None:
    """The 32 bytes of a base64 key, or None if ``text`` is not one (never echoes the text)."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == MASTER_KEY_SIZE else None


def hkdf(key: bytes, info: bytes, *, salt: bytes | None = None, length: int = 32) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(key)


class Sealer:
    """One subkey and a counter: envelopes sealed by one Sealer never repeat a nonce."""

    def __init__(self, seed: bytes, aead: AESGCM) -> None:
        self.seed = seed
        self.aead = aead
        self._counter = itertools.count()
        self._lock = threading.Lock()

    def next_counter(self) -> bytes:
        with self._lock:
            return next(self._counter).to_bytes(8, "big")


class Cipher:
    """Seals and opens the objects of one store."""

    def __init__(self, master_key: bytes, store_id: str) -> None:
        if len(master_key) != MASTER_KEY_SIZE:
            raise ConfigurationError("a master key is 32 bytes")
        self.store_id = store_id
        self._object_key = hkdf(master_key, b"s3ckpt/v1 object encryption")
        self._id_key = hkdf(master_key, b"s3ckpt/v1 content id")
        self._check_key = hkdf(master_key, b"s3ckpt/v1 config check")
        self._name_key = hkdf(master_key, b"s3ckpt/v1 name digest")
        #: The key of keyed run names (``run_names="keyed"``).
        self.run_name_key = hkdf(master_key, b"s3ckpt/v1 run names")
        seed_bytes = hkdf(master_key, b"s3ckpt/v1 chunker seed", length=8)
        # pyfastcdc takes a seed that fits a signed 64-bit integer.
        self.chunker_seed: int = struct.unpack(">Q", seed_bytes)[0] >> 2

    def _ad(self, kind: str, name: str, flag: int | None) -> bytes:
        version = b"s3ckpt/v1\0" if flag is None else b"s3ckpt/v2\0"
        ad = version + self.store_id.encode() + b"\0" + kind.encode() + b"\0" + name.encode()
        return ad if flag is None else ad + b"\0" + bytes([flag])

    @functools.lru_cache(maxsize=256)  # noqa: B019 - a Cipher lives as long as its store
    def _subkey(self, seed: bytes) -> AESGCM:
        return AESGCM(hmac.digest(self._object_key, seed, "sha256"))

    def sealer(self) -> Sealer:
        """A run of envelopes under one fresh subkey: what a pack is sealed with."""
        seed = os.urandom(_SEED_SIZE)
        return Sealer(seed, self._subkey(seed))

    def seal(self, kind: str, name: str, payload: bytes | memoryview, *, flag: int = 0) -> bytes:
        out = bytearray(sealed_size(len(payload)))
        self.seal_into(kind, name, payload, flag, memoryview(out), self.sealer())
        return bytes(out)

    def seal_into(self, kind: str, name: str, payload: bytes | memoryview, flag: int, out: memoryview, sealer: Sealer) -> None:
        """Write the envelope of ``payload`` into ``out`` (exactly ``sealed_size(len(payload))`` bytes),
        without an intermediate copy: packs are built this way."""
        counter = sealer.next_counter()
        out[: len(_MAGIC)] = _MAGIC
        out[len(_MAGIC)] = flag
        out[len(_MAGIC) + 1 : len(_MAGIC) + 1 + _SEED_SIZE] = sealer.seed
        out[len(_MAGIC) + 1 + _SEED_SIZE : HEADER_SIZE] = counter
        sealer.aead.encrypt_into(counter + _NONCE_PAD, payload, self._ad(kind, name, flag), out[HEADER_SIZE:])

    def _envelope(self, sealed: bytes | memoryview, where: str, key: str | None) -> tuple[int | None, int, AESGCM, bytes]:
        """``(flag, header size, aead, nonce)`` of an envelope; flag None for format 1."""
        magic = bytes(sealed[: len(_MAGIC)])
        legacy = magic == _MAGIC_V1
        header = len(_MAGIC) + _SALT_SIZE if legacy else HEADER_SIZE
        if len(sealed) < header + _TAG_SIZE or not (legacy or magic == _MAGIC):
            raise IntegrityError(f"{where} is not an s3ckpt object (truncated or overwritten); {DAMAGE_FIX}", key=key)
        salt = bytes(sealed[header - _SALT_SIZE : header])
        if legacy:  # format 1: a subkey per object from the whole salt, zero nonce
            return None, header, AESGCM(hmac.digest(self._object_key, salt, "sha256")), _ZERO_NONCE
        return sealed[len(_MAGIC)], header, self._subkey(salt[:_SEED_SIZE]), salt[_SEED_SIZE:] + _NONCE_PAD

    @staticmethod
    def _tampered(where: str, key: str | None) -> IntegrityError:
        return IntegrityError(
            f"{where} failed authentication: it was modified, truncated, or moved from another "
            f"key, run or store. Do not trust it; {DAMAGE_FIX}.",
            key=key,
        )

    def open(self, kind: str, name: str, sealed: bytes | memoryview, *, key: str | None = None) -> tuple[int, bytes]:
        """The ``(flag, payload)`` of an envelope; IntegrityError if it fails authentication."""
        where = key or f"{kind} {name}"
        flag, header, aead, nonce = self._envelope(sealed, where, key)
        try:
            # A view, not a slice: slicing bytes would copy the whole ciphertext once more.
            plain = aead.decrypt(nonce, memoryview(sealed)[header:], self._ad(kind, name, flag))
        except InvalidTag:
            raise self._tampered(where, key) from None
        if flag is None:  # format 1
            if not plain:
                raise IntegrityError(f"{where} is empty inside its envelope", key=key)
            return plain[0], plain[1:]
        return flag, plain

    def open_into(
        self, kind: str, name: str, sealed: bytes | memoryview, out: memoryview, *, key: str | None = None
    ) -> tuple[int, bytes | memoryview]:
        """Like :meth:`open`, but a format-2 payload is decrypted into ``out`` (at least
        ``len(sealed)`` bytes) and returned as a view of it: a caller that reuses ``out``
        allocates nothing per object. Format-1 envelopes take the allocating path."""
        where = key or f"{kind} {name}"
        flag, header, aead, nonce = self._envelope(sealed, where, key)
        if flag is None:
            return self.open(kind, name, sealed, key=key)
        target = out[: len(sealed) - header - _TAG_SIZE]
        try:
            aead.decrypt_into(nonce, memoryview(sealed)[header:], self._ad(kind, name, flag), target)
        except InvalidTag:
            raise self._tampered(where, key) from None
        return flag, target

    def content_id(self, data: bytes | memoryview) -> BlobId:
        return BlobId(blake3.blake3(data, key=self._id_key).hexdigest())

    def name_digest(self, name: str) -> str:
        """A short keyed digest of a name that redaction changed: two secrets that redact alike
        stay apart, and nobody without the key can test a guess against it."""
        return hmac.new(self._name_key, name.encode("utf-8"), hashlib.sha256).hexdigest()[:12]

    def key_check(self, message: bytes) -> str:
        return hmac.new(self._check_key, message, hashlib.sha256).hexdigest()
