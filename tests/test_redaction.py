"""Redaction on write: secret shapes go (and say what they were), look-alikes stay byte for byte,
structures are copied and never changed, a second pass changes nothing, and every regex is linear.

Every secret here is a fake built by concatenation at run time, so that this file itself does not
look like a leaked credential to a secret scanner.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import random
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s3ckpt.errors import InvalidArgumentError, S3ckptError
from s3ckpt.redaction import (
    DEFAULT_PATTERNS,
    DEFAULT_REDACTOR,
    DEFAULT_SECRET_KEY_NAMES,
    MAX_DEPTH,
    NO_REDACTION,
    SECRET_ASSIGNMENT,
    SECRET_FIELD,
    Redactor,
    SecretPattern,
    assignment_patterns,
    key_words,
    marker,
)

R = DEFAULT_REDACTOR
FIELD = marker(SECRET_FIELD)


def j(*parts: str) -> str:
    return "".join(parts)


ALNUM = "AbCdEfGhIjKlMnOpQrStUvWxYz0123456789aBcDeFgHiJkLmNoPqRsTuVwXyZ9876543210"


def rnd(n: int, alphabet: str = ALNUM) -> str:
    """n characters that look random (deterministic)."""
    return "".join(alphabet[(i * 7 + 3) % len(alphabet)] for i in range(n))


@dataclass(frozen=True)
class Case:
    """``before + secret + after`` must come out as ``before + [REDACTED:kind] + after``."""

    name: str
    kind: str
    before: str
    secret: str
    after: str

    @property
    def text(self) -> str:
        return self.before + self.secret + self.after

    @property
    def expected(self) -> str:
        return self.before + marker(self.kind) + self.after


AWS_SECRET = j("wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYEXAMPLEKEY")
JWT = j(
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9",
    ".eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ",
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
)
PEM_BODY = "\n".join(rnd(64, ALNUM + "+/") for _ in range(4)) + "\n" + rnd(20) + "=="


def pem(label: str, headers: str = "") -> str:
    return j("-----BEGIN ", label, " KEY-----\n", headers, PEM_BODY, "\n-----END ", label, " KEY-----")


SECRETS: list[Case] = [
    Case("aws key id", "aws-access-key-id", "using key ", j("AKIA", "IOSFODNN7EXAMPLE"), " for uploads"),
    Case("aws session key id", "aws-access-key-id", "temporary credentials ", j("ASIA", "Y34FZKBOKMUTVV7A"), " expire soon"),
    Case("aws secret env", "aws-secret-access-key", "export AWS_SECRET_ACCESS_KEY=", AWS_SECRET, "\nexport X=1"),
    Case("aws secret json", "aws-secret-access-key", 'creds {"SecretAccessKey": "', AWS_SECRET, '", "Expiration": 1}'),
    Case("aws secret ini", "aws-secret-access-key", "[default]\naws_secret_access_key = ", AWS_SECRET, "\nregion = eu-west-1"),
    Case("bearer header", "bearer-token", "GET / HTTP/1.1\r\nAuthorization: Bearer ", "mF_9.B5f-4.1JqM", "\r\nHost: x"),
    Case("bearer in prose", "bearer-token", "call it with Bearer ", j("ya29.a0AfH6SMBx3kLr9", "Q2vT7yZpWmN5cD8eF"), " please"),
    Case("basic auth", "basic-auth", "curl -H 'Authorization: Basic ", base64.b64encode(b"aladdin:opensesame").decode(), "' x"),
    Case("jwt", "jwt", "session cookie was ", JWT, " (expired)"),
    Case("jwt after bearer", "jwt", "Authorization: Bearer ", JWT, ""),
    Case("rsa pem", "private-key", "key file:\n", pem("RSA PRIVATE"), "\nend of file"),
    Case("ec pem", "private-key", "", pem("EC PRIVATE"), " was pasted"),
    Case("openssh pem", "private-key", "id_ed25519: ", pem("OPENSSH PRIVATE"), ""),
    Case("encrypted pkcs8", "private-key", "", pem("ENCRYPTED PRIVATE"), "\n"),
    Case("pkcs8", "private-key", "k=", pem("PRIVATE"), ";"),
    Case(
        "rsa pem, legacy encrypted",
        "private-key",
        "",
        pem("RSA PRIVATE", "Proc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,3F17F5316E2BAC89\n\n"),
        "",
    ),
    Case("truncated pem", "private-key", "log: '", j("-----BEGIN RSA ", "PRIVATE KEY-----\n", PEM_BODY[:150]), "' (cut)"),
    Case("pem in json string", "private-key", '{"key": "', pem("RSA PRIVATE").replace("\n", "\\n"), '"}'),
    Case("github classic", "github-token", "token ", j("ghp", "_", rnd(36)), " has repo scope"),
    Case("github oauth", "github-token", "(", j("gho", "_", rnd(36)), ")"),
    Case("github app", "github-token", "installation token ", j("ghs", "_", rnd(36)), "."),
    Case("github fine-grained", "github-token", "GH_TOKEN=", j("github", "_pat_", rnd(22), "_", rnd(59)), " make"),
    Case("gitlab", "gitlab-token", "PRIVATE-TOKEN ", j("glpat", "-", rnd(20)), " for the api"),
    Case("slack bot", "slack-token", "bot ", j("xoxb", "-1234567890-1234567890123-", rnd(24)), " posted"),
    Case("slack user", "slack-token", "user ", j("xoxp", "-1234567890-1234567890123-1234567890123-", rnd(32)), ""),
    Case(
        "slack webhook",
        "slack-webhook",
        "POST https://hooks.slack.com/services/",
        j("T0", "1234567/B0", "1234567/", rnd(24)),
        " ok",
    ),
    Case("stripe live", "stripe-key", "charge with ", j("sk", "_live_", rnd(24)), " now"),
    Case("stripe test", "stripe-key", "STRIPE_KEY=", j("sk", "_test_", rnd(24)), ""),
    Case("stripe restricted", "stripe-key", "restricted ", j("rk", "_live_", rnd(24)), "."),
    Case("url password", "url-password", "git clone https://deploy:", "s3cr3tP4ss", "@git.example.com/repo.git"),
    Case("url password with @", "url-password", "DATABASE_URL=postgres://app:", "p@ss:w0rd", "@db.internal:5432/app"),
    Case("url password, empty user", "url-password", "redis://:", "hunter2hunter2", "@cache:6379/0"),
    Case("google api key", "google-api-key", "maps key ", j("AIza", "SyA-1234567890", "abcdefghijklmnopqrstu"), " ok"),
    Case("anthropic key", "anthropic-api-key", "ANTHROPIC_API_KEY ", j("sk-", "ant-api03-", rnd(80), "AA"), " set"),
    Case("openai project key", "openai-api-key", "key ", j("sk-", "proj-", rnd(48)), " works"),
    Case("openai legacy key", "openai-api-key", "key ", j("sk-", rnd(20), "T3Blbk", "FJ", rnd(20)), " works"),
    Case("npm token", "npm-token", "//registry.npmjs.org/:_authToken ", j("npm", "_", rnd(36)), ""),
    Case("pypi token", "pypi-token", "password ", j("pypi-", "AgEIcHlwaS5vcmc", rnd(60)), " for upload"),
    Case("huggingface token", "huggingface-token", "HF ", j("hf", "_", rnd(34, "AbCdEfGhIjKlMnOpQrStUvWxYz")), " read"),
    Case("sendgrid key", "sendgrid-key", "mail ", j("SG", ".", rnd(22), ".", rnd(43)), " sent"),
    Case("stripe webhook secret", "stripe-key", "signing ", j("whsec", "_", rnd(32)), " verify"),
    Case("password in a log line", SECRET_ASSIGNMENT, "login failed password=", "hunter2", " user=bob"),
    Case("api_key in a json string", SECRET_ASSIGNMENT, '{"api_key": "', "abc123", '", "n": 1}'),
    Case("json inside a json string", SECRET_ASSIGNMENT, '{\\"client_secret\\": \\"', "s3cr3t-v4lue", '\\", \\"id\\": 7}'),
    Case("python repr", SECRET_ASSIGNMENT, "{'db_password': '", "correct horse battery staple", "', 'port': 5432}"),
    Case("camelCase key", SECRET_ASSIGNMENT, "config stripeApiKey: ", "k-99887766", " loaded"),
    Case("header key", SECRET_ASSIGNMENT, "X-Api-Key: ", "Zm9vYmFyYmF6", "\r\n"),
    Case("url query token", SECRET_ASSIGNMENT, "GET /cb?state=ok&access_token=", "a1b2c3d4e5", "&x=1"),
    Case(
        "azure account key",
        SECRET_ASSIGNMENT,
        "DefaultEndpointsProtocol=https;AccountKey=",
        rnd(86, ALNUM + "+/") + "==",
        ";EndpointSuffix=core.windows.net",
    ),
    Case("yaml secret", SECRET_ASSIGNMENT, "db:\n  password: ", "Tr0ub4dor&3", "\n  host: db"),
    Case("github token scheme", "github-token", "Authorization: token ", j("ghp", "_", rnd(36)), ""),
]

LOOKALIKES: list[str] = [
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 fixed the build",
    f"sha256 {hashlib.sha256(b'hello').hexdigest()} matches",
    f"digest sha256:{hashlib.sha256(b'layer').hexdigest()}",
    f"sha1={hashlib.sha1(b'x').hexdigest()} checksum: {hashlib.sha1(b'y').hexdigest()}",
    f"run {uuid.UUID(int=0x3F2A9C0E1B2C4D5E8F90123456789ABC)} started",
    "payload " + base64.b64encode(b"the quick brown fox jumps over the lazy dog").decode(),
    "publishable " + j("pk", "_live_", rnd(24)) + " and " + j("pk", "_test_", rnd(24)),
    "clone https://alice@git.example.com/team/repo.git",
    "see https://example.com/path/to/page?x=1&page=2#top",
    "the bearer of this letter is entitled to a refund",
    "Bearer bonds were popular in the 1950s; bearer instruments, too.",
    "Bearer authentication-mechanisms are described in RFC 6750",
    "the ghp team shipped ghp-tools v2",
    "mail alice.smith+tag@example.co.uk or bob@example.org",
    "at 2024-05-06T07:08:09.123456+00:00 and 12:30:45",
    "bucket arn:aws:s3:::my-bucket/key and role arn:aws:iam::123456789012:role/Deploy",
    "account 123456789012 in us-east-1",
    "wrote s3://my-bucket/path/to/object.json",
    "my password policy requires 12 characters",
    '{"tokens": 12}',
    '{"max_tokens": 4096, "token_count": 5, "tokens_seen": "77"}',
    "colour #1e90ff and #FFF",
    "version 1.2.3-rc.1+build.5",
    "fit it with scikit-learn (sk-learn) on a task-runner",
    "def login(password: str, token: str | None = None) -> bool:",
    "if token == expected_token and password == other:",
    "next_page_token=CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA and NextToken: abc123",
    "eos_token: </s>, pad_token=<pad>",
    "the AKIA prefix marks a long-term key; ASIA a temporary one",
    "a JWT starts with eyJhbGciOi but this one stops",
    "Author: Jane Doe; secretary: Bob; passwords_changed_at=2024-01-01",
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 alice@laptop",
    "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE\n-----END PUBLIC KEY-----",
    "-----BEGIN CERTIFICATE-----\nMIIBkTCB+wIJAL\n-----END CERTIFICATE-----",
    "Basic instructions: press the key, then the token ring",
    "~/.ssh/id_rsa.pub and /etc/ssl/private/ (a directory)",
    "password_policy_url=https://example.com/policy",
    "credentials:\n  user: bob",
    "a::b, token::Kind, x := 1, y => 2",
    'the field "password" is required',
    "password: null, token=None, secret=true",
    "İstanbul ünïcödé 𝖨 text with no secrets",
]


def case_id(c: Case) -> str:
    return c.name


def test_corpora_are_big_and_distinct() -> None:
    assert len({c.secret for c in SECRETS}) >= 24
    assert len(set(LOOKALIKES)) >= 24
    assert len({c.kind for c in SECRETS}) >= 15


@pytest.mark.parametrize("case", SECRETS, ids=case_id)
def test_secret_is_replaced_by_its_kind(case: Case) -> None:
    out = R.redact_text(case.text)
    assert case.secret not in out
    assert out == case.expected  # the marker names the kind, and the text around it is kept
    assert R.found(case.text) == [case.kind]


@pytest.mark.parametrize("text", LOOKALIKES)
def test_lookalike_is_kept_byte_for_byte(text: str) -> None:
    assert R.redact_text(text) is text
    assert R.found(text) == []


@pytest.mark.parametrize("case", SECRETS, ids=case_id)
def test_redaction_is_idempotent(case: Case) -> None:
    once = R.redact_text(case.text)
    assert R.redact_text(once) == once
    assert R.redact({"v": once, "password": FIELD}) == {"v": once, "password": FIELD}


def test_markers_in_input_are_not_redacted_again() -> None:
    text = "seen [REDACTED:jwt] and [REDACTED:acme-token]; password: [REDACTED:secret-field]"
    assert R.redact_text(text) == text
    assert R.redact_text('{"api_key": "[REDACTED:secret-assignment]"}') == '{"api_key": "[REDACTED:secret-assignment]"}'


def test_many_secrets_in_one_text() -> None:
    text = " | ".join(c.text for c in SECRETS)
    out = R.redact_text(text)
    for c in SECRETS:
        assert c.secret not in out, c.name
    assert " | ".join(c.expected for c in SECRETS) == out
    assert R.found(text) == [c.kind for c in SECRETS]


def test_positions_hold_after_non_ascii_text() -> None:
    # U+0130 lower-cases to two characters; the anchors must still point at the right place.
    text = "İİ 𝖨 ünï password=hunter2 İ " + j("ghp", "_", rnd(36)) + " end"
    assert R.redact_text(text) == "İİ 𝖨 ünï password=[REDACTED:secret-assignment] İ [REDACTED:github-token] end"


# -- secret-named keys -------------------------------------------------------------------------

SECRET_KEYS = [
    "password",
    "db_password",
    "DB_PASSWORD",
    "dbPassword",
    "stripeApiKey",
    "X-Api-Key",
    "x_api_key",
    "apikey",
    "APIKey",
    "client_secret",
    "AUTHORIZATION",
    "Proxy-Authorization",
    "aws_secret_access_key",
    "AWSSecretAccessKey",
    "access_token",
    "refreshToken",
    "id_token",
    "token",
    "github.token",
    "private key",
    "credentials",
    "Cookie",
    "session_token",
    "pwd",
]
PLAIN_KEYS = [
    "max_tokens",
    "tokens_seen",
    "token_count",
    "tokenizer",
    "secretary",
    "password_policy_url",
    "passwords_changed_at",
    "author",
    "authority",
    "key",
    "primary_key",
    "cache_key",
    "api_version",
    "next_page_token",
    "NextToken",
    "NextContinuationToken",
    "eos_token",
    "pad_token",
    "aws_access_key_id",
    "passed",
    "compass",
    "user",
]


@pytest.mark.parametrize("key", SECRET_KEYS)
def test_string_under_a_secret_key_is_replaced_whole(key: str) -> None:
    assert R.is_secret_key(key)
    assert R.redact({key: "anything at all", "n": 1}) == {key: FIELD, "n": 1}
    assert R.found({key: "x"}) == [SECRET_FIELD]


@pytest.mark.parametrize("key", PLAIN_KEYS)
def test_string_under_a_plain_key_is_kept(key: str) -> None:
    assert not R.is_secret_key(key)
    assert R.redact({key: "4096"}) == {key: "4096"}


def test_key_words() -> None:
    assert key_words("X-Api-Key") == ("x", "api", "key")
    assert key_words("stripeAPIKey") == ("stripe", "api", "key")
    assert key_words("aws_secret_access_key") == ("aws", "secret", "access", "key")
    assert key_words("oauth2.token") == ("oauth", "2", "token")


def test_every_scalar_under_a_secret_key_is_replaced_whatever_its_type_but_flags() -> None:
    key = j("AKIA", "IOSFODNN7EXAMPLE")
    value = {
        "token_count": 5,
        "token": 5,
        "pin_password": 123456,
        "password": None,  # says nothing
        "secret": True,  # a flag: says nothing, kept
        "api_key": 1.5,
        "credentials": {"user": "bob", "password": "pw", "note": key, "ids": [1, "2"], "n": None},
        "tokens": ["plain", "password=hunter2"],
        "authorization": ["Basic abc", "x"],
        "client_secret": [[1, 2], (3, "4"), {"deep": [False]}],
        "empty": {"password": ""},  # nothing to hide
    }
    assert R.redact(value) == {
        "token_count": 5,
        "token": FIELD,
        "pin_password": FIELD,
        "password": None,
        "secret": True,
        "api_key": FIELD,
        "credentials": {"user": FIELD, "password": FIELD, "note": FIELD, "ids": [FIELD, FIELD], "n": None},
        "tokens": ["plain", "password=[REDACTED:secret-assignment]"],
        "authorization": [FIELD, FIELD],
        "client_secret": [[FIELD, FIELD], (FIELD, FIELD), {"deep": [False]}],
        "empty": {"password": ""},
    }
    assert R.found({"token": [1, True, "x", None, ""]}) == [SECRET_FIELD] * 2
    # The keys of a dict under a secret name stay readable (redacted as text only).
    assert R.redact({"credentials": {key: 1, "user": "bob"}}) == {
        "credentials": {"[REDACTED:aws-access-key-id]": FIELD, "user": FIELD}
    }


def test_nested_structure_is_copied_not_mutated() -> None:
    ghp = j("ghp", "_", rnd(36))
    value = {
        "state": {
            "steps": [
                {"name": "fetch", "result": {"headers": {"Authorization": "Bearer abc.def", "Accept": "json"}}},
                {"name": "deploy", "result": ("ok", f"pushed with {ghp}", 3, None, 2.5, False)},
            ],
            "depth": [[[[{"client_secret": "cs", "ids": [1, 2, 3]}]]]],
        },
        "meta": {"url": "https://u:pw123456@h/p", "count": 2},
        7: "non-string keys are kept",
    }
    before = copy.deepcopy(value)
    out = R.redact(value)
    assert value == before  # not mutated
    assert out == {
        "state": {
            "steps": [
                {"name": "fetch", "result": {"headers": {"Authorization": FIELD, "Accept": "json"}}},
                {"name": "deploy", "result": ("ok", "pushed with [REDACTED:github-token]", 3, None, 2.5, False)},
            ],
            "depth": [[[[{"client_secret": FIELD, "ids": [1, 2, 3]}]]]],
        },
        "meta": {"url": "https://u:[REDACTED:url-password]@h/p", "count": 2},
        7: "non-string keys are kept",
    }
    assert isinstance(out["state"]["steps"][1]["result"], tuple)  # type: ignore[index]
    assert out["state"] is not value["state"]
    assert out["state"]["depth"][0] is not value["state"]["depth"][0]  # type: ignore[index]
    assert R.redact(out) == out
    assert R.found(value) == [SECRET_FIELD, "github-token", SECRET_FIELD, "url-password"]


def test_dict_keys_are_redacted_like_text() -> None:
    key = j("AKIA", "IOSFODNN7EXAMPLE")
    ghp = j("ghp", "_", rnd(36))
    assert R.redact({key: 1}) == {"[REDACTED:aws-access-key-id]": 1}
    assert R.redact({f"pushed with {ghp}": {"password=hunter2": [key]}, 7: "x"}) == {
        "pushed with [REDACTED:github-token]": {"password=[REDACTED:secret-assignment]": ["[REDACTED:aws-access-key-id]"]},
        7: "x",
    }
    assert R.found({key: f"and {ghp}"}) == ["aws-access-key-id", "github-token"]  # the key, then its value
    for case in SECRETS:
        out = R.redact({case.text: case.text, "n": {case.text: 1}})
        assert out == {case.expected: case.expected, "n": {case.expected: 1}}, case.name


def test_a_key_that_held_a_secret_is_not_a_secret_name() -> None:
    # "[REDACTED:url-password]" ends in "password": counted so, a second pass would hide the value.
    value = {"https://u:pw123456@h/p": "kept", j("ghp", "_", rnd(36)): 5, "password=hunter2": "kept too"}
    out = R.redact(value)
    assert out == {
        "https://u:[REDACTED:url-password]@h/p": "kept",
        "[REDACTED:github-token]": 5,
        "password=[REDACTED:secret-assignment]": "kept too",
    }
    assert R.redact(out) == out
    assert not R.is_secret_key("[REDACTED:url-password]")
    assert not R.is_secret_key("[REDACTED:aws-secret-access-key#2]")
    assert R.is_secret_key("[REDACTED:github-token] token")


def test_keys_that_become_equal_are_kept_apart_in_dict_order() -> None:
    k1, k2, k3 = (j("AKIA", s) for s in ("IOSFODNN7EXAMPLE", "ABCDEFGHIJKLMNOP", "QRSTUVWXYZ234567"))
    marker_key = "[REDACTED:aws-access-key-id]"
    out = R.redact({k1: 1, k2: 2, "[REDACTED:aws-access-key-id#2]": "literal", k3: 3, marker_key: "kept"})
    # Keys redaction leaves alone keep their names; the others are numbered around them.
    assert out == {
        "[REDACTED:aws-access-key-id#3]": 1,
        "[REDACTED:aws-access-key-id#4]": 2,
        "[REDACTED:aws-access-key-id#2]": "literal",
        "[REDACTED:aws-access-key-id#5]": 3,
        marker_key: "kept",
    }
    assert list(out.values()) == [1, 2, "literal", 3, "kept"]  # the order of the dict is kept
    assert R.redact(out) == out
    # The last marker of a key gets the number; the text around it is kept.
    pair = R.redact({f"{k1} then {k1}": 1, f"{k2} then {k2}": 2})
    assert pair == {
        "[REDACTED:aws-access-key-id] then [REDACTED:aws-access-key-id]": 1,
        "[REDACTED:aws-access-key-id] then [REDACTED:aws-access-key-id#2]": 2,
    }
    assert R.redact(pair) == pair
    # The same input always gives the same keys.
    assert R.redact({k2: 2, k1: 1}) == {marker_key: 2, "[REDACTED:aws-access-key-id#2]": 1}


@pytest.mark.timeout(60)  # catastrophic backtracking never ends; a loaded 2-core machine is slow, not wrong
def test_many_colliding_keys_stay_linear() -> None:
    keys = {j("AKIA", f"{i:016d}"): i for i in range(20_000)}
    out = R.redact(keys)
    assert len(out) == len(keys)
    assert list(out.values()) == list(range(20_000))
    assert "[REDACTED:aws-access-key-id#20000]" in out
    assert R.redact(out) == out


# -- header pairs, name/value objects and header lines -----------------------------------------


def test_header_pairs_lose_their_value() -> None:
    jwt_pair = ["Authorization", f"Bearer {JWT}"]
    value = {
        "headers": [["X-Api-Key", "Zm9vYmFyYmF6"], ["Accept", "json"], jwt_pair, ("Cookie", "a=1; b=2")],
        "raw": [("x-api-key", 12345678), ["Proxy-Authorization", ["Basic", "abc"]], ["token", {"v": True}]],
        "plain": [["Accept", "text/html"], ["max_tokens", 5], ["eos_token", "</s>"], ["token", None]],
        "longer": ["X-Api-Key", "a", "b"],  # not a pair: walked as a list
    }
    out = R.redact(value)
    assert out == {
        "headers": [["X-Api-Key", FIELD], ["Accept", "json"], ["Authorization", FIELD], ("Cookie", FIELD)],
        "raw": [("x-api-key", FIELD), ["Proxy-Authorization", [FIELD, FIELD]], ["token", {"v": True}]],
        "plain": [["Accept", "text/html"], ["max_tokens", 5], ["eos_token", "</s>"], ["token", None]],
        "longer": ["X-Api-Key", "a", "b"],
    }
    assert R.redact(out) == out
    assert R.redact([["X-Api-Key", "Zm9vYmFyYmF6"]]) == [["X-Api-Key", FIELD]]
    assert R.redact(("password", "hunter2")) == ("password", FIELD)


def test_name_value_objects_lose_their_value() -> None:
    value = {
        "env": [{"name": "DB_PASSWORD", "value": "hunter2"}, {"name": "REGION", "value": "eu-west-1"}],
        "har": [{"name": "X-Api-Key", "value": "Zm9vYmFyYmF6"}, {"name": "Accept", "value": "json"}],
        "tags": [{"Key": "api_token", "Value": 12345}, {"Key": "team", "Value": "ml"}],
        "big": {"name": "token", "value": "kept", **{f"f{i}": i for i in range(10)}},  # not a small object
    }
    assert R.redact(value) == {
        "env": [{"name": "DB_PASSWORD", "value": FIELD}, {"name": "REGION", "value": "eu-west-1"}],
        "har": [{"name": "X-Api-Key", "value": FIELD}, {"name": "Accept", "value": "json"}],
        "tags": [{"Key": "api_token", "Value": FIELD}, {"Key": "team", "Value": "ml"}],
        "big": value["big"],
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Cookie: theme=dark; sessionid=38afes7a8", "Cookie: [REDACTED:secret-assignment]"),
        (
            "GET /\r\nSet-Cookie: sid=abc123; Path=/; HttpOnly\r\nHost: x",
            "GET /\r\nSet-Cookie: [REDACTED:secret-assignment]\r\nHost: x",
        ),
        ("X-Api-Key: two words  \nnext: line", "X-Api-Key: [REDACTED:secret-assignment]  \nnext: line"),
        ("  password: correct horse battery staple\n  host: db", "  password: [REDACTED:secret-assignment]\n  host: db"),
        ("Authorization: Token abc def", "Authorization: Token [REDACTED:secret-assignment]"),
        (
            "Authorization: AWS4-HMAC-SHA256 Credential=" + j("AKIA", "IOSFODNN7EXAMPLE") + "/x, Signature=fe5f80f7",
            "Authorization: [REDACTED:secret-assignment]",
        ),
        ("Authorization: Bearer " + JWT + " (expired)", "Authorization: Bearer [REDACTED:jwt]"),
        # Left to the name=value pattern: quoted values, literals and type names, non-secret names.
        ("password: 'two words' here", "password: '[REDACTED:secret-assignment]' here"),
        ("password: null, token=abc", "password: null, token=[REDACTED:secret-assignment]"),
        ("token: str | None = None", "token: str | None = None"),
        ("eos_token: </s> and more", "eos_token: </s> and more"),
        ("Accept: text/html, password", "Accept: text/html, password"),
        ("say password: not a header line", "say password: [REDACTED:secret-assignment] a header line"),
    ],
)
def test_header_lines_lose_their_whole_value(text: str, expected: str) -> None:
    assert R.redact_text(text) == expected
    assert R.redact_text(expected) == expected


def test_a_header_value_runs_on_past_a_span_that_holds_line_breaks() -> None:
    # Once the PEM block is a marker, "; theme=dark" is on the header's line: it goes too, at once.
    text = "x\npassword: " + pem("RSA PRIVATE") + "; theme=dark\nnext: line"
    assert R.redact_text(text) == "x\npassword: [REDACTED:private-key]\nnext: line"


def test_text_appended_to_a_redacted_name_stays_as_it_is() -> None:
    # A header value that starts with a marker was redacted before: "<kind>#0" built from a redacted
    # kind stays as it is. (Not a promise for any text appended to any name: a session that wants
    # a fixed point redacts the composed string, which redact then leaves alone.)
    for case in SECRETS:
        for suffix in ("#0", "#12/next#3", " retry"):
            name = R.redact_text(case.text) + suffix
            assert R.redact_text(name) == name, (case.name, suffix)


@pytest.mark.parametrize("encode", [repr, json.dumps, lambda t: json.dumps(json.dumps(t))], ids=["repr", "json", "json twice"])
def test_text_in_a_repr_or_a_json_string_is_redacted_too(encode: Callable[[str], str]) -> None:
    # Error messages and log lines show text escaped: line breaks as \\n, quotes as \\".
    request = "GET / HTTP/1.1\r\nAuthorization: Bearer abc.def-1234\r\nCookie: a=1; sid=xyz\r\nHost: h"
    out = R.redact_text(encode(request))
    assert out == encode(
        "GET / HTTP/1.1\r\nAuthorization: Bearer [REDACTED:bearer-token]\r\nCookie: [REDACTED:secret-assignment]\r\nHost: h"
    )
    for case in SECRETS:
        out = R.redact_text(encode(case.text))
        assert encode(case.secret)[1:-1] not in out, case.name
        assert R.redact_text(out) == out, case.name
    assert (
        R.redact_text(str(KeyError("build\npassword: hunter2\ndone")))
        == "'build\\npassword: [REDACTED:secret-assignment]\\ndone'"
    )


def test_header_lines_follow_the_name_value_pattern() -> None:
    assert Redactor(secret_key_names=["pin"]).redact_text("PIN: 12 34\nx") == "PIN: [REDACTED:secret-assignment]\nx"
    assert Redactor(patterns=[]).redact_text("password: two words") == "password: two words"
    assert Redactor(allow=["two words"]).redact_text("password: two words") == "password: [REDACTED:secret-assignment] words"


def test_names_get_the_same_treatment_as_text() -> None:
    for case in SECRETS:
        name = f"step {case.text}"
        assert R.redact_text(name) == f"step {case.expected}", case.name
        assert R.redact({name: [name]}) == {f"step {case.expected}": [f"step {case.expected}"]}


@pytest.mark.parametrize("bad", [b"bytes", {1, 2}, object(), {"nested": [bytearray(b"x")]}, {"password": [b"x"]}])
def test_non_json_values_are_refused(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="JSON-like"):
        R.redact(bad)
    with pytest.raises(InvalidArgumentError, match="JSON-like"):
        R.found(bad)


def test_values_nested_too_deep_are_refused_not_crashed() -> None:
    ok: object = "password=hunter2"
    for _ in range(MAX_DEPTH):
        ok = [ok]
    assert "hunter2" not in str(R.redact(ok))
    for deep in ([ok], {"k": ok}, {"password": [ok]}):
        with pytest.raises(InvalidArgumentError, match="levels deep"):
            R.redact(deep)


@pytest.mark.parametrize("method", ["redact_text", "is_secret_key", "is_allowed"])
@pytest.mark.parametrize("bad", [None, 3, b"text", {"a": 1}, ["x"]])
def test_text_methods_refuse_what_is_not_text(method: str, bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="takes a str"):
        getattr(R, method)(bad)


# -- configuration -----------------------------------------------------------------------------


def test_allow_list_exact_string() -> None:
    key = j("AKIA", "IOSFODNN7EXAMPLE")
    other = j("AKIA", "ABCDEFGHIJKLMNOP")
    r = Redactor(allow=[key])
    assert r.redact_text(f"doc example {key}, real {other}") == "doc example " + key + ", real [REDACTED:aws-access-key-id]"
    assert r.redact({"password": key}) == {"password": key}


def test_allow_list_regex_must_match_whole_secret() -> None:
    r = Redactor(allow=[re.compile(r"AKIA[A-Z0-9]{9}EXAMPLE")])
    key = j("AKIA", "IOSFODNN7EXAMPLE")
    assert r.redact_text(key) == key
    partial = Redactor(allow=[re.compile(r"AKIA")])  # matches a part only: not allowed
    assert partial.redact_text(key) == "[REDACTED:aws-access-key-id]"


def test_extra_patterns_add_a_kind() -> None:
    acme = SecretPattern("acme-token", re.compile(r"ACME-[0-9]{8}"))
    r = Redactor(extra_patterns=[acme])
    text = "token ACME-12345678 and " + j("AKIA", "IOSFODNN7EXAMPLE")
    assert r.redact_text(text) == "token [REDACTED:acme-token] and [REDACTED:aws-access-key-id]"
    assert R.redact_text("ACME-12345678") == "ACME-12345678"
    assert r.found(text) == ["acme-token", "aws-access-key-id"]
    # The extra pattern names the kind over the generic name=value one.
    assert r.redact_text("password=ACME-12345678") == "password=[REDACTED:acme-token]"


def test_pattern_group_selects_the_part_replaced() -> None:
    p = SecretPattern("pin", re.compile(r"\bPIN ([0-9]{4,8})\b"), 1)
    assert Redactor([p]).redact_text("card PIN 123456 ok") == "card PIN [REDACTED:pin] ok"


def test_anchored_extra_pattern() -> None:
    p = SecretPattern("acme-token", re.compile(r"(?i:acme_)[0-9]{8}"), anchors=("acme_",))
    r = Redactor([p])
    assert r.redact_text("x ACME_12345678 y acme_87654321") == "x [REDACTED:acme-token] y [REDACTED:acme-token]"
    assert r.redact_text("short acme_1") == "short acme_1"


def test_anchors_sharing_a_prefix_or_overlapping_are_all_found() -> None:
    # "passkey_" starts with the built-in anchor "pass"; "hq_" overlaps the built-in "gh" in "ghq_".
    passkey = SecretPattern("passkey", re.compile(r"(?i:passkey_)[0-9]{6}"), anchors=("passkey_",))
    hq = SecretPattern("hq", re.compile(r"(?i:hq_)[0-9]{6}"), anchors=("hq_",))
    r = Redactor(extra_patterns=[passkey, hq])
    for pad in ("", " " * 2000):  # a short string (one scan) and a long one (a find per anchor)
        assert r.redact_text(f"login PASSKEY_123456 ok{pad}") == f"login [REDACTED:passkey] ok{pad}"
        assert r.redact_text(f"ghq_654321{pad}") == f"g[REDACTED:hq]{pad}"


def test_no_patterns_still_redacts_by_key_name() -> None:
    r = Redactor(patterns=[])
    key = j("AKIA", "IOSFODNN7EXAMPLE")
    assert r.redact({"password": "pw", "note": key, "text": "password=x"}) == {
        "password": FIELD,
        "note": key,
        "text": "password=x",
    }


def test_custom_secret_key_names_drive_keys_and_text() -> None:
    r = Redactor(secret_key_names=["pin", "page_token"])
    assert r.redact({"pin": "1234", "card_pin": "9", "password": "pw", "next_page_token": "t"}) == {
        "pin": FIELD,
        "card_pin": FIELD,
        "password": "pw",
        "next_page_token": FIELD,  # listed explicitly, so not a pagination token any more
    }
    assert r.redact_text("pin=1234 password=pw") == "pin=[REDACTED:secret-assignment] password=pw"
    assert r.redact_text(j("AKIA", "IOSFODNN7EXAMPLE")) == "[REDACTED:aws-access-key-id]"  # token shapes stay


def test_no_redaction_keeps_everything() -> None:
    value = {"password": "pw", "text": SECRETS[0].text, "items": [JWT, ("x", 1)]}
    assert NO_REDACTION.redact(value) is value
    assert NO_REDACTION.redact_text(JWT) is JWT
    assert NO_REDACTION.found(value) == []
    assert isinstance(NO_REDACTION, Redactor)


def test_found_reports_kinds_in_order_never_secrets() -> None:
    value = {"a": f"{JWT} then " + j("AKIA", "IOSFODNN7EXAMPLE"), "password": "pw", "b": ["https://u:p4ssw0rd@h"]}
    kinds = R.found(value)
    assert kinds == ["jwt", "aws-access-key-id", SECRET_FIELD, "url-password"]
    assert all(k in {p.kind for p in DEFAULT_PATTERNS} | {SECRET_FIELD} for k in kinds)


def test_invalid_configuration_is_refused() -> None:
    # Typed errors (S3ckptError and ValueError), each saying what is wrong.
    with pytest.raises(InvalidArgumentError, match="kind"):
        SecretPattern("has space", re.compile("x"))
    with pytest.raises(InvalidArgumentError, match="kind"):
        SecretPattern(None, re.compile("x"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="group"):
        SecretPattern("k", re.compile("(x)"), 2)
    with pytest.raises(InvalidArgumentError, match="group"):
        SecretPattern("k", re.compile("(x)"), "1")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="anchors"):
        SecretPattern("k", re.compile("x"), anchors=("UPPER",))
    with pytest.raises(InvalidArgumentError, match="compiled"):
        SecretPattern("k", "x")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="allow"):
        Redactor(allow=[3])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="SecretPattern"):
        Redactor(patterns=["x"])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="collection"):
        Redactor(secret_key_names="password")
    with pytest.raises(InvalidArgumentError, match="collection"):
        Redactor(patterns=True)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="collection"):
        Redactor(extra_patterns=3)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="no ASCII"):
        Redactor(secret_key_names=["--"])
    with pytest.raises(InvalidArgumentError, match="strings"):
        Redactor(secret_key_names=[b"pin"])  # type: ignore[list-item]
    assert issubclass(InvalidArgumentError, S3ckptError)
    # None for a collection means none.
    assert Redactor(extra_patterns=None, allow=None).redact_text("x") == "x"  # type: ignore[arg-type]


def test_default_names_and_assignment_patterns() -> None:
    assert {"password", "api_key", "authorization", "token", "client_secret"} <= DEFAULT_SECRET_KEY_NAMES
    assert assignment_patterns([]) == ()
    (p,) = assignment_patterns(["pin"])
    assert p.kind == SECRET_ASSIGNMENT
    assert p.anchors == ("pin",)


def test_concurrent_use_gives_the_same_results() -> None:
    value = {"items": [c.text for c in SECRETS] + LOOKALIKES, "password": "pw"}
    expected = R.redact(value)
    results: list[object] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(5):
                results.append(R.redact(value))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 40
    assert all(r == expected for r in results)


SEPARATORS = st.sampled_from([" ", "\n", ", ", "; ", "\t", " | "])
# Cases that end inside a header line with a secret name: what follows on that line is its value.
OPEN_HEADER_LINES = {c.name for c in SECRETS if R.redact_text(c.text + " x") != c.expected + " x"}


def test_open_header_lines_are_the_authorization_ones() -> None:
    assert {"jwt after bearer", "github token scheme"} == OPEN_HEADER_LINES


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(SECRETS) + len(LOOKALIKES) - 1), SEPARATORS), max_size=8))
def test_mixed_text_is_redacted_once_and_for_all(parts: list[tuple[int, str]]) -> None:
    pieces: list[str] = []
    expected: list[str] = []
    secrets: list[str] = []
    kept: list[str] = []
    for index, sep in parts:
        if index < len(SECRETS):
            c = SECRETS[index]
            if c.name in OPEN_HEADER_LINES and "\n" not in sep:
                sep = "\n" + sep  # a header's value runs to the end of its line
            pieces.append(c.text + sep)
            expected.append(c.expected + sep)
            secrets.append(c.secret)
        else:
            pieces.append(LOOKALIKES[index - len(SECRETS)] + sep)
            expected.append(pieces[-1])
            kept.append(pieces[-1])
    text = "".join(pieces)
    out = R.redact_text(text)
    assert out == "".join(expected)
    assert R.redact_text(out) == out
    for secret in secrets:
        # "abc123" is a secret in one case and part of a look-alike ("NextToken: abc123") in another.
        assert secret not in out or any(secret in piece for piece in kept)


# -- linear time -------------------------------------------------------------------------------

PATHOLOGICAL = {
    "a@": "a" * 100_000 + "@",
    "eyJ": "eyJ" + "a" * 100_000,
    "eyJ dots": "eyJ" + "a" * 100_000 + "." + "." * 100_000,
    "url": "://" + "a:" * 50_000,
    "url no @": "https://u:" + "p" * 200_000,
    "pem header only": "-----BEGIN RSA PRIVATE KEY-----" * 20_000,
    "pem unterminated": "-----BEGIN RSA PRIVATE KEY-----\n" + "A" * 500_000,
    "bearer": "Bearer " * 50_000,
    "bearer long": "bearer " + "a" * 300_000,
    "sk-": "sk-" * 100_000,
    "AKIA": "AKIA" * 100_000,
    "password=": "password=" * 50_000,
    "quotes": 'api_key="' + 'a\\"' * 100_000,
    "backslashes": 'password: "' + "\\" * 300_000,
    "spaces": "password" + " " * 300_000 + "=x",
    "keys": "secret_access_key_" * 30_000,
    "colons": ":" * 300_000,
    "dashes": "-" * 300_000,
    "words": ("a" * 50 + " ") * 10_000,
    "header spaces": "password" + " " * 300_000 + ":",
    "header name": "a" * 300_000 + ": x",
    "header value": "Cookie: " + "a; " * 100_000,
    "header trailing spaces": "Cookie: x" + " " * 300_000,
    "header lines": "token: x y\n" * 50_000,
    "header lines, plain": "Accept: x y\n" * 50_000,
    "lines": "\n" * 300_000 + ":",
    "escaped lines": "\\n" * 300_000 + ":",
    "escaped header lines": "\\ntoken: x y" * 50_000,
    "escaped header, backslashes": "\\npassword: x" + "\\" * 300_000,
    "header lines in a pem": "password: -----BEGIN RSA PRIVATE KEY-----\n"
    + "token: abc\n" * 20_000
    + "-----END RSA PRIVATE KEY-----"
    + "x" * 100_000,
}


@pytest.mark.timeout(60)  # catastrophic backtracking never ends; a loaded 2-core machine is slow, not wrong
@pytest.mark.parametrize("name", list(PATHOLOGICAL))
def test_pathological_input_completes(name: str) -> None:
    text = PATHOLOGICAL[name]
    out = R.redact_text(text)
    assert R.redact_text(out) == out


@pytest.mark.timeout(60)  # catastrophic backtracking never ends; a loaded 2-core machine is slow, not wrong
def test_a_megabyte_of_prose_with_secrets() -> None:
    rng = random.Random(7)
    words = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "was",
        "for",
        "on",
        "that",
        "with",
        "as",
        "by",
        "at",
        "from",
        "this",
        "it",
        "be",
        "are",
        "or",
        "an",
        "not",
        "have",
        "has",
        "had",
        "key",
        "token",
        "password",
        "secret",
        "api",
        "access",
        "private",
        "master",
        "signing",
        "cookie",
        "credential",
        "bearer",
        "authorization",
        "capital",
        "rapid",
        "passed",
        "compass",
        "masterpiece",
        "secretary",
        "tokens",
        "author",
        "identity",
        "task",
        "desk",
        "ask:",
        "x=1",
        "a-b",
    ]
    prose = " ".join(rng.choice(words) for _ in range(200_000))[:1_000_000]
    chosen = SECRETS[::5]
    text = prose + "".join(f" {c.text} " + prose[:1000] for c in chosen)
    out = R.redact_text(text)
    for c in chosen:
        assert c.secret not in out
        assert c.expected in out
    assert out.startswith(prose[:500_000])
