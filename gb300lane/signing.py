"""Signatures on what the tool records, made with OpenSSH (`ssh-keygen -Y sign` / `-Y verify`).

The key does not live beside the files it protects: it is an ed25519 key in
the user's config directory (`$XDG_CONFIG_HOME/gb300lane/signing_key`, default
`~/.config/gb300lane/`), made with `ssh-keygen` on first use, and its public
half is recorded in the allowed-signers file there (`allowed_signers`, the
format git's SSH commit signing uses; `GB300LANE_ALLOWED_SIGNERS` names
another, e.g. a team's).

Who may sign is configuration, never the signature under test: the signers
are the lines of the allowed-signers file whose options carry
`namespaces="gb300lane"` (a line for git commit signing, or one with no
namespaces at all, signs nothing here), narrowed to the principals named in
`GB300LANE_PRINCIPALS` (comma-separated) when that is set. A signature
verifies only when `ssh-keygen -Y verify` accepts it, in the namespace
`gb300lane`, for a principal the configuration maps its key to
(`-Y find-principals` over those lines); the signer a seal writes beside its
signature is a label and decides nothing. So rewriting the state or results
directory, replacing `state.key` included, cannot make a forged manifest or
ledger row verify, and neither can a team member's key the operator did not
choose for this namespace.

What it cannot prove: someone who can read the private key (the same user,
root), or write the allowed-signers file, can sign anything. Keep the config
directory's key away from the lane's state (a different user, or a key on a
token: any key ssh-keygen can sign with works, named by `GB300LANE_SIGNING_KEY`).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from gb300lane import paths
from gb300lane.errors import StateError

#: The signature namespace (`ssh-keygen -n`) and the principal in the allowed-signers file.
NAMESPACE = "gb300lane"
PRINCIPAL = "gb300lane"
KEY_FILE = "signing_key"
SIGNERS_FILE = "allowed_signers"
#: Narrows the chosen signers to these principals (comma-separated); unset: every principal of the namespace.
PRINCIPALS_ENV = "GB300LANE_PRINCIPALS"
_TIMEOUT_S = 30.0

SignatureStatus = Literal["ok", "mismatch", "not_allowed", "unsigned", "no_signers"]


def config_dir() -> Path:
    """`$XDG_CONFIG_HOME/gb300lane`, default `~/.config/gb300lane`: the user's, outside every state directory."""
    xdg = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(xdg) / "gb300lane"


def signing_key_path() -> Path:
    env = os.environ.get("GB300LANE_SIGNING_KEY")
    return Path(env) if env else config_dir() / KEY_FILE


def allowed_signers_path() -> Path:
    env = os.environ.get("GB300LANE_ALLOWED_SIGNERS")
    return Path(env) if env else config_dir() / SIGNERS_FILE


def _ssh_keygen() -> str:
    found = shutil.which("ssh-keygen")
    if found is None:
        raise StateError(
            "ssh-keygen is not installed; install OpenSSH's client (apt-get install openssh-client): "
            "receipts, verdicts and promotions are signed with it"
        )
    return found


def _run(args: list[str], data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run([_ssh_keygen(), *args], input=data, capture_output=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StateError(f"ssh-keygen {args[0]} {args[1] if len(args) > 1 else ''} failed to run ({exc})") from None


def _outside_state(path: Path) -> None:
    resolved = path.resolve()
    for where, what in ((paths.state_root(), "state directory"), (paths.results_dir(), "results directory")):
        try:
            inside = resolved.is_relative_to(where.resolve())
        except OSError:
            inside = False
        if inside:
            raise StateError(
                f"{path}: the signing key is inside the {what} ({where}), beside the files it signs; "
                "keep it in the config directory (unset GB300LANE_SIGNING_KEY, or point it elsewhere)"
            )


def public_key() -> str:
    """The signing key's public half (`ssh-ed25519 AAAA... gb300lane`), the key made on first use."""
    key = ensure_key()
    pub = key.with_name(key.name + ".pub")
    try:
        return pub.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        got = _run(["-y", "-f", str(key)])
        if got.returncode != 0:
            raise StateError(
                f"{key}: not a private key ssh-keygen can read ({_err(got)}); restore it, or move it "
                "aside to make a new one (what the old one signed then verifies only while its public "
                "half stays in the allowed signers)"
            ) from None
        return got.stdout.decode("ascii", "replace").strip()


def ensure_key() -> Path:
    """The signing key's path, made (ed25519, 0600) with its allowed-signers line when there is none."""
    key = signing_key_path()
    _outside_state(key)
    if key.is_file():
        return key
    if key.exists():
        raise StateError(f"{key}: not a file (the signing key); move it aside")
    try:
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise StateError(f"{key.parent}: cannot create the config directory ({exc.strerror or exc})") from None
    try:
        tmp = Path(tempfile.mkdtemp(dir=key.parent, prefix=".signing-key."))
    except OSError as exc:
        raise StateError(f"{key.parent}: cannot write the signing key there ({exc.strerror or exc})") from None
    try:
        made = _run(["-q", "-t", "ed25519", "-N", "", "-C", PRINCIPAL, "-f", str(tmp / KEY_FILE)])
        if made.returncode != 0:
            raise StateError(f"{key}: ssh-keygen could not make a signing key ({_err(made)})")
        pub = (tmp / f"{KEY_FILE}.pub").read_text(encoding="ascii").strip()
        try:
            os.link(tmp / KEY_FILE, key)
        except FileExistsError:
            return key  # another process made it first: use theirs (it records its own public half)
        try:
            os.link(tmp / f"{KEY_FILE}.pub", key.with_name(key.name + ".pub"))
        except FileExistsError:
            key.with_name(key.name + ".pub").write_text(pub + "\n", encoding="ascii")
        line = f'{PRINCIPAL} namespaces="{NAMESPACE}" {pub}'
        if os.environ.get("GB300LANE_ALLOWED_SIGNERS"):
            return key  # a shared allowed-signers file is the team's to edit: `gb300lane verify` names the key
        try:
            with open(allowed_signers_path(), "a", encoding="ascii") as fh:
                fh.write(line + "\n")
        except OSError as exc:
            raise StateError(
                f"{allowed_signers_path()}: cannot record the new signing key's public half "
                f"({exc.strerror or exc}); add this line to it: {line}"
            ) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return key


def _err(done: subprocess.CompletedProcess[bytes]) -> str:
    return (
        (done.stderr or done.stdout).decode("utf-8", "replace").strip().splitlines()[-1:][0]
        if (done.stderr or done.stdout)
        else f"exit {done.returncode}"
    )


def _message(label: str, data: bytes) -> bytes:
    return label.encode("utf-8") + b"\0" + data


def fingerprint(public: str) -> str:
    """`SHA256:...` of a public key line, as ssh-keygen prints it."""
    with tempfile.NamedTemporaryFile("w", suffix=".pub", encoding="ascii") as fh:
        fh.write(public + "\n")
        fh.flush()
        got = _run(["-l", "-f", fh.name])
    if got.returncode != 0:
        raise StateError(f"ssh-keygen cannot read the public key {public[:40]}... ({_err(got)})")
    return got.stdout.decode("ascii", "replace").split()[1]


_FINGERPRINTS: dict[tuple[str, float], str] = {}


def _own_fingerprint(key: Path) -> str:
    try:
        stamp = (str(key), key.stat().st_mtime)
    except OSError:
        stamp = (str(key), 0.0)
    if stamp not in _FINGERPRINTS:
        _FINGERPRINTS[stamp] = fingerprint(public_key())
    return _FINGERPRINTS[stamp]


def sign(label: str, data: bytes) -> dict[str, str]:
    """`{"signer", "key", "ssh_signature"}`: an SSH signature over `label` and `data` with the user's key."""
    key = ensure_key()
    got = _run(["-Y", "sign", "-q", "-f", str(key), "-n", NAMESPACE], _message(label, data))
    if got.returncode != 0:
        raise StateError(
            f"{key}: ssh-keygen could not sign ({_err(got)}); the key must be a private key "
            "ssh-keygen can read without a passphrase (or one an ssh-agent holds)"
        )
    return {"signer": PRINCIPAL, "key": _own_fingerprint(key), "ssh_signature": got.stdout.decode("ascii")}


@dataclass(frozen=True)
class SignerLine:
    """One line of an allowed-signers file, as ssh-keygen reads it."""

    number: int
    principals: tuple[str, ...]
    namespaces: tuple[str, ...] | None  # None: the line has no namespaces option (it allows every namespace)
    key: str  # key type and base64 key

    def allows(self, namespace: str) -> bool:
        return self.namespaces is not None and namespace in self.namespaces


def _fields(line: str) -> list[str]:
    """Whitespace-separated fields; double quotes keep spaces and commas inside one field."""
    out, cur, quoted = [], "", False
    for ch in line:
        if ch == '"':
            quoted = not quoted
            cur += ch
        elif ch.isspace() and not quoted:
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def _options(text: str) -> dict[str, str]:
    """`name="value",flag` -> {name: value, flag: ""}; commas inside quotes stay in the value."""
    out: dict[str, str] = {}
    cur, quoted, parts = "", False, []
    for ch in text:
        if ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            parts.append(cur)
            cur = ""
            continue
        cur += ch
    parts.append(cur)
    for part in parts:
        name, _, value = part.partition("=")
        out[name.strip().lower()] = value.strip().strip('"')
    return out


def parse_allowed_signers(text: str) -> list[SignerLine]:
    """The lines of an allowed-signers file (`principals [options] keytype key [comment]`); blank lines,
    comments and lines that are not of that shape are left out."""
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = _fields(line)
        if len(fields) < 3:
            continue
        principals = tuple(p for p in fields[0].strip('"').split(",") if p)
        if _is_key_type(fields[1]):
            options, key = {}, fields[1:3]
        elif len(fields) >= 4 and _is_key_type(fields[2]):
            options, key = _options(fields[1]), fields[2:4]
        else:
            continue
        spaces = options.get("namespaces")
        namespaces = None if spaces is None else tuple(n.strip() for n in spaces.split(",") if n.strip())
        out.append(SignerLine(number=number, principals=principals, namespaces=namespaces, key=" ".join(key)))
    return out


def _is_key_type(field: str) -> bool:
    return field.startswith(("ssh-", "ecdsa-", "sk-", "rsa-"))


class Signers:
    """The signers the configuration chose: the allowed-signers lines for this namespace (and principals)."""

    def __init__(
        self, path: Path, lines: list[SignerLine], wanted: tuple[str, ...] | None, left_out: list[str]
    ) -> None:
        self.path = path
        self.lines = lines
        self.wanted = wanted
        self.left_out = left_out

    @property
    def principals(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p for line in self.lines for p in line.principals))

    def file_text(self) -> str:
        """The chosen lines alone, one principal each, restricted to the namespace (what `-Y verify` reads)."""
        return "".join(f'{p} namespaces="{NAMESPACE}" {line.key}\n' for line in self.lines for p in line.principals)

    def describe(self) -> str:
        who = ", ".join(self.principals) or "none"
        narrowed = f" (narrowed by {PRINCIPALS_ENV}={','.join(self.wanted)})" if self.wanted else ""
        return f'{self.path}: principals {who} with namespaces="{NAMESPACE}"{narrowed}'


def configured_principals() -> tuple[str, ...] | None:
    """`GB300LANE_PRINCIPALS` as a tuple; None when unset (every principal of the namespace's lines)."""
    raw = os.environ.get(PRINCIPALS_ENV)
    if raw is None or not raw.strip():
        return None
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def chosen_signers() -> Signers | None:
    """The signers the configuration chose; None when there is no allowed-signers file."""
    path = allowed_signers_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StateError(
            f"{path}: the allowed-signers file is unreadable ({exc}); restore it (one line per signer: "
            f'principal namespaces="{NAMESPACE}" ssh-ed25519 AAAA...)'
        ) from None
    wanted = configured_principals()
    lines, left_out = [], []
    for line in parse_allowed_signers(text):
        if not line.allows(NAMESPACE):
            left_out.append(f'line {line.number} ({",".join(line.principals)}): no namespaces="{NAMESPACE}"')
            continue
        keep = tuple(p for p in line.principals if wanted is None or p in wanted)
        if not keep:
            left_out.append(f"line {line.number} ({','.join(line.principals)}): not in {PRINCIPALS_ENV}")
            continue
        lines.append(SignerLine(number=line.number, principals=keep, namespaces=line.namespaces, key=line.key))
    return Signers(path, lines, wanted, left_out)


def verify(label: str, data: bytes, found: object) -> tuple[SignatureStatus, str]:
    """Whether `found` (as `sign` made it) signs `label` and `data` for a signer the configuration chose; and one
    line saying so. The principal is looked up from the signature's key in the chosen lines, never read from
    `found`."""
    if not isinstance(found, dict) or not isinstance(found.get("ssh_signature"), str):
        if isinstance(found, dict) and "hmac_sha256" in found:
            return "unsigned", (
                "carries a keyed seal under a state key, not a signature: anyone who can write the "
                "state directory can make one; re-register and run the card again"
            )
        return "unsigned", "carries no signature"
    chosen = chosen_signers()
    if chosen is None:
        return (
            "no_signers",
            f"signed by key {found.get('key')}, but there is no allowed-signers file ({allowed_signers_path()})",
        )
    message = _message(label, data)
    with tempfile.TemporaryDirectory() as tmp:
        sig = Path(tmp) / "data.sig"
        sig.write_text(found["ssh_signature"], encoding="ascii")
        principal: str | None = None
        if chosen.lines:
            signers = Path(tmp) / "allowed_signers"
            signers.write_text(chosen.file_text(), encoding="utf-8")
            names = chosen.principals
            if len(names) == 1:
                principal = names[0]
            else:
                got = _run(["-Y", "find-principals", "-f", str(signers), "-n", NAMESPACE, "-s", str(sig)])
                lines = got.stdout.decode("utf-8", "replace").split() if got.returncode == 0 else []
                principal = lines[0] if lines else None
            if principal is not None:
                checked = _run(
                    ["-Y", "verify", "-f", str(signers), "-I", principal, "-n", NAMESPACE, "-s", str(sig)], message
                )
                if checked.returncode == 0:
                    return "ok", f"signed by {principal} (key {found.get('key')}), a signer {chosen.path} chooses"
        valid = _run(["-Y", "check-novalidate", "-n", NAMESPACE, "-s", str(sig)], message)
    if valid.returncode == 0:
        return "not_allowed", (
            f"signed by key {found.get('key')}, which is not an allowed signer of this "
            f"namespace ({chosen.describe()}): a forged or foreign signature"
        )
    return "mismatch", "its signature does not match its content (edited after it was signed)"


def check_key() -> str:
    """Sign a test message with the signing key and verify it as any record is verified; the principal it
    verifies for. StateError naming the key and the fix when it cannot (a garbage, zeroed or foreign key):
    a transition asks this before it stops anything, since it signs its record at the end."""
    nonce = secrets.token_bytes(16)
    key = signing_key_path()
    made = sign("preflight", nonce)
    status, text = verify("preflight", nonce, made)
    if status != "ok":
        raise StateError(
            f"{key}: a test message signed with the signing key does not verify ({text}); the key's "
            f'public half must be a signer of {allowed_signers_path()} with namespaces="{NAMESPACE}" '
            "(restore the key that is, or add this key's line: `gb300lane verify` prints it)"
        )
    return text
