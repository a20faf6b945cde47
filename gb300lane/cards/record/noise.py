"""The lane's noise ledger: the between-boot sd that every scored card's own controls measured, pooled per lane.

A bracketed card boots its control recipe twice (A and A2) on the lane it judges, so A against A2 is an A/A
comparison of two boots of one recipe. Per unit (a metric over the card's primary window, all cells together
or one class x concurrency cell), the two boots' means over the transcripts both ran give one between-boot
mean square with one degree of freedom, seen against the within-boot variance of those transcripts (n - 1
degrees of freedom), all relative to the grand mean as `cards.boots` does for a boot study:

    MS_b = n sum_j (m_j - 1)^2 / 1        E[MS_b] = s_e^2 + n s_b^2
    MS_r = sum (y - m_j - t_i + 1)^2 / (n - 1)

Over K cards, s_b^2 is the mean of (MS_b - MS_r) / n (its max(0, .) is the estimate), its degrees of freedom
Satterthwaite's, and the one-sided 95% bounds come from sum_c MS_b,c / n_c ~ theta chi2(nu) / nu with theta the
sum of the cards' expected MS_b / n and nu Satterthwaite's effective df over cards of unequal weight (K for
cards of one size): upper = nu mean(MS_b / n) / chi2.ppf(0.05, nu) - mean(MS_r / n). Each card adds
a degree of freedom, so a lane that runs cards learns its own noise without a boot study.

Two cards whose controls ran the same recipe at the same seeds replay the same tokens on a deterministic engine
(vLLM's CPU build and the embedded engine both repeat a seeded request across boots): their A-against-A2
numbers are then one sample, not two, and the ledger counts them once (`CardSample.data`, a digest of both
arms' per-transcript values). Where the boots move the bytes the request noise is still one draw: cards whose
controls ran the same requests as registered (recipe, seed base, classes, transcripts, concurrency, rounds and
sampling: `CardSample.seeds`) are one sample, their mean squares averaged.

Only receipts whose chain of custody holds and that the evidence log entered are read
(`cards.record.verified.planning_receipts`, a step at the ledger's input that says what it left out and why).

Cards are pooled by lane (the control recipe's `lane.name`), engine, metric and window shape (temperature,
top_p, forced tokens): a boot's shift of one shape says little about another. Only measured, scored cards
count; a transcribed card has no boots and an unscored one may still be running.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gb300lane.cards.decide.boots import BootEstimate, boot_mean_squares, boot_units
from gb300lane.cards.decide.data import ArmData
from gb300lane.cards.record.receipts import Receipts
from gb300lane.cards.record.verified import planning_receipts
from gb300lane.cards.schema import Card, ControlsEquivalence
from gb300lane.errors import CardError, RecipeError
from gb300lane.recipes.loader import load_recipe

METRICS = ("tokens_per_step", "decode_tok_s")

#: The aggregate unit: every cell of the window, transcripts averaged over the cells they ran in.
ALL_CELLS = "all cells"


@dataclass(frozen=True)
class Shape:
    """What a boot's shift depends on besides the lane: the window's sampling and length."""

    temperature: float
    top_p: float
    forced_tokens: int | None

    def describe(self) -> str:
        length = "free length" if self.forced_tokens is None else f"{self.forced_tokens} tokens"
        return f"temperature {self.temperature:g}, top_p {self.top_p:g}, {length}"


@dataclass(frozen=True)
class LedgerKey:
    lane: str
    engine: str
    metric: str
    shape: Shape
    unit: str  # ALL_CELLS, or "<class>@C<n>"


@dataclass(frozen=True)
class CardSample:
    """One scored card's A against A2 for one unit."""

    card: str
    receipts: str
    date: str
    recipe: str
    fingerprint: str | None
    transcripts: int
    ms_boot: float
    ms_res: float
    data: str  # sha256 of both arms' per-transcript values: equal data is a replay, counted once
    seeds: str = ""  # the controls' requests as registered (recipe, seed base, transcripts, window): equal is a replay

    @property
    def s2(self) -> float:
        return (self.ms_boot - self.ms_res) / self.transcripts


@dataclass(frozen=True)
class LedgerEstimate:
    """The pooled between-boot sd of one ledger key."""

    key: LedgerKey
    sd: float
    signed: float
    df: float | None
    upper: float
    lower: float
    samples: tuple[CardSample, ...]

    @property
    def cards(self) -> int:
        return len(self.samples)

    @property
    def dates(self) -> tuple[str, str]:
        ds = sorted(s.date for s in self.samples)
        return ds[0], ds[-1]

    def as_boot_estimate(self) -> BootEstimate:
        """The pooled figure in a boot study's terms (each card's two controls are two boots)."""
        within = sum(s.ms_res for s in self.samples) / self.cards
        f = [s.ms_boot / s.ms_res if s.ms_res > 0 else math.inf for s in self.samples]
        return BootEstimate(
            sd=self.sd,
            signed=self.signed,
            df=self.df,
            f_ratio=sum(f) / len(f),
            boots=2 * self.cards,
            units=min(s.transcripts for s in self.samples),
            upper=self.upper,
            lower=self.lower,
            within=within,
        )

    def source(self) -> str:
        first, last = self.dates
        when = first if first == last else f"{first} .. {last}"
        return (
            f"the lane's noise ledger: the controls of {self.cards} scored card{'s' if self.cards != 1 else ''} "
            f"on lane {self.key.lane} ({when})"
        )

    def describe(self) -> str:
        df = "-" if self.df is None else f"{self.df:.0f}"
        first, last = self.dates
        when = first if first == last else f"{first} .. {last}"
        return (
            f"boot sd {self.sd:.3%} (df {df}, one-sided 95% upper bound {self.upper:.3%}) from the controls of "
            f"{self.cards} scored card{'s' if self.cards != 1 else ''} on lane {self.key.lane} ({when})"
        )


def pool(samples: Iterable[CardSample]) -> tuple[float, float | None, float, float]:
    """(signed s_b^2, its df, upper and lower one-sided 95% bounds of s_b^2) over the cards' samples.

    Card c's MS_b / n_c is E_c chi2(1) with E_c = s_e,c^2 / n_c + s_b^2, which differs between cards of different
    sizes; their sum is taken as (sum E_c) chi2(nu) / nu with Satterthwaite's nu = (sum E_c)^2 / sum E_c^2, each
    E_c estimated by MS_r,c / n_c + max(0, s_b^2). Cards of one size give nu = K, the plain chi2(K)."""
    from scipy.stats import chi2

    got = list(samples)
    k = len(got)
    if k == 0:
        raise ValueError("no samples to pool")
    s2 = sum(s.s2 for s in got) / k
    x = [s.ms_boot / s.transcripts for s in got]
    w = sum(s.ms_res / s.transcripts for s in got) / k
    var = sum(2 * xi**2 + 2 * (s.ms_res / s.transcripts) ** 2 / (s.transcripts - 1) for xi, s in zip(x, got)) / k**2
    df = 2 * s2 * s2 / var if s2 > 0 and var > 0 else None
    expected = [s.ms_res / s.transcripts + max(0.0, s2) for s in got]
    nu = sum(expected) ** 2 / sum(e * e for e in expected) if sum(expected) > 0 else float(k)
    upper = nu * (sum(x) / k) / float(chi2.ppf(0.05, nu)) - w
    lower = nu * (sum(x) / k) / float(chi2.ppf(0.95, nu)) - w
    return s2, df, upper, lower


def estimate(key: LedgerKey, samples: Iterable[CardSample]) -> LedgerEstimate:
    got = tuple(samples)
    s2, df, upper, lower = pool(got)
    return LedgerEstimate(
        key=key,
        sd=math.sqrt(max(0.0, s2)),
        signed=math.copysign(math.sqrt(abs(s2)), s2),
        df=df,
        upper=math.sqrt(max(0.0, upper)),
        lower=math.sqrt(max(0.0, lower)),
        samples=got,
    )


def card_samples(rec: Receipts) -> dict[LedgerKey, CardSample]:
    """A scored, measured card's A-against-A2 samples, by ledger key; empty for any other receipts."""
    try:
        reg = rec.registration()
        if reg.transcribed or not rec.verdict_numbers():
            return {}
        card = rec.card()
        arms = [a for a in rec.load_arms(card) if a.role == "control" and a.source == "measured"]
        lane = load_recipe(card.controls[0].recipe).lane.name
        engine = load_recipe(card.controls[0].recipe).engine
    except (CardError, RecipeError, OSError):
        return {}
    if len(arms) < 2 or len({a.recipe for a in arms}) != 1:
        return {}
    w = card.window(card.primary_window)
    shape = Shape(temperature=w.temperature, top_p=w.top_p, forced_tokens=w.forced_tokens)
    out: dict[LedgerKey, CardSample] = {}
    for metric in METRICS:
        for scope in ("aggregate", "per_cell"):
            gate = ControlsEquivalence(
                id="noise-ledger",
                kind="controls_equivalence",
                window=card.primary_window,
                metric=metric,
                margin=0.1,
                alpha=0.05,
                scope=scope,
            )
            per_boot = [boot_units(gate, a) for a in arms[:2]]
            for group in sorted(set(per_boot[0]) & set(per_boot[1]), key=repr):
                sample = _sample(card, rec, arms[:2], per_boot[0][group], per_boot[1][group])
                if sample is None:
                    continue
                unit = ALL_CELLS if group is None else f"{group[0]}@C{group[1]}"
                out[LedgerKey(lane=lane, engine=engine, metric=metric, shape=shape, unit=unit)] = sample
    return out


def _sample(
    card: Card, rec: Receipts, arms: list[ArmData], a: dict[str, float], a2: dict[str, float]
) -> CardSample | None:
    common = sorted(set(a) & set(a2))
    if len(common) < 2:
        return None
    y = np.array([[a[u] for u in common], [a2[u] for u in common]], dtype=np.float64)
    grand = float(y.mean())
    if not grand > 0:
        return None
    y = y / grand
    n = y.shape[1]
    ms_b, ms_r, _, _ = boot_mean_squares(y)
    boot = arms[0].boot
    data = hashlib.sha256(repr(([(u, a[u]) for u in common], [(u, a2[u]) for u in common])).encode()).hexdigest()
    w = card.window(card.primary_window)
    per_arm = (arms[0].arm, arms[1].arm) if card.seeds == "per_arm" else ()  # `run.arm_window`'s seeds
    registered = repr(
        (
            arms[0].recipe,
            arms[1].recipe,
            w.seed_base,
            card.seeds,
            per_arm,
            tuple(w.classes),
            w.transcripts_per_class,
            tuple(w.concurrency),
            w.rounds,
            w.temperature,
            w.top_p,
            w.forced_tokens,
        )
    )
    return CardSample(
        card=card.name,
        receipts=rec.root.name,
        date=rec.root.name[:10],
        recipe=arms[0].recipe,
        fingerprint=boot.fingerprint if boot is not None else None,
        transcripts=n,
        ms_boot=ms_b,
        ms_res=ms_r,
        data=data,
        seeds=hashlib.sha256(registered.encode()).hexdigest(),
    )


def _distinct(samples: Iterable[CardSample]) -> list[CardSample]:
    """The samples with every replay counted once: equal data, or controls that ran the same requests as
    registered (`CardSample.seeds`), whose request noise is then one draw however the boots moved the bytes; a
    replayed group is one sample, its cards' mean squares averaged."""
    groups: dict[str, list[CardSample]] = {}
    seen: set[str] = set()
    for s in samples:
        if s.data in seen:
            continue
        seen.add(s.data)
        groups.setdefault(s.seeds or s.data, []).append(s)
    out = []
    for group in groups.values():
        first = group[0]
        if len(group) == 1 or len({g.transcripts for g in group}) != 1:
            out.append(first)
            continue
        out.append(
            CardSample(
                card="+".join(g.card for g in group),
                receipts=first.receipts,
                date=first.date,
                recipe=first.recipe,
                fingerprint=first.fingerprint,
                transcripts=first.transcripts,
                ms_boot=sum(g.ms_boot for g in group) / len(group),
                ms_res=sum(g.ms_res for g in group) / len(group),
                data=first.data,
                seeds=first.seeds,
            )
        )
    return out


def ledger(base: Path | None = None) -> dict[LedgerKey, LedgerEstimate]:
    """Every lane's pooled estimates, from every scored card under the results directory (or `base`)."""
    grouped: dict[LedgerKey, list[CardSample]] = {}
    for rec in planning_receipts(base).kept:
        for key, sample in card_samples(rec).items():
            grouped.setdefault(key, []).append(sample)
    return {k: estimate(k, _distinct(v)) for k, v in grouped.items()}


def for_card(
    card: Card, metric: str, unit: str = ALL_CELLS, base: Path | None = None, exclude: str | None = None
) -> LedgerEstimate | None:
    """The lane's estimate for a card's control recipe, metric and primary window shape; None when no scored
    card of that lane, engine and shape is on record. `exclude` leaves one receipts directory out (a card's own)."""
    try:
        r = load_recipe(card.controls[0].recipe)
    except RecipeError:
        return None
    w = card.window(card.primary_window)
    want = LedgerKey(
        lane=r.lane.name,
        engine=r.engine,
        metric=metric,
        unit=unit,
        shape=Shape(temperature=w.temperature, top_p=w.top_p, forced_tokens=w.forced_tokens),
    )
    samples = []
    for rec in planning_receipts(base).kept:
        if exclude is not None and rec.root.name == exclude:
            continue
        got = card_samples(rec).get(want)
        if got is not None:
            samples.append(got)
    return estimate(want, _distinct(samples)) if samples else None
