"""The receipts directory of a card: layout, registration, manifests and loading.

    results/<date>-<card>/    (./results, or GB300LANE_RESULTS_DIR)
      card.yaml                 the card file as registered
      registration.json         gates hash, card hash, recipes + fingerprints, host
      arms/<ARM>/attempt-<n>/   boot.json, foreign.json, windows/<window>.json
      arms/<ARM>/done.json      which attempt finished (the resume state)
      arms/<ARM>/stage-<s>/     (group-sequential cards) stage s >= 2, laid out as above
      looks/look-<s>.json       (group-sequential cards, and cards with an extension) what look s decided
      extensions/extension-<k>.json   (`card extend`) the INCONCLUSIVE verdict extended and the stages planned
      arms/<ARM>/transcribed.json   (written-up cards only) the arm as transcribed
      verdicts/verdict-<n>.json
      report/verdict-<n>/       card.md and the PNG figures
      manifest.json             sha256 of every file once all arms are done
      manifest-<stage>.json     the same after each later stage

Every file here is written once (`gb300lane.fsio.write_once`); nothing is
ever replaced.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field, JsonValue, ValidationError

from gb300lane import __version__, evidencelog
from gb300lane.bench.models import WindowResult
from gb300lane.cards.cardfile import load_card, read_card_text
from gb300lane.cards.decide.data import (
    ArmData,
    BootFacts,
    NoiseFloor,
    TranscribedArm,
    WindowData,
    merge_boots,
    merge_stages,
)
from gb300lane.cards.decide.question import QuestionRun, plan_run
from gb300lane.cards.decide.results import CardPlan
from gb300lane.cards.decide.verdict import Verdict
from gb300lane.cards.record.arms import boot_facts_from_report, window_data_from_result
from gb300lane.cards.record.logged import earlier_runs, receipts_key
from gb300lane.cards.record.models import DoneReceipt, ForeignReceipt
from gb300lane.cards.schema import (
    Card,
    gates_hash,
    parse_card,
    planned_stages,
    question_runs,
    small_sample_refusals,
)
from gb300lane.errors import CardError, LaneError
from gb300lane.fsio import dumps_json, sha256_bytes, sha256_file, write_once
from gb300lane.keyed import seal
from gb300lane.lane.report import BootReport
from gb300lane.models import FrozenModel, format_validation_error
from gb300lane.paths import results_dir, writeup_receipts_dirs

_M = TypeVar("_M", bound=FrozenModel)


#: What a manifest's seal is labelled with (a seal of one kind never verifies another).
MANIFEST_SEAL = "card manifest"


class RecipeRef(FrozenModel):
    recipe: str = Field(description="Recipe name the arm boots.")
    fingerprint: str | None = Field(description="Recipe fingerprint at registration; None when not recorded.")
    content_sha256: str | None = Field(
        default=None,
        description="sha256 of the arm's whole resolved recipe at registration (every key that reaches "
        "argv, env, volumes and smoke; `recipes.content_hash`); None when registered before it was recorded.",
    )
    content: dict[str, JsonValue] | None = Field(
        default=None,
        description="The resolved recipe's leaf keys and values at registration (secrets as keyed "
        "digests): what promotion compares the recipe with, naming the keys that differ.",
    )


class WorkloadRef(FrozenModel):
    content_sha256: str = Field(description="The workload's content hash at registration (its manifest's).")
    files: dict[str, str] = Field(
        description="Each class file -> its sha256 at registration: what an edit is named by."
    )
    held_out_ids: tuple[str, ...] | None = Field(
        default=None, description="The held-out ids at registration; none: no split."
    )


class Registration(FrozenModel):
    schema_version: Literal[1] = Field(description="File format version.")
    card: str = Field(description="Card name.")
    title: str = Field(description="Card title.")
    registered_at: str = Field(description="UTC time the gates were frozen (ISO 8601).")
    gates_sha256: str = Field(description="sha256 of the gates, windows and arms: what may not change.")
    card_sha256: str = Field(description="sha256 of the card file as registered.")
    tool_version: str = Field(description="gb300lane version that registered it.")
    recipes: dict[str, RecipeRef] = Field(description="Arm -> recipe and fingerprint.")
    host: dict[str, Any] = Field(description="Host facts at registration.")
    transcribed: bool = Field(default=False, description="True for a written-up card whose receipts were transcribed.")
    plan: CardPlan | None = Field(
        default=None,
        description="Power and size at registration, from earlier control data (None when there was none).",
    )
    question: QuestionRun | None = Field(
        default=None,
        description="Which run of its question (the card and its candidate's resolved recipe) this is, "
        "the runs it follows and the share of each gate's alpha it spends; None when registered before runs were "
        "counted (the whole alpha).",
    )
    # Left out when the card's windows run only the builtin workload, so those registrations keep their bytes.
    workloads: dict[str, WorkloadRef] | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Each workload the windows name but builtin -> its content hash and files at registration; "
        "running or scoring refuses a workload that differs, naming the file.",
    )
    boot_sd_override: str | None = Field(
        default=None,
        description="Why a registered boot sd that the lane's noise ledger rules out was registered "
        "anyway (`card register --boot-sd-override`); absent when none was ruled out.",
    )

    def alpha_share(self) -> float:
        """The share of each gate's alpha this run spends (1.0 when its question has one run)."""
        return self.question.share if self.question is not None else 1.0

    def candidate_ref(self, card: Card) -> RecipeRef | None:
        """The candidate arm's recipe as registered."""
        return self.recipes.get(card.candidate.name)


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def host_facts() -> dict[str, str | int | None]:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "tool_version": __version__,
    }


def workload_refs(card: Card) -> dict[str, WorkloadRef] | None:
    """What the registration freezes of each workload the card's windows name (builtin, shipped, is left out)."""
    from gb300lane.workloads import BUILTIN, load_workload, select

    names = sorted({w.workload for w in card.windows} - {BUILTIN})
    if not names:
        return None
    for w in card.windows:
        for cls in w.classes if w.workload != BUILTIN else ():
            try:  # every window can draw its transcripts, or nothing is registered
                select(w.workload, cls, w.transcripts_per_class, held_out=w.held_out)
            except LaneError as exc:
                raise CardError(f"card {card.name}, window {w.name}: {exc}") from None
    out = {}
    for name in names:
        m = load_workload(name).manifest
        out[name] = WorkloadRef(
            content_sha256=m.content_sha256,
            files={c.file: c.sha256 for c in m.classes},
            held_out_ids=m.split.held_out_ids if m.split is not None else None,
        )
    return out


def workload_changes(registered: dict[str, WorkloadRef] | None, card: Card) -> list[str]:
    """How each registered workload differs now (the file, or the split), one line each; empty when none does."""
    from gb300lane.workloads import load_workload

    problems = []
    for name, ref in sorted((registered or {}).items()):
        try:
            w = load_workload(name)
        except LaneError as exc:
            problems.append(str(exc))
            continue
        if w.manifest.content_sha256 == ref.content_sha256:
            continue
        now = {c.file: c.sha256 for c in w.manifest.classes}
        named = [
            f"{w.folder / f}" + (" (gone)" if f not in now else "")
            for f in sorted(ref.files)
            if now.get(f) != ref.files[f]
        ]
        named += [f"{w.folder / f} (new)" for f in sorted(set(now) - set(ref.files))]
        held = w.manifest.split.held_out_ids if w.manifest.split is not None else None
        if held != ref.held_out_ids:
            named.append(f"{w.folder / 'manifest.json'} (its split)")
        problems.append(
            f"workload {name} changed after registration: {', '.join(named) or w.folder} "
            f"(content sha256 {ref.content_sha256[:12]} registered, {w.manifest.content_sha256[:12]} now)"
        )
    return problems


def _recipe_ref(recipe: str) -> RecipeRef:
    from gb300lane.recipes import content_hash, content_values, fingerprint, load_recipe  # the recipes package's

    loaded = load_recipe(recipe)
    values = content_values(loaded)
    return RecipeRef(
        recipe=recipe, fingerprint=fingerprint(loaded), content_sha256=content_hash(values), content=values
    )


class Receipts:
    """One card's receipts directory."""

    def __init__(self, root: Path, *, reused: bool = False) -> None:
        self.root = Path(root)
        #: True when `register` found these receipts already registered with the same gates.
        self.reused = reused

    # layout
    @property
    def card_file(self) -> Path:
        return self.root / "card.yaml"

    @property
    def registration_file(self) -> Path:
        return self.root / "registration.json"

    def arm_dir(self, arm: str, stage: int = 1) -> Path:
        base = self.root / "arms" / arm
        return base if stage == 1 else base / f"stage-{stage}"

    def attempt_dir(self, arm: str, n: int, stage: int = 1) -> Path:
        return self.arm_dir(arm, stage) / f"attempt-{n}"

    def look_file(self, look: int) -> Path:
        return self.root / "looks" / f"look-{look}.json"

    def look_numbers(self) -> list[int]:
        d = self.root / "looks"
        if not d.is_dir():
            return []
        return sorted(int(p.stem.split("-")[1]) for p in d.glob("look-*.json") if p.stem.split("-")[1].isdigit())

    def extension_file(self, k: int) -> Path:
        return self.root / "extensions" / f"extension-{k}.json"

    def extension_numbers(self) -> list[int]:
        d = self.root / "extensions"
        if not d.is_dir():
            return []
        return sorted(int(p.stem.split("-")[1]) for p in d.glob("extension-*.json") if p.stem.split("-")[1].isdigit())

    def verdict_file(self, n: int) -> Path:
        return self.root / "verdicts" / f"verdict-{n}.json"

    def report_dir(self, n: int) -> Path:
        return self.root / "report" / f"verdict-{n}"

    # reading
    def card(self) -> Card:
        if not self.card_file.is_file():
            raise CardError(f"{self.root}: no card.yaml; register the card first (gb300lane card register CARD)")
        return parse_card(read_card_text(self.card_file), str(self.card_file))

    def registration(self) -> Registration:
        if not self.registration_file.is_file():
            raise CardError(
                f"{self.root}: no registration.json; register the card first (gb300lane card register CARD)"
            )
        try:
            return Registration.model_validate_json(self.registration_file.read_bytes())
        except (OSError, ValueError) as exc:
            found = (
                format_validation_error(exc, first_only=True)
                if isinstance(exc, ValidationError)
                else (f"{type(exc).__name__}: {exc}")
            )
            raise CardError(
                f"{self.registration_file}: unreadable registration ({found}); restore it from a backup, or register "
                "the card again (`gb300lane card register CARD --fresh`)"
            ) from None

    def read_model(self, path: Path, model: type[_M]) -> _M:
        """A receipt read back into its model; CardError naming the file and the fix when it does not fit."""
        data = self.read_json(path)
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            raise CardError(
                f"{path}: not a {model.__name__.lower()} receipt ({format_validation_error(exc, first_only=True)}); "
                "the receipts directory is damaged: restore the file from a backup (receipts are write-once), or "
                "register the card again and run it"
            ) from None

    def read_json(self, path: Path) -> JsonValue:
        """A receipt's JSON as it stands (a manifest, a file a test or a tool reads raw); `read_model` types it."""
        try:
            got: JsonValue = json.loads(path.read_text(encoding="utf-8"))
            return got
        except (OSError, ValueError) as exc:
            raise CardError(
                f"{path}: unreadable receipt ({type(exc).__name__}: {exc}); the receipts directory is damaged: restore "
                "the file from a backup (receipts are write-once), or register the card again and run it"
            ) from None

    def write_json(self, path: Path, obj: Mapping[str, object]) -> Path:
        """Write a receipt once, as canonical JSON."""
        return write_once(path, dumps_json(obj))

    def write_model(self, path: Path, model: FrozenModel) -> Path:
        """Write a receipt once, as its model's JSON."""
        return self.write_json(path, model.model_dump(mode="json"))

    def verdict_numbers(self) -> list[int]:
        d = self.root / "verdicts"
        if not d.is_dir():
            return []
        return sorted(int(p.stem.split("-")[1]) for p in d.glob("verdict-*.json") if p.stem.split("-")[1].isdigit())

    def finished_attempt(self, arm: str, stage: int = 1) -> int | None:
        done = self.arm_dir(arm, stage) / "done.json"
        return self.read_model(done, DoneReceipt).attempt if done.is_file() else None

    def next_attempt(self, arm: str, stage: int = 1) -> int:
        d = self.arm_dir(arm, stage)
        n = [int(p.name.split("-")[1]) for p in d.glob("attempt-*")] if d.is_dir() else []
        return max(n, default=0) + 1

    def stages_done(self, card: Card) -> int:
        """Stages every arm has finished, counted from the first (a fixed design has one stage; `card extend`
        adds the registered extension's)."""
        n = 0
        for stage in range(1, planned_stages(card) + 1):
            if all(self.finished_attempt(a.name, stage) is not None for a in card.arms):
                n = stage
            else:
                break
        return n

    def check_frozen(self, card: Card) -> None:
        """Refuse a card whose gates differ from the registered ones, or whose workloads changed since."""
        reg = self.registration()
        if gates_hash(card) != reg.gates_sha256:
            raise CardError(
                f"{self.root}: the card's gates, windows or arms changed after registration "
                f"(registered gates sha256 {reg.gates_sha256[:12]}, now {gates_hash(card)[:12]}); "
                "gates are frozen: restore the card file, or change a gate through `gb300lane card rescore`"
            )
        changed = workload_changes(reg.workloads, card)
        if changed:
            raise CardError(
                f"{self.registration_file}: {'; '.join(changed)}; the verdict would not be about the "
                "registered traffic: restore the workload's files, or register the card again (--fresh)"
            )

    def load_arms(self, card: Card, stages: int | None = None) -> list[ArmData]:
        """Every arm's data, transcribed or measured; arms not finished are left out.

        A group-sequential card's stages are merged, up to `stages` (default:
        every stage all arms finished): stage s's rounds follow stage s - 1's.
        """
        upto = self.stages_done(card) if stages is None else stages
        out = []
        for arm in card.arms:
            tr = self.arm_dir(arm.name) / "transcribed.json"
            if tr.is_file():
                t = self.read_model(tr, TranscribedArm)
                out.append(
                    ArmData(
                        arm=arm.name,
                        recipe=arm.recipe,
                        role=arm.role,
                        source="transcribed",
                        boot=t.boot,
                        windows=t.windows,
                    )
                )
                continue
            boots: list[BootFacts] = []
            parts: dict[str, list[WindowData]] = {}
            for stage in range(1, max(upto, 1) + 1):
                n = self.finished_attempt(arm.name, stage)
                if n is None:
                    break
                adir = self.attempt_dir(arm.name, n, stage)
                ff = adir / "foreign.json"
                foreign = self.read_model(ff, ForeignReceipt).foreign_clients if ff.is_file() else None
                boots.append(boot_facts_from_report(self.read_model(adir / "boot.json", BootReport), foreign))
                for w in card.windows:
                    wf = adir / "windows" / f"{w.name}.json"
                    if wf.is_file():
                        parts.setdefault(w.name, []).append(
                            window_data_from_result(self.read_model(wf, WindowResult), w.name)
                        )
            if not boots:
                continue
            out.append(
                ArmData(
                    arm=arm.name,
                    recipe=arm.recipe,
                    role=arm.role,
                    source="measured",
                    boot=merge_boots(boots),
                    windows={k: merge_stages(v) for k, v in parts.items()},
                )
            )
        return out

    def noise_floor_stated(self) -> NoiseFloor | None:
        """A written-up card's published noise floor (used only where rounds were not published)."""
        p = self.root / "noise_floor.json"
        return self.read_model(p, NoiseFloor) if p.is_file() else None

    # manifests
    def files(self) -> list[Path]:
        return sorted(p for p in self.root.rglob("*") if p.is_file() and not p.name.startswith("."))

    def write_manifest(self, stage: str) -> Path:
        """manifest.json the first time, manifest-<stage>.json after; each hashes every file present."""
        reg = self.registration()
        name = "manifest.json" if not (self.root / "manifest.json").exists() else f"manifest-{stage}.json"
        evidencelog.require_intact(f"seal {self.root / name}")
        body = {
            "schema_version": 1,
            "card": reg.card,
            "stage": stage,
            "written_at": utc_now(),
            "tool_version": __version__,
            "recipes": {
                k: v.model_dump(exclude={"content", "content_sha256"} if v.content_sha256 is None else {"content"})
                for k, v in reg.recipes.items()
            },
            # a transcribed card's host is the write-up's box, not the one that copied it
            "host": reg.host if reg.transcribed else host_facts(),
            "transcribed": reg.transcribed,
            "files": {str(p.relative_to(self.root)): sha256_file(p) for p in self.files()},
        }
        # The seal (an SSH signature with the user's key, outside the results and state directories) is what a
        # hand edit, or a consistent rewrite without that key, cannot reproduce; `gb300lane.cards.record.card_custody` checks
        # it before any receipt counts.
        body["seal"] = seal(MANIFEST_SEAL, body)
        written = self.write_json(self.root / name, body)
        self.enter_stage(reg, stage, name)
        return written

    def enter_stage(self, reg: Registration, stage: str, manifest: str, *, detail: str | None = None) -> None:
        """Enter a sealed stage in the evidence log: the manifest, and the verdict a verdict stage wrote."""
        card = self.card()
        cand = reg.candidate_ref(card)
        files = {manifest: sha256_file(self.root / manifest)}
        kind: evidencelog.EntryKind = (
            "extension" if stage.startswith("extension-") else "report" if stage.startswith("report-") else "run"
        )
        word: Literal["PASS", "FAIL", "INCONCLUSIVE"] | None = None
        number = None
        if stage.startswith("verdict-") and stage.split("-", 1)[1].isdigit():
            number = int(stage.split("-", 1)[1])
            verdict = self.read_model(self.verdict_file(number), Verdict)
            word = verdict.verdict
            kind = "rescore" if number > 1 and verdict.changes else "verdict"
            files[str(self.verdict_file(number).relative_to(self.root))] = sha256_file(self.verdict_file(number))
        evidencelog.append(
            evidencelog.Entry(
                kind=kind,
                at=evidencelog.utcnow(),
                card=reg.card,
                receipts=receipts_key(self.root),
                stage=stage,
                candidate=card.candidate.recipe,
                candidate_sha256=cand.content_sha256 if cand else None,
                gates_sha256=reg.gates_sha256,
                files=files,
                verdict=word,
                number=number,
                detail=detail,
            ),
            action=f"enter {manifest} of {self.root} in the evidence log",
        )

    def manifests(self) -> list[Path]:
        """manifest.json, then manifest-<stage>.json in the order they were written."""
        first = [self.root / "manifest.json"] if (self.root / "manifest.json").is_file() else []
        later = sorted(self.root.glob("manifest-*.json"), key=lambda p: (_written_at(p), p.name))
        return first + later

    def manifest_files(self, path: Path) -> dict[str, str]:
        """A manifest's `files`: each receipt's path inside the directory -> its sha256."""
        m = self.read_json(path)
        files = m.get("files") if isinstance(m, dict) else None
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise CardError(
                f"{path}: not a manifest (no files -> sha256 mapping); the receipts directory is damaged: "
                "restore the file from a backup (receipts are write-once)"
            )
        return {k: str(v) for k, v in files.items()}

    def verify_manifest(self, name: str = "manifest.json") -> list[str]:
        """Files whose sha256 no longer matches the manifest (empty when intact)."""
        bad = []
        for rel, digest in self.manifest_files(self.root / name).items():
            p = self.root / rel
            if not p.is_file() or sha256_file(p) != digest:
                bad.append(rel)
        return bad


def _written_at(path: Path) -> str:
    try:
        return str(json.loads(path.read_text(encoding="utf-8")).get("written_at", ""))
    except (OSError, ValueError, AttributeError):
        return ""


def _dated_dir(base: Path, card: Card, date: str, fresh: bool, run: str | None = None) -> Path:
    stem = f"{date}-{card.name}" + (f"-{run}" if run else "")
    return new_run_dir(base, stem) if fresh else base / stem


def new_run_dir(base: Path, stem: str) -> Path:
    """`base/stem`, or `base/stem-runN` with the first N from 2 that does not exist yet."""
    root = base / stem
    n = 1
    while root.exists():
        n += 1
        root = base / f"{stem}-run{n}"
    return root


def register(
    card: Card,
    card_text: str,
    *,
    base: Path | None = None,
    fresh: bool = False,
    date: str | None = None,
    recipe_ref: Callable[[str], RecipeRef] = _recipe_ref,
    plan: CardPlan | None = None,
    run: str | None = None,
    new_question: str | None = None,
    aside: str | None = None,
    boot_sd_override: str | None = None,
) -> Receipts:
    """Freeze the card's gates: write card.yaml and registration.json once, and enter them in the evidence log.

    Registering the same gates again returns the existing receipts (marked
    `reused`; `receipts_state` says what they hold); different gates for a card
    already registered that day are refused (a new day, or `fresh`, starts a
    new directory). `run` names a run of its own (`reproduce`:
    `<date>-<card>-reproduce`), which never shares a directory with `card register`.

    A new directory is a run of the card's question (its name and the candidate's resolved recipe): the
    evidence log's earlier runs of it decide which (`cards.decide.question.plan_run`), and the share of each
    gate's alpha it spends; a question whose runs are spent, or whose gates changed, is refused unless
    `new_question` says why this is a new one (recorded, and printed on every later verdict). A run registered
    `aside` (a lane calibration's replicate, `card reproduce`'s run) is no question's run and never promotion
    evidence; `aside` says why.
    """
    refused = small_sample_refusals(card)
    if refused:
        raise CardError("; ".join(refused))
    workloads = workload_refs(card)  # before anything is written: a window its workload cannot fill is refused
    base = base or results_dir()
    date = date or datetime.now(UTC).strftime("%Y-%m-%d")
    rec = Receipts(_dated_dir(base, card, date, fresh, run))
    if rec.registration_file.exists():
        reg = rec.registration()
        if reg.gates_sha256 != gates_hash(card):
            raise CardError(
                f"{rec.root}: card {card.name} is already registered with other gates "
                f"(sha256 {reg.gates_sha256[:12]}); gates are frozen once registered: keep the registered "
                "gates, change them through `gb300lane card rescore`, or register with --fresh for a new run"
            )
        if new_question is not None:
            raise CardError(
                f"{rec.root}: card {card.name} is already registered today with the same gates; "
                "--new-question starts a new run: add --fresh"
            )
        return Receipts(rec.root, reused=True)
    refs = {a.name: recipe_ref(a.recipe) for a in card.arms}
    question: QuestionRun | str | None = None
    if aside is None:
        question = next_run(card, refs[card.candidate.name], new_question)
        if isinstance(question, str):
            raise CardError(question)
    else:
        evidencelog.require_intact(f"register card {card.name}")
    write_once(rec.card_file, card_text)
    reg = Registration(
        schema_version=1,
        card=card.name,
        title=card.title,
        registered_at=utc_now(),
        gates_sha256=gates_hash(card),
        card_sha256=sha256_bytes(card_text),
        tool_version=__version__,
        recipes=refs,
        host=host_facts(),
        plan=plan,
        question=question,
        workloads=workloads,
        boot_sd_override=boot_sd_override,
    )
    # absent unless given, so a registration without one keeps the bytes it always had
    rec.write_json(
        rec.registration_file, reg.model_dump(mode="json", exclude=None if boot_sd_override else {"boot_sd_override"})
    )
    enter_registration(rec, card, reg, aside=aside)
    return rec


def next_run(card: Card, candidate: RecipeRef | None = None, new_question: str | None = None) -> QuestionRun | str:
    """Which run of its question a registration of `card` now would be (the evidence log's earlier runs of it),
    or why it would be refused; what `register` records, and what `card plan` and `card register` size for."""
    log = evidencelog.require_intact(f"register card {card.name}")
    cand = candidate or _recipe_ref(card.candidate.recipe)
    earlier = earlier_runs(log, card.name, cand.content_sha256)
    others = earlier_runs(log, card.name, cand.content_sha256, other=True)
    return plan_run(
        card.name, cand.content_sha256, question_runs(card), gates_hash(card), earlier, new_question, others
    )


def planned_run(card: Card) -> tuple[QuestionRun | str, str | None]:
    """`next_run` as `card plan` reads it: where the evidence log does not hold, a plan is still made (at the whole
    alpha) and the second item says why; registering then refuses."""
    try:
        return next_run(card), None
    except LaneError as exc:
        return str(exc), str(exc)


def enter_registration(
    rec: Receipts,
    card: Card,
    reg: Registration,
    *,
    kind: Literal["registration", "adopted"] = "registration",
    detail: str | None = None,
    aside: str | None = None,
) -> None:
    """Enter a registration in the evidence log: registration.json and card.yaml, the candidate's resolved recipe,
    and the run of its question."""
    cand = reg.candidate_ref(card)
    q = reg.question
    evidencelog.append(
        evidencelog.Entry(
            kind=kind,
            at=evidencelog.utcnow(),
            card=reg.card,
            receipts=receipts_key(rec.root),
            candidate=card.candidate.recipe,
            candidate_sha256=cand.content_sha256 if cand else None,
            gates_sha256=reg.gates_sha256,
            files={"registration.json": sha256_file(rec.registration_file), "card.yaml": sha256_file(rec.card_file)},
            run=q.run if q else None,
            runs=q.runs if q else None,
            new_question=q.new_question if q else None,
            detail=detail,
            aside=aside,
        ),
        action=f"enter the registration of {rec.root} in the evidence log",
    )


class ReceiptsState(FrozenModel):
    """What a registered receipts directory holds, and what to run next: `card register` says it when it reuses one."""

    receipts: str = Field(description="The receipts directory.")
    registered_at: str = Field(description="When its gates were frozen.")
    state: Literal["registered", "partial", "finished", "scored"] = Field(
        description="registered (no arm run), partial (some arms or stages), finished (every arm), scored (a verdict)."
    )
    finished: tuple[str, ...] = Field(description="Arms that finished.")
    unfinished: tuple[str, ...] = Field(description="Arms not finished (an interrupted attempt resumes as a new one).")
    verdicts: tuple[str, ...] = Field(description="Verdicts written, as `N VERDICT`.")
    next: tuple[str, ...] = Field(description="Commands that apply, first the usual one.")

    def describe(self) -> str:
        """One line: what was found, and what to do."""
        found = {
            "registered": "no arm has run yet",
            "partial": f"arms {', '.join(self.finished)} finished, {', '.join(self.unfinished)} not yet",
            "finished": f"every arm finished ({', '.join(self.finished)}), not scored yet",
            "scored": f"every arm finished and scored ({'; '.join(f'verdict {v}' for v in self.verdicts)})",
        }[self.state]
        return (
            f"already registered in {self.receipts} with the same gates ({self.registered_at}): {found}; "
            + "; or ".join(f"`{c}`" for c in self.next)
        )


def receipts_state(rec: Receipts, card_ref: str | None = None) -> ReceiptsState:
    """What `rec` holds (finished, partial, scored) and the commands that take it on from there."""
    card = rec.card()
    ref = card_ref or card.name
    finished = tuple(a.name for a in card.arms if rec.finished_attempt(a.name) is not None)
    unfinished = tuple(a.name for a in card.arms if a.name not in finished)
    verdicts = tuple(f"{n} {read_verdict(rec, n).verdict}" for n in rec.verdict_numbers())
    fresh = f"gb300lane card register {ref} --fresh"
    nxt: tuple[str, ...]
    if verdicts:
        state: Literal["registered", "partial", "finished", "scored"] = "scored"
        nxt = (f"gb300lane card show {ref}", f'gb300lane card rescore {ref} --reason "..." --set GATE.KEY=VALUE', fresh)
        if (
            card.design.extension is not None
            and verdicts[-1].endswith(" INCONCLUSIVE")
            and rec.stages_done(card) < planned_stages(card)
        ):
            nxt = (f"gb300lane card extend {ref}", *nxt)
    elif not unfinished:
        state, nxt = "finished", (f"gb300lane card score {ref}", fresh)
    elif finished or any(rec.arm_dir(a.name).is_dir() for a in card.arms):
        state, nxt = "partial", (f"gb300lane card run {ref}", fresh)
    else:
        state, nxt = "registered", (f"gb300lane card run {ref}",)
    return ReceiptsState(
        receipts=str(rec.root),
        registered_at=rec.registration().registered_at,
        state=state,
        finished=finished,
        unfinished=unfinished,
        verdicts=verdicts,
        next=nxt,
    )


#: Where `card calibrate --lane` keeps its replicates (`instrument.lanecal.calibration_root`), under the results directory.
LANE_CALIBRATIONS = ("calibrations", "*-lane-s*")


def lane_receipts(base: Path | None = None) -> list[Receipts]:
    """What the lane measured: `all_receipts` and every replicate of its lane calibrations (each a card registered,
    run and scored on the lane), oldest registration first. For the lane's noise and timings (the noise ledger,
    the plans' control data and boot seconds); never a verdict's evidence: a calibration replicate promotes
    nothing, so `all_receipts` leaves them out."""
    root = (base or results_dir()).joinpath(LANE_CALIBRATIONS[0])
    replicates = [r for d in sorted(root.glob(LANE_CALIBRATIONS[1])) if d.is_dir() for r in sorted(d.iterdir())]
    return _registered(_receipts_dirs(base) + replicates)


def read_verdict(rec: Receipts, n: int) -> Verdict:
    """Verdict `n` of the receipts, validated."""
    return rec.read_model(rec.verdict_file(n), Verdict)


def find_receipts(card_name: str, base: Path | None = None) -> Receipts:
    """The newest registered receipts directory of a card."""
    found = all_receipts(base, card_name)
    if not found:
        raise CardError(
            f"card {card_name}: no registered receipts under {base or results_dir()}; "
            f"run `gb300lane card register {card_name}` first"
        )
    return found[-1]


def receipts_for(ref: str) -> Receipts:
    """A card's receipts from what a command line names: a receipts directory, or a card name or file (its newest)."""
    p = Path(ref)
    if p.is_dir() and (p / "registration.json").is_file():
        return Receipts(p)
    card, _ = load_card(ref)
    return find_receipts(card.name)


def all_receipts(base: Path | None = None, card_name: str | None = None) -> list[Receipts]:
    """Registered receipts directories, oldest registration first.

    Without `base`: the results directory and the write-up's transcribed
    receipts shipped with the package (read-only: scoring refuses them).
    """
    return _registered(_receipts_dirs(base), card_name)


def _receipts_dirs(base: Path | None) -> list[Path]:
    if base is not None:
        return sorted(base.iterdir()) if base.is_dir() else []
    # In a checkout's root ./results holds the write-up's runs too: each directory is read once.
    here = sorted(results_dir().iterdir()) if results_dir().is_dir() else []
    return list({d.resolve(): d for d in [*here, *writeup_receipts_dirs()] if d.is_dir()}.values())


def _registered(dirs: list[Path], card_name: str | None = None) -> list[Receipts]:
    """The registered receipts among `dirs` (of `card_name` only, when given), oldest registration first."""
    out = []
    for d in dirs:
        r = Receipts(d)
        if not r.registration_file.is_file():
            continue
        try:
            reg = r.registration()
        except (ValueError, CardError):
            continue
        if card_name is None or reg.card == card_name:
            out.append((reg.registered_at, d.name, r))
    return [r for _, _, r in sorted(out, key=lambda x: (x[0], x[1]))]
