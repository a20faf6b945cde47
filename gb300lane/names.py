"""The one validator of names and identifiers the tool takes from users: what is a name, an env key, an image.

A name (recipe, lane, arm, instance) ends up in file names under the state
and results directories, in container names and in labels, so it is a slug:
letters, digits, `.`, `_`, `-`, starting with a letter or digit, at most
`MAX_NAME` characters. That alone keeps `../../x` and `a b` out of every path.
An environment key is a POSIX name (`[A-Za-z_][A-Za-z0-9_]*`), so it can never
smuggle `=`, `$(...)` or a newline into a docker-run script or a compose file.
An image reference follows the Docker reference grammar (distribution's
`reference` package), so a value such as `--privileged` can never be read as
an option.

Each check returns why a value is wrong (None when it is fine); callers turn
that into their own error naming the file and key.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

#: Longest name (a container name is `<lane>-<arm>-sidecar`; Docker allows 255 characters in all).
MAX_NAME = 64

#: The container runtimes a recipe or a lane can name (`gb300lane.runtime` implements each).
RuntimeName = Literal["docker", "process"]
RUNTIME_NAMES: tuple[RuntimeName, ...] = get_args(RuntimeName)
#: A name: a file stem, a container name part, a label value; never a path (match with `fullmatch`:
#: `$` would let a trailing newline through).
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*", re.ASCII)
#: A card name: a lowercase slug (it names the receipts directory).
CARD_SLUG_RE = re.compile(r"[a-z0-9][a-z0-9-]*", re.ASCII)
#: A POSIX environment variable name.
ENV_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)

# The Docker reference grammar (github.com/distribution/reference, regexp.go), written out.
_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
IMAGE_REF_RE = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?",
    re.ASCII,
)
#: Longest repository name the grammar allows.
MAX_IMAGE_NAME = 255


def name_problem(value: object, what: str = "name") -> str | None:
    """Why `value` is not a name (a slug of at most MAX_NAME characters), None when it is one."""
    article = "an" if what[:1] in "aeiou" else "a"
    if not isinstance(value, str) or not value:
        return f"{value!r} is not {article} {what}: it must be a non-empty string"
    if len(value) > MAX_NAME:
        return f"{value[:20]!r}... is not {article} {what}: it is {len(value)} characters long; use at most {MAX_NAME}"
    if not NAME_RE.fullmatch(value):
        return (
            f"{value!r} is not {article} {what}: use letters, digits, '.', '_' or '-', starting with a letter or digit "
            "(no spaces, no '/', not a path)"
        )
    return None


def env_key_problem(key: object) -> str | None:
    """Why `key` is not a POSIX environment variable name, None when it is one."""
    if not isinstance(key, str) or not ENV_KEY_RE.fullmatch(key):
        return (
            f"env key {key!r} is not a POSIX variable name: use letters, digits and '_', not starting with a digit "
            "(no '=', '$', spaces or newlines)"
        )
    return None


def image_ref_problem(ref: object) -> str | None:
    """Why `ref` is not a Docker image reference (`[host[:port]/]path[:tag][@digest]`), None when it is one."""
    if not isinstance(ref, str) or not ref:
        return "an image reference must be a non-empty string"
    m = IMAGE_REF_RE.fullmatch(ref)
    if m is None:
        return (
            f"{ref!r} is not a Docker image reference ([registry[:port]/]repository[:tag][@digest], lowercase "
            "repository, e.g. vllm/vllm-openai:v0.33.0)"
        )
    if len(m.group("name")) > MAX_IMAGE_NAME:
        return f"image name is {len(m.group('name'))} characters long; Docker allows {MAX_IMAGE_NAME}"
    return None
