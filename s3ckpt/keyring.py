"""User keys that wrap a store's master key: raw keys, passphrases (scrypt) and AWS KMS.

A store has one random master key; ``keys/<id>`` files each hold it wrapped by one user key, so a
key can be added or removed without touching data (restic's design). Opening tries only the key
files of the matching kind (and, for raw keys, the matching fingerprint).
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import os
import secrets
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt

from .crypto import MASTER_KEY_SIZE, decode_raw_key, hkdf
from .errors import ConfigurationError, DecryptionError, MissingKeyError, S3ckptError
from .records import KeyFile, ScryptParams

#: scrypt for new passphrase keys: N=2^17, r=8, p=1 (128 MiB, OWASP's guidance for scrypt).
DEFAULT_SCRYPT = ScryptParams(n=1 << 17, r=8, p=1)
#: What a key file may ask of the machine that opens it: a planted key file must not make every
#: open take minutes or gigabytes. Memory is 128 * n * r bytes, work about n * r * p.
MAX_SCRYPT_MEMORY = 256 << 20
MAX_SCRYPT_WORK = 4 * (1 << 17) * 8


@dataclass(frozen=True)
class RawKey:
    secret: bytes

    def __repr__(self) -> str:  # never print key material
        return "RawKey(<redacted>)"

    @property
    def fingerprint(self) -> str:
        return hmac.digest(self.secret, b"s3ckpt/v1 key fingerprint", "sha256")[:12].hex()


@dataclass(frozen=True)
class PassphraseKey:
    passphrase: str

    def __repr__(self) -> str:
        return "PassphraseKey(<redacted>)"


@dataclass(frozen=True)
class KmsKey:
    key_id: str


UserKey = RawKey | PassphraseKey | KmsKey
KmsClientFactory = Callable[[], Any]


def parse_key(spec: str | bytes | None, *, environ: Mapping[str, str] | None = None) -> UserKey:
    """Turn ``open_store(key=...)`` into a user key. Messages never contain the key itself."""
    env = os.environ if environ is None else environ
    if spec is None:
        spec = env.get("S3CKPT_KEY")
        if not spec:
            raise MissingKeyError()
    if isinstance(spec, bytes | bytearray):
        if len(spec) != MASTER_KEY_SIZE:
            raise ConfigurationError(f"a raw key is 32 bytes, got {len(spec)}; make one with s3ckpt.generate_key()")
        return RawKey(bytes(spec))
    if not isinstance(spec, str):
        raise ConfigurationError(f"a key is a str or 32 bytes, not {type(spec).__name__}")
    if spec.startswith("env:"):
        name = spec[4:]
        value = env.get(name)
        if not value:
            raise ConfigurationError(f"key=env:{name} but the environment variable {name} is not set or empty")
        if value.startswith("env:"):
            raise ConfigurationError(f"environment variable {name} holds another env: reference; put the key there")
        return parse_key(value, environ=env)
    if spec.startswith("passphrase:"):
        passphrase = spec[len("passphrase:") :]
        if len(passphrase) < 8:
            raise ConfigurationError("a passphrase key needs at least 8 characters after 'passphrase:'")
        return PassphraseKey(passphrase)
    if spec.startswith("kms:"):
        key_id = spec[4:]
        if not key_id:
            raise ConfigurationError("kms: needs a key id, ARN or alias, e.g. kms:alias/s3ckpt")
        return KmsKey(key_id)
    raw = decode_raw_key(spec)
    if raw is None:
        raise ConfigurationError(
            "the key is not a base64 key of 32 bytes, nor env:NAME, passphrase:..., or kms:<id>. "
            "Make one with `s3ckpt key new` or s3ckpt.generate_key()."
        )
    return RawKey(raw)


@contextlib.contextmanager
def _kms_errors(*, refused: type[S3ckptError], what: str) -> Iterator[None]:
    """botocore's errors as s3ckpt's; botocore is imported only when a kms: key is used."""
    import botocore.exceptions

    try:
        yield
    except botocore.exceptions.NoRegionError:
        raise ConfigurationError("kms: keys need an AWS region: pass region= or set AWS_DEFAULT_REGION") from None
    except botocore.exceptions.BotoCoreError as exc:  # no credentials, KMS unreachable, bad arguments
        from .backends._s3 import transport_error

        raise transport_error(exc, f"KMS (to {what})", endpoint="kms_endpoint_url= or AWS_ENDPOINT_URL_KMS") from None
    except ValueError as exc:
        raise ConfigurationError(f"cannot make a KMS client: {exc}; check kms_endpoint_url and the region") from None
    except botocore.exceptions.ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 403 or code in ("AccessDeniedException", "UnrecognizedClientException"):
            # KMS says the same for a key that did not make this ciphertext and for a caller
            # that may not use the key: name both, so an IAM problem is not read as "wrong key".
            raise refused(
                f"KMS refused to {what} ({code}): the key is not the one it was made with, or the credentials in "
                "use may not use the key (IAM policy or key policy)"
            ) from None
        raise refused(f"KMS refused to {what} ({code}); check the key id, its state and IAM") from None


def _ad(store_id: str, key_id: str) -> bytes:
    return f"s3ckpt/v1 key {store_id} {key_id}".encode()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _scrypt(passphrase: str, salt: bytes, params: ScryptParams) -> bytes:
    memory, work = 128 * params.n * params.r, params.n * params.r * params.p
    if memory > MAX_SCRYPT_MEMORY or work > MAX_SCRYPT_WORK or params.n & (params.n - 1):
        raise DecryptionError(
            f"a passphrase key file asks for scrypt n={params.n}, r={params.r}, p={params.p} ({memory >> 20} MiB), over "
            f"the bound s3ckpt accepts ({MAX_SCRYPT_MEMORY >> 20} MiB, n*r*p <= {MAX_SCRYPT_WORK}); it was not written "
            "by s3ckpt. Remove it (`s3ckpt key remove ID`, with another key)."
        )
    return Scrypt(salt=salt, length=32, n=params.n, r=params.r, p=params.p).derive(passphrase.encode("utf-8"))


def wrap_master_key(
    master: bytes,
    user_key: UserKey,
    *,
    store_id: str,
    kms_client: KmsClientFactory | None = None,
    label: str = "",
    scrypt_params: ScryptParams = DEFAULT_SCRYPT,
) -> KeyFile:
    key_id = secrets.token_hex(8)
    now = datetime.now(UTC)
    ad = _ad(store_id, key_id)
    if isinstance(user_key, KmsKey):
        if kms_client is None:
            raise ConfigurationError("kms: keys need boto3 KMS access")
        with _kms_errors(refused=ConfigurationError, what="wrap the store's key"):
            resp = kms_client().encrypt(
                KeyId=user_key.key_id,
                Plaintext=master,
                EncryptionContext={"s3ckpt:store": store_id, "s3ckpt:key": key_id},
            )
        return KeyFile(
            key_id=key_id, store_id=store_id, kind="kms", created_at=now, label=label,
            kms_key_id=user_key.key_id, wrapped=_b64(resp["CiphertextBlob"]),
        )  # fmt: skip
    salt = os.urandom(16)
    nonce = os.urandom(12)
    if isinstance(user_key, RawKey):
        kek = hkdf(user_key.secret, b"s3ckpt/v1 key wrap", salt=salt)
        wrapped = AESGCM(kek).encrypt(nonce, master, ad)
        return KeyFile(
            key_id=key_id, store_id=store_id, kind="raw", created_at=now, label=label,
            fingerprint=user_key.fingerprint, salt=_b64(salt), nonce=_b64(nonce), wrapped=_b64(wrapped),
        )  # fmt: skip
    kek = _scrypt(user_key.passphrase, salt, scrypt_params)
    wrapped = AESGCM(kek).encrypt(nonce, master, ad)
    return KeyFile(
        key_id=key_id, store_id=store_id, kind="passphrase", created_at=now, label=label,
        salt=_b64(salt), scrypt=scrypt_params, nonce=_b64(nonce), wrapped=_b64(wrapped),
    )  # fmt: skip


def matches(keyfile: KeyFile, user_key: UserKey) -> bool:
    """Whether trying ``user_key`` on ``keyfile`` makes sense (cheap; no KDF, no KMS call)."""
    if isinstance(user_key, RawKey):
        return keyfile.kind == "raw" and keyfile.fingerprint == user_key.fingerprint
    if isinstance(user_key, PassphraseKey):
        return keyfile.kind == "passphrase"
    return keyfile.kind == "kms"


def unwrap_master_key(keyfile: KeyFile, user_key: UserKey, *, kms_client: KmsClientFactory | None = None) -> bytes:
    """The master key, or DecryptionError if ``user_key`` does not open ``keyfile``."""
    ad = _ad(keyfile.store_id, keyfile.key_id)
    try:
        if isinstance(user_key, KmsKey):
            if kms_client is None:
                raise ConfigurationError("kms: keys need boto3 KMS access")
            with _kms_errors(refused=DecryptionError, what=f"open key file {keyfile.key_id}"):
                resp = kms_client().decrypt(
                    KeyId=user_key.key_id,  # KMS then refuses ciphertext made under any other key
                    CiphertextBlob=base64.b64decode(keyfile.wrapped),
                    EncryptionContext={"s3ckpt:store": keyfile.store_id, "s3ckpt:key": keyfile.key_id},
                )
            master = bytes(resp["Plaintext"])
        else:
            if keyfile.salt is None or keyfile.nonce is None:
                raise DecryptionError(f"key file {keyfile.key_id} is damaged: no salt or nonce")
            salt = base64.b64decode(keyfile.salt)
            if isinstance(user_key, RawKey):
                kek = hkdf(user_key.secret, b"s3ckpt/v1 key wrap", salt=salt)
            else:
                kek = _scrypt(user_key.passphrase, salt, keyfile.scrypt or DEFAULT_SCRYPT)
            master = AESGCM(kek).decrypt(base64.b64decode(keyfile.nonce), base64.b64decode(keyfile.wrapped), ad)
    except InvalidTag:
        raise DecryptionError(f"the key does not open key file {keyfile.key_id}") from None
    if len(master) != MASTER_KEY_SIZE:
        raise DecryptionError(f"key file {keyfile.key_id} holds a master key of the wrong size")
    return master
