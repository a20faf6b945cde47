"""A card's chain of custody, link by link, without re-scoring: the registration, the card file, the sealed
manifests and every file they list, the boot reports and the verdicts' pointers (`walk`).

`cards.record.card_custody` adds the re-score of every verdict over its receipts on top; this part reads no
verdict's inputs, so the readers below those (the noise ledger) can ask whether a receipts directory's chain
holds (`cards.record.verified`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, JsonValue

from gb300lane.cards.decide.verdict import Verdict
from gb300lane.cards.record.receipts import MANIFEST_SEAL, Receipts
from gb300lane.cards.schema import Card, gates_hash, gates_payload
from gb300lane.errors import LaneError
from gb300lane.fsio import sha256_file
from gb300lane.keyed import check_seal
from gb300lane.models import FrozenModel
from gb300lane.paths import writeup_receipts_dirs

LinkStatus = Literal["ok", "broken", "note", "unproven"]


class Link(FrozenModel):
    """One link of a chain of custody, checked."""

    kind: str = Field(
        description="registration, recipe, manifest, file, boot, verdict, rescore, ledger, promotion, ..."
    )
    file: str | None = Field(default=None, description="The file the link is about, where it is one.")
    status: LinkStatus = Field(
        description="ok, broken (it does not hold), note (holds nothing, says something), or "
        "unproven (nothing on record can show it holds: the chain is not called intact)."
    )
    detail: str = Field(description="One line: what was checked and what was found.")

    def line(self) -> str:
        mark = {"ok": "ok    ", "broken": "BROKEN", "note": "note  ", "unproven": "UNPROVEN"}[self.status]
        where = f"{self.file}: " if self.file else ""
        return f"{mark} {self.kind:<12} {where}{self.detail}"


class Chain(FrozenModel):
    """A whole chain, link by link; `ok` when no link is broken."""

    subject: str = Field(description="What the chain is of: a card's receipts directory, or production.")
    links: tuple[Link, ...] = Field(description="Every link checked, in chain order.")

    @property
    def ok(self) -> bool:
        return self.first_break is None

    @property
    def first_break(self) -> Link | None:
        return next((link for link in self.links if link.status == "broken"), None)

    @property
    def unproven(self) -> Link | None:
        """The first link nothing on record can show holds; the chain is then not called intact."""
        return next((link for link in self.links if link.status == "unproven"), None)

    def to_text(self) -> str:
        lines = [f"{self.subject}:"] + [f"  {link.line()}" for link in self.links]
        br, up = self.first_break, self.unproven
        lines.append(
            f"  chain breaks at {br.file or br.kind}: {br.detail}"
            if br is not None
            else f"  chain not proven at {up.file or up.kind}: {up.detail}"
            if up is not None
            else f"  chain intact ({len(self.links)} links)"
        )
        return "\n".join(lines)

    def as_json(self) -> dict[str, JsonValue]:
        br, up = self.first_break, self.unproven
        return {
            "subject": self.subject,
            "ok": self.ok,
            "proven": up is None,
            "breaks_at": br.model_dump() if br else None,
            "unproven_at": up.model_dump() if up else None,
            "links": [link.model_dump() for link in self.links],
        }


def _shipped(rec: Receipts) -> bool:
    """The write-up's receipts, shipped inside the package: their manifest is unsealed (no user key made it)."""
    try:
        return rec.root.resolve() in {d.resolve() for d in writeup_receipts_dirs()}
    except (OSError, LaneError):
        return False


def _sha(path: Path) -> str:
    """The file's sha256; `unreadable` when it cannot be read (a directory in its place, no permission)."""
    try:
        return sha256_file(path)
    except OSError:
        return "unreadable"


def _rel(rec: Receipts, path: Path) -> str:
    try:
        return str(path.relative_to(rec.root))
    except ValueError:
        return str(path)


def _json(path: Path) -> tuple[Any, str | None]:
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, ValueError) as exc:
        return None, f"unreadable ({type(exc).__name__}: {exc})"


#: Re-scores verdict `number` (as read from `name`) over its receipts: (receipts, card, verdict, name, number, every
#: verdict number) -> its link.
Rescorer = Callable[[Receipts, Card, Verdict, str, int, list[int]], "Link"]


def walk(rec: Receipts, rescorer: Rescorer | None = None) -> Chain:
    """Check a card's receipts directory link by link (`cards.record.card_custody`'s docstring); never raises for a bad
    link. `rescorer` re-scores each verdict over its receipts (None: the links of files, seals and pointers only)."""
    links: list[Link] = []
    subject = f"card receipts {rec.root}"

    def add(kind: str, status: LinkStatus, detail: str, file: str | None = None) -> None:
        links.append(Link(kind=kind, file=file, status=status, detail=detail))

    # -- registration, card file, frozen gates
    try:
        reg = rec.registration()
    except (LaneError, ValueError) as exc:
        add("registration", "broken", f"unreadable ({_first_line(exc)})", "registration.json")
        return Chain(subject=subject, links=tuple(links))
    subject = f"card {reg.card} ({rec.root})"
    card: Card | None = None
    if not rec.card_file.is_file():
        add("registration", "broken", "card.yaml is missing", "card.yaml")
    elif _sha(rec.card_file) != reg.card_sha256:
        add(
            "registration",
            "broken",
            f"sha256 {_sha(rec.card_file)[:16]} is not the registered {reg.card_sha256[:16]} (edited after registration)",
            "card.yaml",
        )
    else:
        try:
            card = rec.card()
        except LaneError as exc:
            add("registration", "broken", _first_line(exc), "card.yaml")
    if card is not None:
        if gates_hash(card) != reg.gates_sha256:
            add("registration", "broken", "the gates differ from the registered gates sha256", "card.yaml")
        else:
            add(
                "registration",
                "ok",
                f"card {reg.card} registered {reg.registered_at}, gates sha256 {reg.gates_sha256[:16]}",
                "registration.json",
            )
    for arm_name, ref in sorted(reg.recipes.items()):
        add(
            "recipe",
            "note",
            f"arm {arm_name}: {ref.recipe} fingerprint {ref.fingerprint or 'not recorded'} at registration",
        )

    # -- manifests: seals, files, and one head that seals everything else
    shipped = _shipped(rec)
    manifests = rec.manifests()
    covered: set[str] = set()
    if not manifests:
        add(
            "manifest", "broken", "no manifest: the run has not finished, or manifest.json was removed", "manifest.json"
        )
    for path in manifests:
        name = _rel(rec, path)
        body, problem = _json(path)
        if problem or not isinstance(body, dict) or not isinstance(body.get("files"), dict):
            add("manifest", "broken", problem or "not a manifest (no files mapping)", name)
            continue
        found_seal = body.pop("seal", None)
        if shipped and found_seal is None:
            add("manifest", "note", "shipped with the package (the write-up's record; not signed by a user key)", name)
        else:
            status, text = check_seal(MANIFEST_SEAL, body, found_seal)
            add("manifest", "ok" if status == "ok" else "broken", text, name)
        bad = 0
        for rel, digest in sorted(body["files"].items()):
            covered.add(rel)
            p = rec.root / rel
            if not p.is_file():
                add("file", "broken", f"listed in {name} but missing", rel)
                bad += 1
            elif _sha(p) != digest:
                add(
                    "file",
                    "broken",
                    f"sha256 {_sha(p)[:16]} differs from {name}'s {str(digest)[:16]} (edited after it was sealed)",
                    rel,
                )
                bad += 1
        if not bad:
            add("file", "ok", f"{len(body['files'])} files match {name}")
    if manifests:
        heads = [p for p in manifests if _rel(rec, p) not in covered]
        for p in heads[:-1]:
            add("manifest", "broken", "not sealed by the later manifests (a second chain head)", _rel(rec, p))
        for p in rec.files():
            rel = _rel(rec, p)
            if rel not in covered and p not in manifests:
                add("file", "broken", "not sealed by any manifest (written after the last one, or added by hand)", rel)

    # -- boot reports: each arm booted what registration recorded
    if card is not None:
        for arm in card.arms:
            if (rec.arm_dir(arm.name) / "transcribed.json").is_file():
                add("boot", "note", f"arm {arm.name}: transcribed from the write-up (no boot report)")
                continue
            try:
                n = rec.finished_attempt(arm.name)
            except LaneError as exc:
                add("boot", "broken", _first_line(exc), _rel(rec, rec.arm_dir(arm.name) / "done.json"))
                continue
            if n is None:
                add("boot", "note", f"arm {arm.name}: not finished")
                continue
            boot_path = rec.attempt_dir(arm.name, n) / "boot.json"
            boot, problem = _json(boot_path)
            want = reg.recipes.get(arm.name)
            if problem or not isinstance(boot, dict):
                add("boot", "broken", problem or "not a boot report", _rel(rec, boot_path))
            elif boot.get("recipe") != arm.recipe:
                add(
                    "boot",
                    "broken",
                    f"booted recipe {boot.get('recipe')!r}, the arm is {arm.recipe}",
                    _rel(rec, boot_path),
                )
            elif want is not None and want.fingerprint and boot.get("fingerprint") != want.fingerprint:
                add(
                    "boot",
                    "broken",
                    f"booted fingerprint {boot.get('fingerprint')}, registration recorded {want.fingerprint} for {arm.recipe}",
                    _rel(rec, boot_path),
                )
            else:
                add(
                    "boot",
                    "ok",
                    f"arm {arm.name}: {arm.recipe} fingerprint {boot.get('fingerprint')}",
                    _rel(rec, boot_path),
                )

    # -- verdicts: pointers between them, the registered gates, and a re-score
    previous: tuple[int, str] | None = None
    numbers = rec.verdict_numbers()
    for n in numbers:
        path = rec.verdict_file(n)
        name = _rel(rec, path)
        data, problem = _json(path)
        try:
            verdict = Verdict.model_validate(data) if problem is None else None
        except ValueError as exc:
            problem = f"not a verdict ({_first_line(exc)})"
            verdict = None
        if verdict is None:
            add("verdict", "broken", problem or "unreadable", name)
            previous = (n, _sha(path))
            continue
        if n == 1 and card is not None and verdict.gates != gates_payload(card.gates):
            add("verdict", "broken", "verdict 1 applied gates other than the registered ones", name)
        if n > 1:
            if verdict.previous is None or previous is None or verdict.previous.number != previous[0]:
                add("rescore", "broken", f"does not point at verdict {n - 1}", name)
            elif verdict.previous.sha256 != previous[1]:
                add(
                    "rescore",
                    "broken",
                    f"points at verdict {previous[0]} with sha256 {verdict.previous.sha256[:16]}, "
                    f"the file has {previous[1][:16]}",
                    name,
                )
        if rescorer is not None and card is not None:
            links.append(rescorer(rec, card, verdict, name, n, numbers))
        previous = (n, _sha(path))
    return Chain(subject=subject, links=tuple(links))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
