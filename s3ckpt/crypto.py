"""Authenticated encryption of every object, and keyed content ids.

One random 32-byte master key per store. From it, HKDF derives independent keys for object
encryption, content ids, the config's key check and the chunker's gear seed.

Each object gets its own AES-256-GCM key: ``HMAC-SHA256(object_key, salt)`` with a fresh random
24-byte salt. A key is used for exactly one message, so the nonce can be fixed, and GCM's 2^32
random-nonce limit per key never comes into play: the bound is salt collisions at 2^96 objects.
The associated data binds the store id, the object kind and its name (run and seq, or blob id), so
an object copied to another key, run, seq or store fails authentication.

Content ids are keyed BLAKE3 of the plaintext: equal chunks dedupe, and nobody without the key
can test whether a store holds a known plaintext.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct

import blake3
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ._names import BlobId
from .errors import ConfigurationError, IntegrityError

MASTER_KEY_SIZE = 32
_MAGIC = b"S3C\x01"
_SALT_SIZE = 24
_ZERO_NONCE = bytes(12)
_TAG_SIZE = 16
ENVELOPE_OVERHEAD = len(_MAGIC) + _SALT_SIZE + _TAG_SIZE


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


class Cipher:
    """Seals and opens the objects of one store."""

    def __init__(self, master_key: bytes, store_id: str) -> None:
        if len(master_key) != MASTER_KEY_SIZE:
            raise ConfigurationError("a master key is 32 bytes")
        self.store_id = store_id
        self._object_key = hkdf(master_key, b"s3ckpt/v1 object encryption")
        self._id_key = hkdf(master_key, b"s3ckpt/v1 content id")
        self._check_key = hkdf(master_key, b"s3ckpt/v1 config check")
        seed_bytes = hkdf(master_key, b"s3ckpt/v1 chunker seed", length=8)
        # pyfastcdc takes a seed that fits a signed 64-bit integer.
        self.chunker_seed: int = struct.unpack(">Q", seed_bytes)[0] >> 2

    def _ad(self, kind: str, name: str) -> bytes:
        return b"s3ckpt/v1\0" + self.store_id.encode() + b"\0" + kind.encode() + b"\0" + name.encode()

    def seal(self, kind: str, name: str, plaintext: bytes | memoryview) -> bytes:
        salt = os.urandom(_SALT_SIZE)
        subkey = hmac.digest(self._object_key, salt, "sha256")
        return _MAGIC + salt + AESGCM(subkey).encrypt(_ZERO_NONCE, plaintext, self._ad(kind, name))

    def open(self, kind: str, name: str, sealed: bytes, *, key: str | None = None) -> bytes:
        where = key or f"{kind} {name}"
        if len(sealed) < ENVELOPE_OVERHEAD or not sealed.startswith(_MAGIC):
            raise IntegrityError(
                f"{where} is not an s3ckpt object (truncated or overwritten); run `s3ckpt verify`", key=key
            )
        salt = sealed[len(_MAGIC) : len(_MAGIC) + _SALT_SIZE]
        subkey = hmac.digest(self._object_key, salt, "sha256")
        try:
            return AESGCM(subkey).decrypt(_ZERO_NONCE, sealed[len(_MAGIC) + _SALT_SIZE :], self._ad(kind, name))
        except InvalidTag:
            raise IntegrityError(
                f"{where} failed authentication: it was modified, truncated, or moved from another "
                "key, run or store. Do not trust it; run `s3ckpt verify` to find the extent of the damage.",
                key=key,
            ) from None

    def content_id(self, data: bytes | memoryview) -> BlobId:
        return BlobId(blake3.blake3(data, key=self._id_key).hexdigest())

    def key_check(self, message: bytes) -> str:
        return hmac.new(self._check_key, message, hashlib.sha256).hexdigest()
