"""The chain of custody of production: the ledger's keyed chain, the promotion, its verdict, boot report and recipe.

Every ledger event has a custody row whose SSH signature (`gb300lane.signing`) covers
the event as stored, what it rests on (the verdict file and the manifest that
seals it, the boot report, the recipe fingerprint, each with its sha256) and
the previous row's signature. `verify_production` walks:

    ledger rows -> the promotion of the production instance -> its verdict file
    (unchanged since the promotion) -> the card's receipts (`cards.record.card_custody`) ->
    the boot report (unchanged, same fingerprint) -> the recipe (same fingerprint now)

and `verify_everything` adds every card's receipts. Nothing here changes the
lane; `gb300lane verify` prints the chains.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from pydantic import JsonValue

from gb300lane import evidencelog, signing
from gb300lane.cards import Receipts, all_receipts, find_receipts, load_card
from gb300lane.cards.record.card_custody import Chain, Link, LinkStatus, verify_receipts
from gb300lane.cards.record.logged import logged_runs, missing, receipts_key, unlogged
from gb300lane.errors import LaneError
from gb300lane.fsio import sha256_file
from gb300lane.promote.ledger import CUSTODY_ORIGIN, CUSTODY_SEAL, CustodyRow, ledger_path, read_ledger
from gb300lane.promote.models import BootReportLink, CustodyLinks
from gb300lane.promote.state import check_witnesses
from gb300lane.recipes import KeyChange, content_values, diff_values, fingerprint, load_recipe


class _Add(Protocol):
    """Adds one link to the chain being built."""

    def __call__(self, kind: str, status: LinkStatus, detail: str, file: str | None = None) -> None: ...


def card_receipts(ref: str) -> Receipts:
    """A card argument: a receipts directory, or a card name / file (its newest registered receipts)."""
    p = Path(ref)
    if p.is_dir() and (p / "registration.json").is_file():
        return Receipts(p)
    card, _ = load_card(ref)
    return find_receipts(card.name)


def verify_card(ref: str) -> Chain:
    return verify_receipts(card_receipts(ref))


def verify_production() -> Chain:
    """Check production's chain link by link; a chain with one note when nothing was ever promoted."""
    links: list[Link] = []

    def add(kind: str, status: LinkStatus, detail: str, file: str | None = None) -> None:
        links.append(Link(kind=kind, file=file, status=status, detail=detail))

    path = ledger_path()
    try:
        opened = read_ledger()
        if opened is None:
            check_witnesses(None)
    except LaneError as exc:
        add("ledger", "broken", str(exc), str(path))
        return Chain(subject="production", links=tuple(links))
    if opened is None:
        add(
            "ledger",
            "note",
            "no promotion ledger and no other witness of a production: nothing was ever promoted",
            str(path),
        )
        return Chain(subject="production", links=tuple(links))
    with opened as ledger:
        try:
            check_witnesses(ledger)
        except LaneError as exc:
            add("ledger", "broken", str(exc), str(path))
            return Chain(subject="production", links=tuple(links))
        rows = ledger.custody_rows()
        events = {int(str(e["id"])): e for e in ledger.event_rows()}
        prod = ledger.production()
    records = _ledger_links(rows, events, add, str(path))
    if prod is None:
        add("production", "note", "the ledger records no production")
        return Chain(subject="production", links=tuple(links))
    add("production", "note", f"{prod.recipe} ({prod.instance}, fingerprint {prod.fingerprint}) since {prod.since}")
    promoted = [(e, lk) for e, lk in records if e.get("kind") == "promote" and e.get("instance") == prod.instance]
    if not promoted:
        add(
            "promotion",
            "broken",
            f"no promote event with a custody record put {prod.instance} into production",
            str(path),
        )
        return Chain(subject="production", links=tuple(links))
    event, promotion = promoted[-1]
    add(
        "promotion",
        "ok",
        f"event #{event['id']} {event['at']}: promote {event.get('previous') or '-'} -> {event['recipe']}"
        + (f" (forced: {event.get('reason')})" if event.get("forced") else ""),
    )
    _verdict_links(promotion, add)
    booted = [lk.boot_report for e, lk in records if e.get("instance") == prod.instance and lk.boot_report]
    _boot_links(booted[-1] if booted else None, prod.fingerprint, add)
    try:
        loaded = load_recipe(prod.recipe)
    except LaneError as exc:
        add("recipe", "broken", f"{prod.recipe} does not load now ({exc}); a restart could not boot it")
        return Chain(subject="production", links=tuple(links))
    now = fingerprint(loaded)
    if now != prod.fingerprint:
        add(
            "recipe",
            "broken",
            f"{prod.recipe} has fingerprint {now} now; production runs {prod.fingerprint} "
            "(the recipe changed since it was promoted: a restart would boot something else)",
        )
    else:
        add("recipe", "ok", f"{prod.recipe} still has fingerprint {now}")
    _content_links(prod.recipe, promotion, content_values(loaded), add)
    return Chain(subject="production", links=tuple(links))


def _keys(changes: tuple[KeyChange, ...]) -> str:
    return "; ".join(f"{c.key}: {c.old!r} -> {c.new!r}" for c in changes[:8]) + (
        f"; and {len(changes) - 8} more" if len(changes) > 8 else ""
    )


def _content_links(recipe: str, promotion: CustodyLinks, now: dict[str, JsonValue], add: _Add) -> None:
    """The recipe's whole content: as promoted, as it is now, and (on a verdict) as the card measured it."""
    if promotion.content is None:
        add(
            "content",
            "unproven",
            f"the promotion of {recipe} recorded its fingerprint alone, which leaves out "
            "speculative.*, env, extra_args and smoke: nothing on record shows that production runs what its card "
            "measured. The next promotion records the whole recipe (a card registered now binds it)",
        )
        return
    changed = diff_values(promotion.content, now)
    if changed:
        add(
            "content",
            "broken",
            f"{recipe} changed since it was promoted ({len(changed)} key"
            f"{'s' if len(changed) != 1 else ''}: {_keys(changed)}): a restart would boot something else; restore it, "
            "or run its card again and promote that",
        )
    else:
        add("content", "ok", f"{recipe} is the recipe promoted (content sha256 {str(promotion.content_sha256)[:16]})")
    verdict = promotion.verdict
    if promotion.forced or verdict is None or not verdict.receipts:
        return
    rec = Receipts(Path(str(verdict.receipts)))
    try:
        ref = rec.registration().candidate_ref(rec.card())
    except LaneError as exc:
        add(
            "content",
            "broken",
            f"the verdict's registration does not read ({str(exc).splitlines()[0]})",
            str(rec.registration_file),
        )
        return
    if ref is None or ref.content is None:
        add(
            "content",
            "unproven",
            "the verdict's registration did not record the candidate's resolved recipe: "
            "nothing shows the card measured what was promoted",
            str(rec.registration_file),
        )
        return
    measured = diff_values(ref.content, promotion.content)
    if measured:
        add(
            "content",
            "broken",
            f"production is not the candidate its card measured ({len(measured)} key"
            f"{'s' if len(measured) != 1 else ''}: {_keys(measured)})",
            str(rec.registration_file),
        )
    else:
        add("content", "ok", "production is the candidate its card measured, key for key", str(rec.registration_file))


def _ledger_links(
    rows: list[CustodyRow], events: dict[int, dict[str, JsonValue]], add: _Add, where: str
) -> list[tuple[dict[str, JsonValue], CustodyLinks]]:
    """Check the custody rows' chain and that each still covers its event; returns (event, links) of those that hold."""
    prev = CUSTODY_ORIGIN
    good: list[tuple[dict[str, JsonValue], CustodyLinks]] = []
    broken = 0
    covered: set[int] = set()
    for row in rows:
        eid = row.event_id
        covered.add(eid)
        if row.prev != prev:
            add(
                "ledger",
                "broken",
                f"custody row of event #{eid} does not follow the row before it (a row removed or reordered)",
                where,
            )
            broken += 1
        status, text = signing.verify(
            CUSTODY_SEAL,
            (row.prev + "\n" + row.record).encode("utf-8"),
            {"signer": signing.PRINCIPAL, "key": row.key_id, "ssh_signature": row.mac}
            if row.mac.startswith("-----BEGIN SSH SIGNATURE-----")
            else {"hmac_sha256": row.mac},
        )
        if status != "ok":
            add("ledger", "broken", f"custody row of event #{eid}: {text}", where)
            broken += 1
        prev = row.mac
        try:
            record = json.loads(row.record)
            links = CustodyLinks.model_validate(record.get("links") or {})
        except (ValueError, AttributeError):
            add("ledger", "broken", f"custody row of event #{eid} does not read back", where)
            broken += 1
            continue
        if events.get(eid) != record.get("event"):
            add(
                "ledger",
                "broken",
                f"event #{eid} differs from what its custody row recorded (the event was edited)",
                where,
            )
            broken += 1
            continue
        good.append((record["event"], links))
    first = min(covered) if covered else None
    for eid in sorted(events):
        if eid in covered:
            continue
        if first is None or eid < first:
            add("ledger", "note", f"event #{eid} predates custody records", where)
        else:
            add("ledger", "broken", f"event #{eid} has no custody record (inserted by hand?)", where)
            broken += 1
    if not broken:
        add("ledger", "ok", f"{len(rows)} custody rows chain and match their events", where)
    return good


def _verdict_links(links: CustodyLinks, add: _Add) -> None:
    verdict = links.verdict
    if verdict is None:
        add(
            "verdict",
            "note" if links.forced else "broken",
            "forced promotion: no verdict recorded" if links.forced else "the promotion recorded no verdict",
        )
        return
    file = verdict.file
    p = Path(file)
    if not p.is_file():
        add("verdict", "broken", "the verdict file the promotion rests on is gone", file)
    elif sha256_file(p) != verdict.sha256:
        add(
            "verdict",
            "broken",
            f"sha256 {sha256_file(p)[:16]} is not the {str(verdict.sha256)[:16]} the ledger "
            "recorded at promotion (edited since)",
            file,
        )
    else:
        add("verdict", "ok", f"{verdict.verdict}, unchanged since the promotion (sha256 {sha256_file(p)[:16]})", file)
    if verdict.manifest:
        m = Path(verdict.manifest)
        if not m.is_file() or sha256_file(m) != verdict.manifest_sha256:
            add(
                "manifest",
                "broken",
                "the manifest that sealed the verdict at promotion is gone or changed",
                verdict.manifest,
            )
    receipts = verdict.receipts
    if receipts:
        card_chain = verify_receipts(Receipts(Path(str(receipts))))
        for link in card_chain.links:
            if link.status == "broken" or link.kind in ("registration", "verdict"):
                file = str(Path(str(receipts)) / link.file) if link.file else str(receipts)
                add(f"card:{link.kind}", link.status, link.detail, file)


def _boot_links(report: BootReportLink | None, prod_fingerprint: str, add: _Add) -> None:
    if report is None:
        add("boot_report", "note", "no boot report recorded for the production instance")
        return
    file = report.file
    p = Path(file)
    if not p.is_file():
        add("boot_report", "broken", "the boot report recorded at promotion is gone", file)
        return
    if sha256_file(p) != report.sha256:
        add("boot_report", "broken", "sha256 differs from the one the ledger recorded (edited since)", file)
        return
    try:
        booted = json.loads(p.read_text(encoding="utf-8")).get("fingerprint")
    except (OSError, ValueError, AttributeError):
        add("boot_report", "broken", "unreadable", file)
        return
    if booted != prod_fingerprint:
        add("boot_report", "broken", f"booted fingerprint {booted}, production is {prod_fingerprint}", file)
    else:
        add("boot_report", "ok", f"unchanged; booted fingerprint {booted}", file)


def verify_evidence() -> Chain:
    """The evidence log: every line chains and is signed by a chosen signer, the config directory's head matches,
    every file it pinned is still there as entered, and every scored receipts directory is in it."""
    links: list[Link] = []

    def add(kind: str, status: LinkStatus, detail: str, file: str | None = None) -> None:
        links.append(Link(kind=kind, file=file, status=status, detail=detail))

    log = evidencelog.read_log(signatures="all")
    for br in log.breaks:
        add("log", "broken", br, log.path)
    for note in log.notes:
        add("log", "note", note, log.path)
    if log.ok:
        resets = [r for r in log.records if r.entry.kind == "reset"]
        add(
            "log",
            "ok",
            f"{len(log.records)} entries chain, each signed by a chosen signer"
            + (f"; reset at line {resets[-1].seq}: {resets[-1].entry.detail}" if resets else ""),
            log.path,
        )
    runs = logged_runs(log)
    for run in runs.values():
        gone = missing(run)
        for br in gone:
            add("receipts", "broken", br, run.receipts)
        if not gone:
            add(
                "receipts",
                "ok",
                f"card {run.card}: {len(run.files)} files as entered"
                + (f"; newest verdict {run.newest.number} {run.newest.verdict}" if run.newest else "")
                + (f" (adopted: {run.adopted})" if run.adopted else ""),
                run.receipts,
            )
    for rec in all_receipts():
        try:
            if rec.registration().transcribed:
                continue
        except LaneError:
            continue
        known = runs.get(receipts_key(rec.root))
        if known is None and not rec.verdict_numbers():
            continue
        for br in unlogged(rec.root, known):
            add("receipts", "broken", br, str(rec.root))
    if not links:
        add("log", "note", "the evidence log is empty: no card was registered with this state directory", log.path)
    return Chain(subject="evidence log", links=tuple(links))


def verify_everything() -> list[Chain]:
    """Production's chain, the evidence log and every registered card's receipts."""
    return [verify_production(), verify_evidence(), *(verify_receipts(rec) for rec in all_receipts())]
