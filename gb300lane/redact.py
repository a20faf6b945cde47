"""The one secret classifier: what counts as a secret, by name or by value, and how it is masked or digested.

A value is a secret when its name says so (a word such as TOKEN, KEY,
SECRET, PASSWORD: `HF_TOKEN`, `--api-key`) or when the value itself does: a known token
shape (OpenAI `sk-...`, GitHub `ghp_...`, AWS `AKIA...`, a JWT, a Slack,
Hugging Face, Google or Stripe key, a PEM private key, credentials in a URL)
a `Bearer` value, a run of 32+ hex digits (a
40-hex token under any key; not a `sha256:` digest), a whole base64 value of
credential length, or a long high-entropy string. A secret is never printed (`<secret>`) and
never stored: where the tool must compare it later (the boot env check), it
stores a digest keyed with the state directory's key (`gb300lane.keyed`), so
the digest cannot be checked against guesses without that key.
"""

from __future__ import annotations

import math
import re
from collections import Counter

from gb300lane import keyed

#: Words that make a name a secret's (`HF_TOKEN`, `API_KEY`, `db_password`, `--api-key`), whatever the value
#: looks like. Words, not substrings: `kv_pool_tokens` and `MONKEY` are not secrets.
SECRET_NAME_WORDS = frozenset(
    {"TOKEN", "KEY", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "CREDENTIALS", "PRIVATE"}
)
#: ... and endings of a name written as one word (`APIKEY`, `HFTOKEN`).
SECRET_NAME_ENDINGS = ("KEY", "TOKEN", "SECRET", "PASSWORD")

#: Known token shapes, by what they are.
TOKEN_SHAPES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (what, re.compile(pattern))
    for what, pattern in (
        ("an OpenAI-style key (sk-...)", r"\bsk-[A-Za-z0-9_-]{16,}"),
        ("a GitHub token", r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
        ("an AWS access key id", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
        ("a JSON web token", r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
        ("a Slack token", r"\bxox[abposr]-[A-Za-z0-9-]{10,}"),
        ("a Hugging Face token", r"\bhf_[A-Za-z0-9]{20,}"),
        ("a Google API key", r"\bAIza[0-9A-Za-z_-]{35}"),
        ("a Stripe key", r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}"),
        ("a PEM private key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
        ("credentials in a URL", r"[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@"),
        ("a bearer token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]{8,}"),
    )
)

#: An absolute file path: folders of word characters, dots and dashes (what mktemp and the tool's own state use).
FILE_PATH = re.compile(r"^(?:/[\w.-]+){2,}/?$")
#: A whole value in base64 (standard or URL-safe alphabet) of credential length: 20 random bytes and more.
BASE64_TOKEN = re.compile(r"^(?:[A-Za-z0-9+/]{27,}={0,2}|[A-Za-z0-9_-]{27,}={0,2})$")
#: ... that mixes character classes as random bytes do (a word, a run of one letter or digits only is not one).
BASE64_MIN_BITS = 3.5

#: A high-entropy value: at least this long, upper and lower case and digits, no spaces ...
ENTROPY_MIN_LENGTH = 24
#: ... and at least this many bits of Shannon entropy per character (random base64 is near 5-6; prose near 3-4).
ENTROPY_MIN_BITS = 4.2

MASK = "<secret>"
#: Prefix of a stored secret digest (HMAC-SHA256 under the state key).
DIGEST_PREFIX = "hmac-sha256:"


def secret_name(name: str) -> bool:
    """True when the name says its value is a secret."""
    words = [w for w in re.split(r"[^A-Z0-9]+", name.upper()) if w]
    return any(w in SECRET_NAME_WORDS or w.endswith(SECRET_NAME_ENDINGS) for w in words)


def _entropy_bits(value: str) -> float:
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _hex_run(value: str) -> bool:
    """A run of 32+ hex digits that is not a content digest (`sha256:...`) and not one repeated digit."""
    for m in re.finditer(r"(?<![0-9A-Za-z])(?:[0-9a-f]{32,}|[0-9A-F]{32,})(?![0-9A-Za-z])", value):
        before = value[: m.start()]
        if before.endswith(("sha256:", "sha512:", "sha1:", "@sha256:")) or len(set(m.group(0))) < 4:
            continue
        return True
    return False


def secret_shape(value: str) -> str | None:
    """What kind of secret the value looks like (a known token shape or high entropy), None when it looks like none."""
    if value.startswith(DIGEST_PREFIX):
        return None  # already a digest
    for what, pattern in TOKEN_SHAPES:
        if pattern.search(value):
            return what
    if _hex_run(value):
        return "a hex token of credential length"
    classes = sum(
        (any(ch.isupper() for ch in value), any(ch.islower() for ch in value), any(ch.isdigit() for ch in value))
    )
    if FILE_PATH.match(value) and not BASE64_TOKEN.match(value):
        return None  # an absolute path (a mktemp folder's random part is not a credential)
    if BASE64_TOKEN.match(value) and classes >= 2 and _entropy_bits(value) >= BASE64_MIN_BITS:
        return "a base64 token of credential length"
    if (
        len(value) >= ENTROPY_MIN_LENGTH
        and not any(ch.isspace() for ch in value)
        and any(ch.isupper() for ch in value)
        and any(ch.islower() for ch in value)
        and any(ch.isdigit() for ch in value)
        and _entropy_bits(value) >= ENTROPY_MIN_BITS
    ):
        return "a high-entropy string"
    return None


def is_secret(name: str, value: str | None = None) -> bool:
    """True when the name or the value says it is a secret."""
    return secret_name(name) or (value is not None and secret_shape(value) is not None)


def masked(name: str, value: str) -> str:
    """The value, or `<secret>` when it is one."""
    return MASK if is_secret(name, value) else value


def digest(value: str) -> str:
    """`hmac-sha256:<hex>` of a secret under the state directory's key (a digest passes through unchanged)."""
    if value.startswith(DIGEST_PREFIX):
        return value
    key = keyed.state_key()
    assert key is not None  # created when absent
    return DIGEST_PREFIX + keyed.mac(key, "secret value", value)


def redact(name: str, value: str) -> str:
    """A secret as its keyed digest, so it can be stored and still compared; anything else unchanged."""
    return digest(value) if is_secret(name, value) else value


def redact_argv(argv: tuple[str, ...] | list[str]) -> list[str]:
    """The args with every secret (a secret-named flag's value, or a value shaped like one) as its keyed digest."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(redact("KEY", arg))
            hide_next = False
            continue
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if is_secret(name.replace("-", "_")):
                if eq:
                    out.append(f"--{name}={redact('KEY', value)}")
                    continue
                hide_next = True
            elif eq:
                out.append(f"--{name}={redact(name, value)}")
                continue
        out.append(redact("", arg))
    return out
