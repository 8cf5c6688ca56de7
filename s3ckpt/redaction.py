"""Redaction on write: secrets are replaced by ``[REDACTED:<kind>]`` before a record is encrypted.

Encryption protects a checkpoint from whoever holds the bucket, not from whoever holds the key, and
checkpoints are read back by operators, other workers and debugging sessions. So every string of a
record (step results, state, effect targets, metadata, and names: step names, kinds, budget units,
idempotency keys) goes through a :class:`Redactor` first, and the marker names the kind so a reader
knows what was there. A string can hide a secret in any of these places, and each is covered:

- inside text: known token shapes (cloud keys, JWTs, PEM keys, ...) are found by precise regexes,
  ``name=value`` / ``"name": "value"`` assignments by the generic one, and a header line
  (``X-Api-Key: value``, ``Cookie: a=1; b=2``) loses its whole value up to the end of the line;
  text shown escaped, in a repr or a JSON string (``\\n``, ``\\"``), is read the same way;
- as a dict key: keys are redacted like any text (two keys that become equal stay apart: the later
  one's last marker is numbered, ``[REDACTED:jwt#2]``, ``#3``, ... in the dict's order);
- under a secret-named key (``password``, ``X-Api-Key``, ``stripeApiKey``): every scalar of the
  value is replaced whole, whatever its type (a number, a boolean, the strings of a nested list or
  dict); only None and the empty string, which say nothing, are kept;
- in a header pair, ``["Authorization", value]`` (a list or tuple of two whose first item is a
  secret name), or a name/value object, ``{"name": "API_KEY", "value": ...}``: the value, likewise.

A value redacted once is redacted for good: ``redact(redact(x)) == redact(x)``. Markers are never
redacted again, and whether a key is secret-named is decided on the key as stored (markers count as
the neutral word ``redacted``), so a second pass takes the same decisions as the first.

Every regex is linear: possessive quantifiers, no nested quantifiers over overlapping classes. Most
are only tried where a literal anchor occurs (:attr:`SecretPattern.anchors`), so a megabyte of text
costs a few dozen ``find`` passes, and a short string with no anchor at all costs one regex search.
Header lines cost one more pass, only over text that holds a colon.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar, cast

from .errors import InvalidArgumentError, describe

__all__ = [
    "DEFAULT_PATTERNS",
    "DEFAULT_REDACTOR",
    "DEFAULT_SECRET_KEY_NAMES",
    "MAX_DEPTH",
    "NON_SECRET_TOKEN_QUALIFIERS",
    "NO_REDACTION",
    "SECRET_ASSIGNMENT",
    "SECRET_FIELD",
    "Redactor",
    "SecretPattern",
    "assignment_patterns",
    "key_words",
    "marker",
]

_T = TypeVar("_T")

#: The kind of a string stored under a secret-named dict key (the whole string is replaced).
SECRET_FIELD: Final = "secret-field"  # noqa: S105 - a kind name, not a secret
#: The kind of a ``password=...`` / ``"api_key": "..."`` value found inside free text.
SECRET_ASSIGNMENT: Final = "secret-assignment"  # noqa: S105 - a kind name, not a secret

_KIND = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
# A marker, maybe numbered (``#2``) to keep two redacted dict keys apart.
_MARKER = re.compile(r"\[REDACTED:([A-Za-z0-9][A-Za-z0-9_.\-]*)(?:#[0-9]+)?\]")
_MARKER_START: Final = "[REDACTED:"


def marker(kind: str) -> str:
    """The text that replaces a secret of this kind."""
    return f"[REDACTED:{kind}]"


def _items(value: object, what: str) -> list[Any]:
    """A collection argument as a list; one string is not a collection of strings."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise InvalidArgumentError(f"{what} is a collection (a list or set), not {type(value).__name__}")
    return list(value)


@dataclass(frozen=True, slots=True)
class SecretPattern:
    """One kind of secret: ``regex`` finds it, ``group`` is the part that is replaced.

    ``anchors`` (lower-case ASCII literals) is an optimisation: when given, the regex is only tried
    with ``regex.match`` where one of them occurs (ASCII case-insensitively), so every match must
    start with one. Without anchors the regex is run with ``finditer`` over every string.
    """

    kind: str
    regex: re.Pattern[str]
    group: int = 0
    anchors: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not _KIND.fullmatch(self.kind):
            raise InvalidArgumentError(
                f"secret kind {describe(self.kind)}: use letters, digits, '-', '_' and '.', starting with a letter or digit"
            )
        if not isinstance(self.regex, re.Pattern) or not isinstance(self.regex.pattern, str):
            raise InvalidArgumentError(f"secret pattern {self.kind!r}: regex must be a compiled str pattern (re.compile(...))")
        if isinstance(self.group, bool) or not isinstance(self.group, int) or not 0 <= self.group <= self.regex.groups:
            raise InvalidArgumentError(
                f"secret pattern {self.kind!r}: group {describe(self.group)}, but the regex has {self.regex.groups} groups"
            )
        if not isinstance(self.anchors, tuple) or any(
            not isinstance(a, str) or not a or not a.isascii() or a != a.lower() for a in self.anchors
        ):
            raise InvalidArgumentError(
                f"secret pattern {self.kind!r}: anchors must be a tuple of non-empty lower-case ASCII strings"
            )


# ---------------------------------------------------------------------------------------------
# Secret-named keys

#: Field names whose string values are secrets. A key matches when its words (see key_words)
#: equal a name's words or end with them: ``db_password``, ``stripeApiKey``, ``X-Api-Key``.
DEFAULT_SECRET_KEY_NAMES: Final[frozenset[str]] = frozenset({
    "password", "passwd", "pwd", "passphrase", "passcode",
    "secret", "client_secret", "secret_key", "secret_access_key",
    "token", "access_token", "refresh_token", "id_token", "auth_token", "bearer_token",
    "session_token", "security_token", "api_token",
    "api_key", "apikey", "x-api-key", "access_key", "account_key",
    "authorization", "proxy_authorization",
    "private_key", "encryption_key", "signing_key", "master_key",
    "credentials", "credential", "cookie", "set_cookie",
})  # fmt: skip

#: Words that, right before a final ``token``, make it a vocabulary or pagination token rather than
#: a credential (``eos_token``, ``next_page_token``, ``NextContinuationToken``): redacting those
#: would break the resume this store exists for. Only applies when the key merely ends with the
#: listed name ``token``; a key equal to a listed name always matches.
NON_SECRET_TOKEN_QUALIFIERS: Final[frozenset[str]] = frozenset({
    "bos", "eos", "pad", "unk", "sep", "cls", "mask", "start", "end", "stop", "special",
    "page", "next", "continuation", "pagination", "cursor", "sync", "resume", "cancellation", "idempotency",
})  # fmt: skip

_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def key_words(key: str) -> tuple[str, ...]:
    """A field name as lower-case words: split on non-alphanumerics, camelCase and digit runs.

    ``"X-Api-Key"`` -> ``("x", "api", "key")``; ``"stripeAPIKey"`` -> ``("stripe", "api", "key")``.
    """
    return tuple(w.lower() for w in _WORD.findall(key))


def _name_words(names: Iterable[str]) -> frozenset[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for name in _items(names, "secret key names"):
        if not isinstance(name, str):
            raise InvalidArgumentError(f"secret key names are strings, not {type(name).__name__}")
        words = key_words(name)
        if not words:
            raise InvalidArgumentError(f"secret key name {describe(name)} has no ASCII letters or digits")
        out.add(words)
    return frozenset(out)


def _is_secret_words(words: tuple[str, ...], names: frozenset[tuple[str, ...]]) -> bool:
    for n in range(1, len(words) + 1):
        tail = words[-n:]
        if tail in names:
            if tail == ("token",) and n < len(words) and words[-2] in NON_SECRET_TOKEN_QUALIFIERS:
                continue
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Regex building blocks

# Key/value separator in free text (=, :, :=, =>), not '::' or '=='; spaces but not newlines around
# it, so that a YAML "credentials:" line does not swallow the next line's key.
_SEP = r"[ \t]*+(?:=>|:=|[:=])(?![:=])[ \t]*+"
# The closing quote of a quoted key, maybe in ["..."], and an opening quote: either escaped any number
# of times (JSON in a JSON string is \", its repr or a third encoding \\" and \\\").
_KEY_QUOTE = r"(?:\\*+[\"']\]?)"
_OPEN_QUOTE = r"(?:\\*+[\"'])"
_TOKEN68 = r"[A-Za-z0-9\-._~+/]"  # RFC 7235 token68, the shape of bearer credentials


def _ci(word: str) -> str:
    return f"(?ai:{re.escape(word)})"  # ASCII-only case folding, like the anchors


def _name_regex(words: Sequence[str]) -> str:
    """A regex for one name in free text, matching only where a word of the key starts.

    The first character is a plain class (``[Pp]``) so that ``re`` skips a non-matching name at
    once; the word boundary is checked after the first word, by a fixed-width lookbehind.
    """
    first, rest = words[0], words[1:]
    n, c = len(first), first[0]
    up = re.escape(c.upper())
    head = f"[{up}{re.escape(c)}]" if c.isalpha() else re.escape(c)
    boundary = f"(?<![A-Za-z]{'.' * n})"  # after a non-letter: db_password, PASSWORD, 2fa_secret
    boundary += f"|(?<=\\\\[nrt]{'.' * n})"  # after an escaped line break or tab, in a repr or JSON string
    boundary += f"|(?<=[a-z]{up}{'.' * (n - 1)})"  # camelCase: dbPassword
    if n > 1:
        boundary += f"|(?<=[A-Z]{up}[a-z]{'.' * (n - 2)})"  # after an acronym: XApiKey
    regex = head + (_ci(first[1:]) if n > 1 else "") + f"(?:{boundary})"
    regex += "".join(f"[_\\-. ]?{_ci(w)}" for w in rest)
    if tuple(words) == ("token",):
        # Vocabulary and pagination tokens (eos_token, NextToken) are not credentials.
        regex += "".join(
            f"(?<!{_ci(q + sep + 'token')})" for q in sorted(NON_SECRET_TOKEN_QUALIFIERS) for sep in ("", "_", "-", ".", " ")
        )
    return regex


def _lead(prefix: str, width: int, before: str = "[A-Za-z0-9]") -> str:
    """A literal prefix of ``width`` characters that does not continue a word.

    The lookbehind comes after the prefix, so that the regex still starts with a literal (fast for
    ``finditer`` too, not only at anchors).
    """
    return f"{prefix}(?<!{before}{'.' * width})"


def assignment_patterns(names: Iterable[str]) -> tuple[SecretPattern, ...]:
    """The pattern for ``name=value`` / ``"name": "value"`` inside free text, for these secret names.

    Kind ``secret-assignment``. The value is quoted ("...", '...', or \\"...\\" inside a JSON string)
    or, after a bare key only, bare up to a space or punctuation (``password=hunter2``,
    ``Authorization: Bearer x``). A quoted key followed by a bare value is JSON or a Python repr,
    where a bare value is a number or a literal, never a secret string.
    """
    words = _name_words(names)
    # A name that ends with another listed name adds nothing (x-api-key ends with api_key).
    minimal = sorted(w for w in words if not any(m != w and w[-len(m) :] == m for m in words))
    if not minimal:
        return ()
    key = "(?:" + "|".join(_name_regex(w) for w in minimal) + ")"
    bare = r"[^\s\"'`,;&<>(){}\[\]\\]"
    # ',', ';' and '&' end a bare value before a space, the end, or the next name= (a URL query, a
    # connection string), and are part of it otherwise: a password may hold them.
    bare_run = rf"{bare}(?:{bare}|[,;&](?![A-Za-z0-9_.\-]*+[=:]|[\s,;&]|\Z))*+"
    # Quoted values end at the closing quote, or at the end of the line when it is missing (a
    # truncated log line still hides the value).
    value = (
        r"(?<=\\\")(?:[^\"\\\r\n]|\\++[^\"\\\r\n])*+(?=\\++\"|[\r\n]|\Z)"  # \"...\", \\"...\\": JSON in JSON
        r"|(?<=\")(?:[^\"\\\r\n]|\\.)*+(?=[\"\r\n]|\Z)"  # "..."
        r"|(?<=')(?:[^'\\\r\n]|\\.)*+(?=['\r\n]|\Z)"  # '...'
        # Bare; a language literal or type name is no password (``password: str``, ``token=None``).
        rf"|(?<![\"'])(?!(?ai:null|none|nil|true|false|undefined|str|string|bytes|int)(?!{bare})){bare_run}"
    )
    regex = (
        f"{key}(?:{_KEY_QUOTE}{_SEP}{_OPEN_QUOTE}"  # quoted key: quoted value only
        # Possessive: once a quote or scheme is read, the value must follow it, which keeps
        # "Authorization: Bearer [REDACTED:...]" from matching again with "Bearer" as the value.
        f"|{_SEP}(?:{_OPEN_QUOTE}|(?ai:bearer|basic|token|digest|negotiate)[ \\t]++)?+)"
        f"({value})"
    )
    return (SecretPattern(SECRET_ASSIGNMENT, re.compile(regex), 1, _anchors_for({w[0] for w in minimal})),)


def _anchors_for(words: Iterable[str]) -> tuple[str, ...]:
    """Few anchors for many first words: each str.find pass over a long text costs about the same,
    so words sharing three or more leading letters share one (password, passwd -> pass)."""
    groups: dict[str, list[str]] = {}
    for word in sorted(set(words)):
        groups.setdefault(word[:3], []).append(word)
    anchors = {os.path.commonprefix(group) for group in groups.values()}  # noqa: RUF071 - strings, not paths
    return tuple(sorted(a for a in anchors if not any(b != a and a.startswith(b) for b in anchors)))


def _p(kind: str, regex: str, anchors: tuple[str, ...] = (), group: int = 0) -> SecretPattern:
    return SecretPattern(kind, re.compile(regex), group, anchors)


def _after_name(name: str) -> str:
    # "Authorization: ", "authorization=", '"Authorization": "', "headers['Authorization'] = '"
    return _name_regex((name,)) + _KEY_QUOTE + "?" + _SEP + _OPEN_QUOTE + "?"


_SPECIFIC_PATTERNS: Final[tuple[SecretPattern, ...]] = (
    # Whole PEM block, RSA/EC/DSA/OPENSSH/ENCRYPTED/PGP. The body runs up to the next "-----"; the END
    # line is optional so that a truncated key is still hidden (from its header on).
    _p(
        "private-key",
        r"-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----"
        r"(?:[A-Za-z0-9+/=\s:,.()_@#\\]|-(?!----))*+"
        r"(?:-----END[ A-Z0-9]{0,40}PRIVATE KEY(?: BLOCK)?-----)?",
        ("-----begin",),
    ),
    # JWS (3 segments) or JWE (5): the header is base64url of '{"', hence eyJ.
    _p(
        "jwt",
        _lead("eyJ", 3, r"[A-Za-z0-9_\-]") + r"[A-Za-z0-9_\-]{10,}+\.[A-Za-z0-9_\-]*+\.[A-Za-z0-9_\-]*+"
        r"(?:\.[A-Za-z0-9_\-]*+\.[A-Za-z0-9_\-]++)?",
        ("eyj",),
    ),
    # Upper case only, and 'A' is rare enough in text for re's own scan: no anchors.
    _p(
        "aws-access-key-id",
        _lead("(?:AKIA|ASIA|AROA|AIDA|AGPA|AIPA|ANPA|ANVA|APKA|ABIA|ACCA)", 4) + r"[A-Z0-9]{16}(?![A-Za-z0-9])",
    ),
    # 40 base64 characters are only a secret access key when the text says so: bare, they could be
    # anything (a git SHA is 40 hex characters).
    _p(
        "aws-secret-access-key",
        _name_regex(("secret", "access", "key")) + _KEY_QUOTE + "?" + _SEP + _OPEN_QUOTE + "?"
        r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        ("secret",),
        1,
    ),
    _p(
        "github-token",
        _lead("gh[pousr]_", 4) + r"[A-Za-z0-9]{30,255}+(?![A-Za-z0-9_])"
        r"|" + _lead("github_pat_", 11) + r"[A-Za-z0-9_]{22,255}+(?![A-Za-z0-9])",
        ("gh", "github_pat_"),
    ),
    _p(
        "gitlab-token",
        _lead("gl", 2) + r"(?:pat|dt|rt|ptt|ft|cbt|soat|oas|imt|agent|ffct)-[A-Za-z0-9_\-]{20,}+",
        ("gl",),
    ),
    _p(
        "slack-webhook",
        r"hooks\.slack\.com/(?:services|workflows|triggers)/([A-Za-z0-9_/\-]{20,}+)",
        ("hooks.slack.com/",),
        1,
    ),
    _p("slack-token", _lead("x", 1) + r"(?:ox[abposre]|app-[0-9])-[A-Za-z0-9\-]{10,}+", ("xox", "xapp-")),
    # Secret and restricted keys; publishable keys (pk_) are meant to be public.
    _p("stripe-key", _lead("[sr]k_", 3) + r"(?:live|test)_[A-Za-z0-9]{10,}+(?![A-Za-z0-9])", ("sk_", "rk_")),
    _p("stripe-key", _lead("whsec_", 6) + r"[A-Za-z0-9+/]{24,}+", ("whsec_",)),
    _p("google-api-key", _lead("AIza", 4, r"[A-Za-z0-9_\-]") + r"[A-Za-z0-9_\-]{35}(?![A-Za-z0-9_\-])", ("aiza",)),
    _p("anthropic-api-key", _lead("sk-ant-", 7, r"[A-Za-z0-9_\-]") + r"[A-Za-z0-9_\-]{32,}+", ("sk-",)),
    # sk-... alone is common in prose and identifiers (sk-learn); a key has digits and capitals.
    _p(
        "openai-api-key",
        _lead("sk-", 3, r"[A-Za-z0-9_\-]") + r"(?!ant-)(?:proj-|svcacct-|admin-)?"
        r"(?=[A-Za-z_\-]*+[0-9])(?=[a-z0-9_\-]*+[A-Z])[A-Za-z0-9_\-]{32,}+",
        ("sk-",),
    ),
    _p("npm-token", _lead("npm_", 4) + r"[A-Za-z0-9]{36}(?![A-Za-z0-9])", ("npm_",)),
    _p("pypi-token", r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_\-]{50,}+", ("pypi-",)),
    _p(
        "huggingface-token",
        _lead("hf_", 3, "[A-Za-z0-9_]") + r"(?=[a-z]*+[A-Z])[A-Za-z]{30,}+(?![A-Za-z0-9_])",
        ("hf_",),
    ),
    _p(
        "sendgrid-key",
        _lead(r"SG\.", 3) + r"[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}(?![A-Za-z0-9_\-])",
        ("sg.",),
    ),
    # scheme://user:password@host: only the password goes. The password may hold '@' (the last one
    # before the host counts); the backtracking that needs stops at the first '/', '?', '#' or space.
    _p("url-password", r"://[^\s/?#@:\[\]]*+:([^\s/?#]+)@", ("://",), 1),
    _p("basic-auth", _after_name("authorization") + r"(?ai:basic)[ \t]++([A-Za-z0-9+/]++={0,2}+)", ("authorization",), 1),
    _p("bearer-token", _after_name("authorization") + rf"(?ai:bearer)[ \t]++({_TOKEN68}++=*+)", ("authorization",), 1),
    # "Bearer <token>" without the header: the bearer of this letter is not one, so the token must be
    # long and have a digit.
    _p(
        "bearer-token",
        _name_regex(("bearer",)) + rf"[ \t]++((?=[A-Za-z\-._~+/]*+[0-9]){_TOKEN68}{{16,}}+=*+)",
        ("bearer",),
        1,
    ),
)

_DEFAULT_ASSIGNMENT: Final = assignment_patterns(DEFAULT_SECRET_KEY_NAMES)

#: The built-in patterns, most specific first (on overlap, the first names the kind).
DEFAULT_PATTERNS: Final[tuple[SecretPattern, ...]] = _SPECIFIC_PATTERNS + _DEFAULT_ASSIGNMENT

#: How deep containers may nest in a value given to redact (a record nests a caller's value at
#: most a few levels below the store's own limit; the walk is recursive, two frames a level).
MAX_DEPTH: Final = 200

# Up to this length the anchors are found by one regex over the string (a few microseconds, and
# none found means only the unanchored patterns run); a longer string gets one find pass per anchor.
_SCAN_MAX_LEN: Final = 1024

# A header line up to its value: at a line start, a header-like name, a colon (not "::" or ":=").
# The name is bounded, so a line costs one short match; only secret names go on to their value.
_HEADER = r"[ \t]*+([A-Za-z][A-Za-z0-9_.\-]{0,127}+)[ \t]*+:(?![:=])[ \t]*+"
_HEADER_LINE = re.compile("(?m)^" + _HEADER)
# A line may also start after an escaped line break ("\\n" in a repr or a JSON string), and then it
# also ends at one. Those are found with str.find: a lookbehind would cost a regex step per character.
_HEADER_AFTER_ESCAPE = re.compile(_HEADER)
_ESCAPED_BREAKS: Final = ("\\n", "\\r")
# An auth scheme before the credential stays readable ("Authorization: Bearer [REDACTED:...]").
_SCHEME = re.compile(r"(?ai:bearer|basic|token|digest|negotiate)[ \t]++")
# A language literal or type name is no secret ("password: str", "token: null"); a quoted value is
# left to the name=value pattern, which keeps the quotes; a value that starts with a marker was
# redacted before (so text appended to a redacted name, "...[REDACTED:jwt]#0", stays as it is).
_NOT_A_VALUE = re.compile(r"[\"'`]|\[REDACTED:|(?ai:null|none|nil|true|false|undefined|str|string|bytes|int)(?![A-Za-z0-9_])")
_LINE_END = re.compile(r"[\r\n]")
# Escaped once or more (\n, \\n), from the start of the backslash run, which keeps the search linear.
_ESCAPED_LINE_END = re.compile(r"[\r\n]|(?<!\\)\\++[nr]")

# Name/value objects ({"name": "API_KEY", "value": ...}, HAR headers, Kubernetes env, AWS tags):
# the spellings of the field that names and of the field that holds the value.
_NAME_FIELDS: Final = frozenset(s for w in ("name", "key", "header", "field") for s in (w, w.capitalize(), w.upper()))
_VALUE_FIELDS: Final = frozenset({"value", "Value", "VALUE"})
_NAME_VALUE_MAX_FIELDS: Final = 8  # such objects are small; bigger dicts skip the look

_Trie = dict[str, "_Trie"]


def _trie_regex(words: Iterable[str]) -> str:
    """A regex matching any of the words, as a trie, so that re rejects a position in a few steps."""
    root: _Trie = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: _Trie) -> str:
        if "" in node:  # the shortest word wins; longer ones sharing it are checked apart
            return ""
        alts = [re.escape(ch) + emit(child) for ch, child in sorted(node.items())]
        return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"

    return emit(root)


# ---------------------------------------------------------------------------------------------
# The redactor


class Redactor:
    """Replaces secrets in JSON-like values by ``[REDACTED:<kind>]``.

    ``patterns`` (default: DEFAULT_PATTERNS) and ``extra_patterns`` find secrets inside strings
    (values, dict keys and names alike); ``allow`` lists strings (exact) or regexes (full match) that
    are kept even when a pattern finds them; every scalar under a dict key that ``secret_key_names``
    (default: DEFAULT_SECRET_KEY_NAMES) matches, or paired with such a name (``["X-Api-Key", v]``,
    ``{"name": "X-Api-Key", "value": v}``), is replaced whole. With the default patterns, custom
    ``secret_key_names`` also drive the ``name=value`` pattern and header lines (``Name: value``) in
    free text. On overlap the earlier pattern names the kind; extra patterns come after the built-in
    token shapes and before the generic ``name=value`` one.

    Immutable once built, so one instance can serve any number of threads.
    """

    __slots__ = (
        "_allow_regexes",
        "_allow_strings",
        "_anchor_re",
        "_by_anchor",
        "_clean_keys",
        "_headers",
        "_key_cache",
        "_longer",
        "_needles",
        "_patterns",
        "_secret_names",
        "_unanchored",
    )

    _KEY_CACHE_SIZE: Final = 4096

    def __init__(
        self,
        patterns: Iterable[SecretPattern] | None = None,
        *,
        extra_patterns: Iterable[SecretPattern] = (),
        allow: Iterable[str | re.Pattern[str]] = (),
        secret_key_names: Iterable[str] | None = None,
    ) -> None:
        names = DEFAULT_SECRET_KEY_NAMES if secret_key_names is None else _items(secret_key_names, "secret_key_names")
        self._secret_names = _name_words(names)
        if patterns is None:
            assignment = _DEFAULT_ASSIGNMENT if secret_key_names is None else assignment_patterns(names)
            base = list(_SPECIFIC_PATTERNS + assignment)
        else:
            base = _items(patterns, "patterns")
        extras = _items(extra_patterns or (), "extra_patterns")
        for p in (*base, *extras):
            if not isinstance(p, SecretPattern):
                raise InvalidArgumentError(f"patterns are SecretPattern, not {type(p).__name__}")
        generic = [i for i, p in enumerate(base) if p.kind == SECRET_ASSIGNMENT]
        cut = generic[0] if generic else len(base)
        self._patterns: tuple[SecretPattern, ...] = (*base[:cut], *extras, *base[cut:])
        # Header lines are the name=value pattern's line-long form: on when it is.
        self._headers = bool(generic)
        # With their index, which orders kinds on overlap.
        self._unanchored = tuple((i, p) for i, p in enumerate(self._patterns) if not p.anchors)
        self._needles = tuple(_needles(p.anchors) for p in self._patterns)
        anchors = sorted({n for needles in self._needles for n, _ in needles})
        # For short strings: one regex finds the shortest anchor at each position where any starts.
        self._anchor_re = re.compile(_trie_regex(a.decode("ascii") for a in anchors).encode("ascii")) if anchors else None
        self._longer = {a: tuple(b for b in anchors if b != a and b.startswith(a)) for a in anchors}
        self._by_anchor = {a: frozenset(i for i, ns in enumerate(self._needles) if any(n == a for n, _ in ns)) for a in anchors}
        strings: set[str] = set()
        regexes: list[re.Pattern[str]] = []
        for a in _items(allow or (), "allow"):
            if isinstance(a, str):
                strings.add(a)
            elif isinstance(a, re.Pattern) and isinstance(a.pattern, str):
                regexes.append(a)
            else:
                raise InvalidArgumentError(f"allow takes strings and compiled str regexes, not {type(a).__name__}")
        self._allow_strings = frozenset(strings)
        self._allow_regexes = tuple(regexes)
        # key -> secret?, and the keys redaction leaves unchanged (a schema repeats its keys in
        # every object). The only mutable state: bounded memos, safe to share (dict ops are atomic).
        self._key_cache: dict[str, bool] = {}
        self._clean_keys: dict[str, None] = {}

    @property
    def patterns(self) -> tuple[SecretPattern, ...]:
        """The patterns, in order of precedence."""
        return self._patterns

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({len(self._patterns)} patterns, {len(self._secret_names)} secret key names, "
            f"{len(self._allow_strings) + len(self._allow_regexes)} allowed)"
        )

    # -- public API ---------------------------------------------------------------------------

    def redact(self, value: _T) -> _T:
        """A redacted copy of a JSON-like value (dict, list, tuple, str, int, float, bool, None).
        The input is never changed. String dict keys are redacted like any text (non-string keys
        are kept); keys that become equal stay apart, the later ones numbered in the dict's order
        (``[REDACTED:jwt]``, ``[REDACTED:jwt#2]``). Idempotent: ``redact(redact(x)) == redact(x)``.

        Raises InvalidArgumentError for any other type, and for a value nested more than
        ``MAX_DEPTH`` levels deep: a value that cannot be scanned must not be stored.
        """
        return cast(_T, self._walk(value, None, 0))

    def redact_text(self, text: str) -> str:
        """One string with every secret replaced by its marker: free text, or a name (a step name,
        an effect kind, a budget unit, an idempotency key), which gets the same treatment."""
        return self._text(_text_argument(text, "redact_text"), None)

    def found(self, value: object) -> list[str]:
        """The kinds of the secrets in a value, one entry per replacement, in order; never the secrets."""
        kinds: list[str] = []
        self._walk(value, kinds, 0)
        return kinds

    def is_secret_key(self, key: str) -> bool:
        """Whether every scalar stored under this dict key (or paired with this name) is replaced
        whole. A marker in the key counts as the word ``redacted``, which names no secret: a key
        that held a token (``ghp_...`` -> ``[REDACTED:github-token]``) does not become secret-named
        by its marker, so a second pass decides as the first did."""
        return self._secret_key(_text_argument(key, "is_secret_key"))

    def is_allowed(self, text: str) -> bool:
        """Whether the allow-list keeps this text although a pattern found it."""
        return self._allowed(_text_argument(text, "is_allowed"))

    # -- internals ----------------------------------------------------------------------------

    def _secret_key(self, key: str) -> bool:
        hit = self._key_cache.get(key)
        if hit is None:
            words = key_words(_MARKER.sub(" redacted ", key) if _MARKER_START in key else key)
            hit = _is_secret_words(words, self._secret_names)
            if len(self._key_cache) < self._KEY_CACHE_SIZE:
                self._key_cache[key] = hit
        return hit

    def _allowed(self, text: str) -> bool:
        return text in self._allow_strings or (
            bool(self._allow_regexes) and any(r.fullmatch(text) for r in self._allow_regexes)
        )

    def _walk(self, value: object, kinds: list[str] | None, depth: int) -> object:
        if isinstance(value, str):
            return self._text(value, kinds)
        if value is None or isinstance(value, int | float):  # bool is an int
            return value
        if depth >= MAX_DEPTH:
            raise _too_deep()
        if isinstance(value, dict):
            return self._dict(value, kinds, depth + 1, hide=False)
        if isinstance(value, list | tuple):
            if len(value) == 2 and isinstance(value[0], str):
                name = self._text(value[0], kinds)
                if self._secret_key(name):  # a header pair: ["X-Api-Key", value]
                    pair = [name, self._hide(value[1], kinds, depth + 1)]
                    return pair if isinstance(value, list) else tuple(pair)
                rest = self._walk(value[1], kinds, depth + 1)
                return [name, rest] if isinstance(value, list) else (name, rest)
            items = [self._walk(v, kinds, depth + 1) for v in value]
            return items if isinstance(value, list) else tuple(items)
        raise _not_json(value)

    def _hide(self, value: object, kinds: list[str] | None, depth: int) -> object:
        """A secret's value: every scalar replaced whole, the shape of containers kept."""
        if isinstance(value, str):
            return self._field(value, kinds)
        if value is None or isinstance(value, bool):  # says nothing (a flag like "cookie": False is no secret)
            return value
        if isinstance(value, int | float):
            if kinds is not None:
                kinds.append(SECRET_FIELD)
            return marker(SECRET_FIELD)
        if depth >= MAX_DEPTH:
            raise _too_deep()
        if isinstance(value, dict):
            return self._dict(value, kinds, depth + 1, hide=True)
        if isinstance(value, list):
            return [self._hide(v, kinds, depth + 1) for v in value]
        if isinstance(value, tuple):
            return tuple(self._hide(v, kinds, depth + 1) for v in value)
        raise _not_json(value)

    def _dict(self, value: dict[object, object], kinds: list[str] | None, depth: int, *, hide: bool) -> dict[object, object]:
        """A dict with its keys redacted as text and its values redacted (or, with ``hide``, all
        hidden). A value is hidden under a secret-named key, and beside a secret name in a small
        name/value object."""
        keys: list[object] = []
        changed = False
        clean = self._clean_keys
        for k in value:
            if isinstance(k, str) and k not in clean:
                new = self._text(k, kinds)
                if new != k:
                    changed = True
                elif len(clean) < self._KEY_CACHE_SIZE:
                    clean[k] = None
                keys.append(new)
            else:
                keys.append(k)
        if changed:
            keys = _distinct(list(value), keys)
        secret_value = not hide and len(value) <= _NAME_VALUE_MAX_FIELDS and self._names_a_secret(value, keys)
        out: dict[object, object] = {}
        for key, v in zip(keys, value.values(), strict=True):
            if hide or (isinstance(key, str) and (self._secret_key(key) or (secret_value and key in _VALUE_FIELDS))):
                out[key] = self._hide(v, kinds, depth)
            else:
                out[key] = self._walk(v, kinds, depth)
        return out

    def _names_a_secret(self, value: dict[object, object], keys: list[object]) -> bool:
        """Whether a small dict is a name/value object whose name is a secret name."""
        if not any(k in _VALUE_FIELDS for k in keys):
            return False
        for key, v in zip(keys, value.values(), strict=True):
            # The name as it will be stored decides, so that a second pass decides the same.
            if key in _NAME_FIELDS and isinstance(v, str) and self._secret_key(self._text(v, None)):
                return True
        return False

    def _field(self, value: str, kinds: list[str] | None) -> str:
        # Empty says nothing; a marker is what an earlier pass left (keeps redact idempotent).
        if not value or _MARKER.fullmatch(value) or self._allowed(value):
            return value
        if kinds is not None:
            kinds.append(SECRET_FIELD)
        return marker(SECRET_FIELD)

    def _text(self, text: str, kinds: list[str] | None) -> str:
        spans = self._spans(text)
        if not spans:
            return text
        parts: list[str] = []
        last = 0
        for start, end, kind in spans:
            parts.append(text[last:start])
            parts.append(marker(kind))
            last = end
            if kinds is not None:
                kinds.append(kind)
        parts.append(text[last:])
        return "".join(parts)

    def _scan(self, anchor_re: re.Pattern[bytes], folded: bytes, positions: dict[bytes, list[int]]) -> None:
        """Every anchor occurrence in a short string, by one regex (restarted one byte on, so that
        overlapping anchors are found too)."""
        search = anchor_re.search
        m = search(folded)
        while m is not None:
            at = m.start()
            anchor = m.group()
            positions.setdefault(anchor, []).append(at)
            for longer in self._longer[anchor]:
                if folded.startswith(longer, at):
                    positions.setdefault(longer, []).append(at)
            m = search(folded, at + 1)

    def _spans(self, text: str) -> list[tuple[int, int, str]]:
        """Disjoint, sorted (start, end, kind) spans to replace."""
        folded: bytes | None = None
        candidates: Iterable[tuple[int, SecretPattern]] = enumerate(self._patterns)
        positions: dict[bytes, list[int]] = {}  # anchor -> where it occurs, shared between patterns
        complete = False  # whether positions lists every anchor that occurs
        if self._anchor_re is not None and len(text) <= _SCAN_MAX_LEN:
            folded = _fold(text)
            self._scan(self._anchor_re, folded, positions)
            complete = True
            if positions:
                active = {i for a in positions for i in self._by_anchor[a]}
                candidates = [(i, p) for i, p in enumerate(self._patterns) if not p.anchors or i in active]
            else:
                candidates = self._unanchored
        found: list[tuple[int, int, int]] = []  # start, end, pattern index
        for index, pattern in candidates:
            matches: Iterable[re.Match[str]]
            if pattern.anchors:
                if folded is None:
                    folded = _fold(text)
                matches = _anchored(pattern.regex, self._needles[index], text, folded, positions, complete)
            else:
                matches = pattern.regex.finditer(text)
            for m in matches:
                start, end = m.span(pattern.group)
                if start < end and not self._allowed(text[start:end]):
                    found.append((start, end, index))
        if self._headers and ":" in text:
            found.extend(self._header_values(text, found))
        if found and _MARKER_START in text:
            found = _outside_markers(found, text)
        if not found:
            return []
        # Overlapping spans become one, named by the secret that starts first (at the same start,
        # by the earlier pattern): a header value that runs on past a token is named by the token.
        found.sort(key=lambda span: (span[0], span[2]))
        merged: list[tuple[int, int, str]] = []
        cur_start, cur_end, cur_index = found[0]
        for start, end, index in found[1:]:
            if start < cur_end:
                cur_end = max(cur_end, end)
            else:
                merged.append((cur_start, cur_end, self._kind(cur_index)))
                cur_start, cur_end, cur_index = start, end, index
        merged.append((cur_start, cur_end, self._kind(cur_index)))
        return merged

    def _kind(self, index: int) -> str:
        # Header values rank after every pattern: at the same start, a pattern names the kind.
        return self._patterns[index].kind if index < len(self._patterns) else SECRET_ASSIGNMENT

    def _header_values(self, text: str, found: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
        """The value of every header line with a secret name (``X-Api-Key: v``, ``Cookie: a=1; b=2``),
        whole up to the end of its line, as spans ranked after every pattern.

        The line ends where it will end once redacted: a line break inside another span (a PEM
        block) is replaced with it, so what follows that span is still on the header's line. Each
        stretch of text is searched by one header line at most (lines inside a span are skipped),
        so this stays linear."""
        out: list[tuple[int, int, int]] = []
        starts: list[int] | None = None
        ends: list[int] = []
        for m, escaped in _header_names(text):
            if not self._secret_key(m.group(1)):
                continue
            start = m.end()
            scheme = _SCHEME.match(text, start)
            if scheme is not None:
                start = scheme.end()
            if _NOT_A_VALUE.match(text, start):
                continue
            if starts is None:
                starts, ends = _merged(found)
            i = bisect.bisect_right(starts, m.start()) - 1
            if i >= 0 and ends[i] > m.start():
                continue  # inside another span (a PEM block's lines), which hides it anyway
            end = start
            line_end = _ESCAPED_LINE_END if escaped else _LINE_END
            while (eol := line_end.search(text, end)) is not None:
                i = bisect.bisect_right(starts, eol.start()) - 1
                if i < 0 or ends[i] <= eol.start():
                    break
                end = ends[i]  # the break is inside a span: the line goes on after it
            stop = len(text) if eol is None else eol.start()
            end = start + len(text[start:stop].rstrip(" \t"))
            if start < end and not self._allowed(text[start:end]):
                out.append((start, end, len(self._patterns)))
        return out


def _header_names(text: str) -> Iterator[tuple[re.Match[str], bool]]:
    """Every header-like ``Name:`` at a line start, and whether its line starts after an escaped break."""
    yield from ((m, False) for m in _HEADER_LINE.finditer(text))
    if "\\" not in text:
        return
    for escape in _ESCAPED_BREAKS:
        at = text.find(escape)
        while at != -1:
            m = _HEADER_AFTER_ESCAPE.match(text, at + 2)
            if m is not None:
                yield m, True
            at = text.find(escape, at + 2)


def _merged(spans: list[tuple[int, int, int]]) -> tuple[list[int], list[int]]:
    """The starts and ends of the union of spans, sorted and disjoint."""
    starts: list[int] = []
    ends: list[int] = []
    for start, end, _ in sorted(spans):
        if ends and start <= ends[-1]:
            ends[-1] = max(ends[-1], end)
        else:
            starts.append(start)
            ends.append(end)
    return starts, ends


def _not_json(value: object) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"cannot redact a {type(value).__name__}: only JSON-like values are scanned "
        "(dict, list, tuple, str, int, float, bool, None)"
    )


def _too_deep() -> InvalidArgumentError:
    return InvalidArgumentError(f"cannot redact a value nested more than {MAX_DEPTH} levels deep")


def _text_argument(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"Redactor.{what} takes a str, not {type(value).__name__}")
    return value


def _distinct(old: list[object], new: list[object]) -> list[object]:
    """The redacted keys of one dict, kept apart: a key redaction left unchanged keeps its name;
    a changed key whose name is taken gets its last marker numbered (#2, #3, ...), in dict order."""
    taken = {n for o, n in zip(old, new, strict=True) if o == n}
    tried: dict[str, int] = {}  # a redacted name -> the last number tried for it (linear, not n^2)
    out: list[object] = []
    for o, n in zip(old, new, strict=True):
        if isinstance(n, str) and o != n and n in taken:
            number = tried.get(n, 1)
            candidate = n
            while candidate in taken:
                number += 1
                candidate = _numbered(n, number)
            tried[n] = number
            n = candidate
        taken.add(n)
        out.append(n)
    return out


def _numbered(text: str, number: int) -> str:
    """The text with its last marker numbered: a key redaction changed holds at least one."""
    last: re.Match[str] | None = None
    for last in _MARKER.finditer(text):  # noqa: B007 - the last one is wanted
        pass
    if last is None:
        return f"{text}#{number}"
    return f"{text[: last.start()]}[REDACTED:{last.group(1)}#{number}]{text[last.end() :]}"


def _fold(text: str) -> bytes:
    """The text as bytes with ASCII lower-cased, one byte per character ('?' beyond Latin-1), so that
    positions stay those of the text; a fraction of the cost of str.lower() on non-ASCII text."""
    return text.encode("latin-1", "replace").lower()


def _needles(anchors: tuple[str, ...]) -> tuple[tuple[bytes, bytes], ...]:
    """Each anchor as bytes, with its first non-alphanumeric byte (b"" if none) for a cheap pre-test."""
    out = []
    for anchor in anchors:
        needle = anchor.encode("ascii")
        rare = next((needle[i : i + 1] for i, c in enumerate(anchor) if not c.isalnum()), b"")
        out.append((needle, rare))
    return tuple(out)


def _anchored(
    regex: re.Pattern[str],
    needles: tuple[tuple[bytes, bytes], ...],
    text: str,
    folded: bytes,
    positions: dict[bytes, list[int]],
    complete: bool,
) -> list[re.Match[str]]:
    """The matches of an anchored pattern: ``regex.match`` at each occurrence of an anchor.

    ``positions`` caches where each anchor occurs; when ``complete``, a missing anchor does not occur.
    """
    starts: list[int] = []
    for needle, rare in needles:
        where = positions.get(needle)
        if where is None and complete:
            continue
        if where is None:
            where = []
            # A one-byte test is a memchr, twenty times cheaper than a find pass: try the punctuation.
            at = folded.find(needle) if rare in folded else -1
            while at != -1:
                where.append(at)
                at = folded.find(needle, at + 1)
            positions[needle] = where
        starts.extend(where)
    if not starts:
        return []
    if len(needles) > 1:
        starts.sort()
    out: list[re.Match[str]] = []
    end = -1
    match = regex.match
    for at in starts:
        if at >= end:  # like finditer: no match starts inside the previous one
            m = match(text, at)
            if m is not None:
                out.append(m)
                end = m.end()
    return out


def _outside_markers(found: list[tuple[int, int, int]], text: str) -> list[tuple[int, int, int]]:
    """The spans with the parts inside existing markers cut out: a marker is never redacted again."""
    starts: list[int] = []
    ends: list[int] = []
    for m in _MARKER.finditer(text):
        starts.append(m.start())
        ends.append(m.end())
    if not starts:
        return found
    out: list[tuple[int, int, int]] = []
    for start, end, index in found:
        i = max(bisect.bisect_right(starts, start) - 1, 0)
        while start < end and i < len(starts) and starts[i] < end:
            if ends[i] > start:
                if starts[i] > start:
                    out.append((start, starts[i], index))
                start = max(start, ends[i])
            i += 1
        if start < end:
            out.append((start, end, index))
    return out


class _NoRedaction(Redactor):
    """Keeps everything: for stores whose records must stay byte for byte what the caller gave."""

    __slots__ = ()

    def redact(self, value: _T) -> _T:
        return value

    def redact_text(self, text: str) -> str:
        return text

    def found(self, value: object) -> list[str]:
        return []

    def is_secret_key(self, key: str) -> bool:
        return False


#: The redactor with every built-in pattern and secret key name.
DEFAULT_REDACTOR: Final[Redactor] = Redactor()
#: A redactor that returns every value unchanged.
NO_REDACTION: Final[Redactor] = _NoRedaction(patterns=(), secret_key_names=())
