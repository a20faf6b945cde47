"""The DSpark drafter: one parallel pass over k slots, then the Markov fix-up.

The checkpoint is a compressed copy of the target (MTP shares the target's
weights): slot i scores the candidates of the drafted prefix (the anchor
pair's offset-1 rows when the checkpoint has them, else the last token's;
the top `dspark_draft_topk`) with

    logit(x) = sharpness * log p_target(x | class, prefix) + error(x),

where the error is the checkpoint's own: fixed per (class, context,
candidate, slot), N(0, sigma^2) once and for all (`calibration.py`). The
Markov fix-up is what makes the prefix the drafted one: walking the slots
left to right, each slot reads the tokens sampled before it, so the
drafter's quality is flat through the trained block.

Outside the trained shape the error grows: with k above `dspark_block_size`
every slot's error scales by 1 + omega (the query block the drafter reads
is not the one it was trained on, slot 1 included), and each slot past the
block by another (1 + kappa) per position (the cliff). omega is per class,
sigma and kappa are the checkpoint's; all are fitted by scripts/fit_engine.py
against the write-up's curves. Nothing here knows an acceptance rate: how
often a draft survives is decided by the verifier against the target.

`markov=False` is the parallel pass alone: slot i reads the offset-(i + 1)
table from the anchor state and never sees the drafted prefix (past the
trained block it has only the unigram prior). `serial=True` is an MTP chain:
each slot reads the offset-1 table at the previous slot's token, no error.

The slot's distribution is a softmax over its candidates: `draft_block`
returns it on the support (candidates, q, and the target's probabilities
there); `draft` scatters it into target-vocabulary columns.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import cast

import numpy as np
from scipy.special import ndtri

from gb300lane.engine.model import MIXED, BuiltinModel, _csr_lookup
from gb300lane.engine.sampling import GREEDY_TEMPERATURE
from gb300lane.engine.streams import uniforms_by_column
from gb300lane.spec import kernels

#: Key of the checkpoint's fixed errors (a constant: the drafter is one checkpoint).
_ERROR_KEY = np.array([0xD5A4_C0DE_2026_0005], dtype=np.uint64)
_MISS_KEY = np.array([0xD5A4_C0DE_2026_0006], dtype=np.uint64)


#: (corpus hash, top-k, slot) -> the checkpoint's errors at every anchor pair's candidates, for the step-by-step
#: drafter (`tabulate=False`); the boot tables compute theirs once and keep only what they build from them.
_PAIR_ERRORS: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray]] = {}


class _BootTables:
    """One boot's drafter tables over every anchor pair (the drafter's frequent contexts).

    Candidates, the target's values there under the boot's numerics, the pair
    each candidate leads to (class, anchor, candidate), and per (wide block,
    slot) the temperature-1 draft distribution: the softmax `draft_block`
    computes, done once for all pairs with the same float64 operations row by
    row, so a step gathers instead of computing. About 25 MB, and 3.5 MB per
    slot, at the default top-k.
    """

    def __init__(self, drafter: DSparkDrafter, numerics: tuple[int, float] | None) -> None:
        model, vocab = drafter.model, drafter.vocab
        keys = model.pair_keys
        self.drafter = drafter  # holds the model, so the cache key's id(model) stays this model's
        self.classes = keys // (vocab * vocab)
        anchor = keys % vocab
        self.cand = model.pair_ids[0, :, : drafter.topk].astype(np.int32)
        self.p = _chunked(
            lambda lo, hi: model.target_at(
                self.classes[lo:hi], (keys[lo:hi] // vocab) % vocab, anchor[lo:hi], self.cand[lo:hi], numerics
            ),
            keys.size,
        )
        self.next = _chunked(
            lambda lo, hi: model.pair_rows(self.classes[lo:hi, None], anchor[lo:hi, None], self.cand[lo:hi]).astype(
                np.int32
            ),
            keys.size,
        )
        self._slots: dict[int, np.ndarray] = {}
        #: Per k, draft_block's per-slot tables and keeps (`DSparkDrafter._block_args`).
        self.block_args: dict[int, tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]] = {}
        self._wide: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # Every other context drafts from the anchor token's candidates: the target there per
        # trigram context the model has, and per (class, anchor) where it has none.
        topk, tri = drafter.topk, model.tri_keys
        self.tri_p = _chunked(
            lambda lo, hi: model.target_at(
                tri[lo:hi] // (vocab * vocab),
                (tri[lo:hi] // vocab) % vocab,
                tri[lo:hi] % vocab,
                model.draft_ids[0, tri[lo:hi] % vocab, :topk],
                numerics,
            ),
            tri.size,
        )
        cls, c1 = np.divmod(np.arange((MIXED + 1) * vocab, dtype=np.int64), vocab)
        self.bi_p = _chunked(
            lambda lo, hi: model.target_at(
                cls[lo:hi], c1[lo:hi], c1[lo:hi], model.draft_ids[0, c1[lo:hi], :topk], numerics, trigram=False
            ),
            cls.size,
        )
        # Their logs as the drafter's softmax reads them (numpy's log, elementwise: the same values as at a step).
        self.tri_logp = np.log(np.maximum(self.tri_p, 1e-30).astype(np.float64))
        self.bi_logp = np.log(np.maximum(self.bi_p, 1e-30).astype(np.float64))
        self.anchor_next = _anchor_next(model, topk)
        # The anchor token's candidates (what a context without pair rows drafts from), ready to gather.
        self.anchor_cand = model.draft_ids[0, :, :topk].astype(np.int64)
        # Candidates and next pairs flat, so a step's (pair, choice) lookups are one `take` each.
        self.cand_flat = self.cand.ravel()
        self.next_flat = self.next.ravel()

    def other_p(self, classes: np.ndarray, prev: np.ndarray, key3: np.ndarray) -> np.ndarray:
        """(n, K) the target at the anchor token's candidates, for contexts without pair rows.

        `key3` is each context's (class * V + c2) * V + c1 (`BuiltinModel._keys3`).
        """
        model, vocab = self.drafter.model, self.drafter.vocab
        tri = _csr_lookup(key3, model.tri_keys)
        p = self.bi_p[classes * vocab + prev]
        have = np.flatnonzero(tri >= 0)
        if have.size:
            p[have] = self.tri_p[tri[have]]
        return cast(np.ndarray, p)

    def errors(self, slot: int) -> tuple[np.ndarray, np.ndarray]:
        """The checkpoint's errors and miss uniforms at `slot` for every pair.

        Computed when a slot's tables are built and not kept (4 MB a slot): a step that needs a pair's
        errors again computes them for its rows (`_errors` is elementwise).
        """
        d = self.drafter
        keys, vocab = d.model.pair_keys, d.vocab
        parts = [_errors(keys[lo:hi], self.cand[lo:hi].astype(np.int64), slot, vocab) for lo, hi in _blocks(keys.size)]
        return np.concatenate([z for z, _ in parts]), np.concatenate([u for _, u in parts])

    def slot(self, wide: bool, slot: int) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """Every pair's temperature-1 draft distribution at `slot`: (table, remap, overrides).

        `table` (M, K) float64 is the trained-width block's (3.5 MB at the
        default top-k); inside the trained block a wider block differs only
        where the wide-block term turns a pair's small error into a miss, and
        those rows are `overrides[remap[pair]]` (remap -1 elsewhere). Slots
        past the trained block exist only in wide blocks and have tables of
        their own.
        """
        d = self.drafter
        table = self._slots.get(slot)
        errors = None
        if table is None:
            z, miss_u = errors = self.errors(slot)
            # slot_error_scale reads k only as "wider than the trained block, or not".
            scale = d.slot_error_scale(self.classes, d.block_size + (slot >= d.block_size), slot, miss_u)
            table = self._slots[slot] = _chunked(
                lambda lo, hi: d._softmax(
                    np.log(np.maximum(self.p[lo:hi], 1e-30).astype(np.float64)), z[lo:hi], scale[lo:hi]
                ),
                self.p.shape[0],
            )
        if not wide or slot >= d.block_size:
            return table, None, None
        over = self._wide.get(slot)
        if over is None:
            z, miss_u = errors if errors is not None else self.errors(slot)
            narrow = d.slot_error_scale(self.classes, d.block_size, slot, miss_u)
            scale = d.slot_error_scale(self.classes, d.block_size + 1, slot, miss_u)
            rows = np.flatnonzero(scale != narrow)
            remap = np.full(self.p.shape[0], -1, dtype=np.int32)
            remap[rows] = np.arange(rows.size, dtype=np.int32)
            logp = np.log(np.maximum(self.p[rows], 1e-30).astype(np.float64))
            over = self._wide[slot] = (remap, d._softmax(logp, z[rows], scale[rows]))
        return table, over[0], over[1]


#: Per (model, top-k): the pair each anchor token's candidate leads to, by class (boot-independent).
_ANCHOR_NEXT: dict[tuple[int, int], tuple[BuiltinModel, np.ndarray]] = {}


def _anchor_next(model: BuiltinModel, topk: int) -> np.ndarray:
    """((MIXED + 1) * V, K) int32: the pair row of (class, anchor, candidate) for the anchor token's candidates."""
    key = (id(model), topk)
    hit = _ANCHOR_NEXT.get(key)
    if hit is None or hit[0] is not model:
        vocab = model.vocab_size
        cls, c1 = np.divmod(np.arange((MIXED + 1) * vocab, dtype=np.int64), vocab)
        table = _chunked(
            lambda lo, hi: model.pair_rows(
                cls[lo:hi, None], c1[lo:hi, None], model.draft_ids[0, c1[lo:hi], :topk]
            ).astype(np.int32),
            cls.size,
        )
        _ANCHOR_NEXT.clear()
        hit = _ANCHOR_NEXT[key] = (model, table)
    return hit[1]


def _blocks(rows: int, chunk: int = 4096) -> list[tuple[int, int]]:
    return [(lo, min(lo + chunk, rows)) for lo in range(0, rows, chunk)]


def _chunked(build, rows: int) -> np.ndarray:
    """`build(lo, hi)` over row blocks, stacked: a table's temporaries stay a block's size."""
    return np.concatenate([build(lo, hi) for lo, hi in _blocks(rows)])


#: The boot tables last drafted with, by (model, top-k, block size, numerics): one boot's at a time.
_BOOT: dict[tuple[object, ...], _BootTables] = {}
_BOOT_LOCK = threading.Lock()


def _errors(key3, cand, slot: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """The checkpoint's unit errors (R, K) at (context, candidate, slot), and its miss uniform (R,).

    `key3` is the context's (class * V + c2) * V + c1 (`BuiltinModel._keys3`).
    """
    ctx_words = (key3 << 4) | slot
    # Both streams in one pass: the candidates' error words ((ctx - slot) * V + cand << 4 + slot),
    # then the context's miss word; int64 words wrap as the uint64 ones do, so a view reads them.
    rows, width = cand.shape
    words = np.empty((rows, width + 1), dtype=np.int64)
    np.add(cand << 4, ((ctx_words - slot) * vocab + slot)[:, None], out=words[:, :width])
    words[:, width] = ctx_words
    u = uniforms_by_column(_error_keys(width), words.view(np.uint64))
    err = u[:, :width]
    # np.clip's arithmetic (max, then min) without its dispatch.
    np.maximum(err, 1e-12, out=err)
    np.minimum(err, 1.0 - 1e-12, out=err)
    return ndtri(err), u[:, width]


@functools.lru_cache(maxsize=8)
def _error_keys(width: int) -> np.ndarray:
    """The stream key of each column `_errors` draws: the error key per candidate, then the miss key."""
    keys = np.array([_ERROR_KEY[0]] * width + [_MISS_KEY[0]], dtype=np.uint64)
    keys.flags.writeable = False
    return keys


@dataclass
class DraftBlock:
    """A step's drafts on their support: tokens (B, k), candidates (B, k, K), q and p there."""

    tokens: np.ndarray
    cand: np.ndarray
    q: np.ndarray  # (B, k, K) float32 draft probabilities over the candidates
    p: np.ndarray  # (B, k, K) float32 target probabilities there (temperature 1, the boot's numerics)
    choice: np.ndarray  # (B, k) index of the drafted candidate

    def dense_q(self, vocab: int, rows: np.ndarray | None = None) -> np.ndarray:
        """q scattered into target-vocabulary columns (zero off the support), for `rows` (all by default)."""
        cand, qv = (self.cand, self.q) if rows is None else (self.cand[rows], self.q[rows])
        batch, k = cand.shape[:2]
        q = np.zeros((batch, k, vocab), dtype=np.float32)
        if k and batch:
            # put_along_axis's writes, by flat position: row r's candidate c lands at r * vocab + c.
            at = cand.reshape(batch * k, -1) + (np.arange(batch * k) * vocab)[:, None]
            q.put(at, qv.reshape(batch * k, -1))
        return q


#: Empty override arrays for a slot without overrides (the kernel's "none").
_NO_REMAP = np.empty(0, dtype=np.int32)
_NO_OVER = np.empty((0, 0))
#: The numpy functions draft_block calls between its loops: ndtri, exp and the row sums (`logits.sum(axis=1)`).
_BLOCK_OPS = (ndtri, np.exp, np.add.reduce)


def _draw(probs: np.ndarray, u: np.ndarray, greedy: np.ndarray | None, probabilistic: bool) -> np.ndarray:
    """Each row's candidate: by inverse CDF (`u` (R, 1)), the argmax for greedy rows and greedy drafts."""
    if not probabilistic:
        return cast(np.ndarray, probs.argmax(axis=1))
    cdf = np.add.accumulate(probs, axis=1)  # np.cumsum's arithmetic, less dispatch
    # u < 1, so u * total never exceeds the total: the count is at most K - 1.
    choice = np.add.reduce(cdf < u * cdf[:, -1:], axis=1, dtype=np.int64)
    if greedy is not None:
        g = np.flatnonzero(greedy)
        choice[g] = probs[g].argmax(axis=1)
    return cast(np.ndarray, choice)


class DSparkDrafter:
    """Drafts k tokens per sequence from the anchor; see the module docstring."""

    def __init__(
        self,
        model: BuiltinModel,
        *,
        topk: int,
        block_size: int,
        markov: bool = True,
        serial: bool = False,
        tabulate: bool = True,
    ) -> None:
        trained = model.draft_ids.shape[0]
        if not 1 <= topk <= model.draft_ids.shape[2]:
            raise ValueError(f"dspark_draft_topk must lie in [1, {model.draft_ids.shape[2]}]; got {topk}")
        if not 1 <= block_size <= trained:
            raise ValueError(f"dspark_block_size must lie in [1, {trained}]; got {block_size}")
        self.model = model
        self.topk = topk
        self.block_size = block_size
        self.markov = markov
        cal = model.calibration
        self.noise = cal.drafter.noise
        self.sharpness = cal.drafter.sharpness
        self.cliff = cal.drafter.cliff
        self.miss = np.array([cal.for_class(i).miss for i in range(MIXED + 1)], dtype=np.float64)
        self.miss_noise = cal.drafter.miss_noise
        self._pair_tab: dict[object, np.ndarray] | None = None
        self._pair_numerics: tuple[int, float] | None = None
        self.wide_block = np.array([cal.for_class(i).wide_block for i in range(MIXED + 1)], dtype=np.float64)
        self.vocab = model.vocab_size
        self.log_unigram = np.log(model.unigram)
        order = np.argsort(-model.unigram, kind="stable")[:topk]
        self._prior_ids = order.astype(np.int32)
        self._prior_logp = self.log_unigram[order].astype(np.float64)
        # MTP chains one stage per slot: each slot reads the next-token table at the
        # previous slot's token, so there is no parallel pass and no Markov bias.
        self.serial = serial
        # Tabulate every anchor pair's slot distributions once per boot (`_slot_table`), so a
        # step's pair rows are a gather; False computes them step by step (the reference path).
        self.tabulate = tabulate
        self._tables: dict[object, np.ndarray] | None = None
        self._tables_numerics: tuple[int, float] | None = None
        self._keeps: dict[tuple[bool, int], np.ndarray] = {}

    def draft(
        self,
        classes: np.ndarray,
        anchor_prev: np.ndarray,
        anchors: np.ndarray,
        k: int,
        temperatures: np.ndarray,
        uniforms: np.ndarray,
        *,
        probabilistic: bool,
        numerics: tuple[int, float] | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draft tokens (B, k) int64 and draft probabilities q (B, k, V) float32 (see `draft_block`)."""
        if self.markov and not self.serial:
            block = self.draft_block(
                classes, anchor_prev, anchors, k, temperatures, uniforms, probabilistic=probabilistic, numerics=numerics
            )
            return block.tokens, block.dense_q(self.vocab)
        return self._draft_tables(classes, anchor_prev, anchors, k, temperatures, uniforms, probabilistic=probabilistic)

    def slot_error_scale(self, classes: np.ndarray, k: int, slot: int, miss_u: np.ndarray) -> np.ndarray:
        """(B,) s.d. of slot `slot`'s (0-based) error in a k-slot block, per row's class and context.

        A context the checkpoint knows gets the small error `noise`; one it
        misses gets `miss_noise` (a confident wrong guess). The chance of a
        miss is `miss`, raised by the wide-block and cliff terms.
        """
        keep = 1.0 - self.miss[classes]
        if k > self.block_size:
            keep *= 1.0 - self.wide_block[classes]
        past = slot + 1 - self.block_size
        if past > 0:
            keep *= (1.0 - self.cliff) ** past
        return np.where(miss_u < keep, self.noise, self.miss_noise)

    def _contexts(
        self, classes: np.ndarray, prev2: np.ndarray, prev: np.ndarray, slot: int, numerics: tuple[int, float] | None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Per row: candidates, log p_target there, p_target there, unit errors, and the miss uniform.

        Contexts with their own drafter rows (the frequent anchor pairs) have
        all of these tabulated once per boot and slot (`_pair_tables`); the
        rest are computed as they come, by the same arithmetic.
        """
        model, topk, vocab = self.model, self.topk, self.vocab
        pair = model.pair_rows(classes, prev2, prev)
        tab = self._pair_tables(numerics, slot, pair)
        idx = np.maximum(pair, 0)
        cand, logp, p, z, miss_u = (
            a[idx] for a in (tab["cand"], tab["logp"], tab["p"], tab[slot], tab[("miss", slot)])
        )
        if (pair < 0).any():
            m = np.flatnonzero(pair < 0)
            c_m = model.draft_ids[0, prev[m], :topk].astype(np.int64)
            cand[m] = c_m
            p[m] = model.target_at(classes[m], prev2[m], prev[m], c_m, numerics)
            logp[m] = np.log(np.maximum(p[m], 1e-30).astype(np.float64))
            z[m], miss_u[m] = _errors(model._keys3(classes[m], prev2[m], prev[m]), c_m, slot, vocab)
        return cand, logp, p, z, miss_u

    def _pair_tables(self, numerics: tuple[int, float] | None, slot: int, pair: np.ndarray) -> dict[object, np.ndarray]:
        """The anchor pairs' tables, the target's values filled in for the pairs in `pair` (lazily, per boot)."""
        model, vocab = self.model, self.vocab
        if self._pair_numerics != numerics or self._pair_tab is None:
            size = model.pair_keys.size
            self._pair_tab = {
                "cand": model.pair_ids[0, :, : self.topk].astype(np.int64),
                "p": np.zeros((size, self.topk), dtype=np.float32),
                "logp": np.zeros((size, self.topk), dtype=np.float64),
                "have": np.zeros(size, dtype=bool),
            }
            self._pair_numerics = numerics
        tab = self._pair_tab
        wanted = pair[pair >= 0]
        todo = np.unique(wanted[~tab["have"][wanted]])
        if todo.size:
            keys = model.pair_keys[todo]
            p = model.target_at(
                keys // (vocab * vocab), (keys // vocab) % vocab, keys % vocab, tab["cand"][todo], numerics
            )
            tab["p"][todo] = p
            tab["logp"][todo] = np.log(np.maximum(p, 1e-30).astype(np.float64))
            tab["have"][todo] = True
        tab = self._pair_tab
        if slot not in tab:
            # The errors belong to the checkpoint, not to a boot or a calibration: shared by every engine.
            key = (self.model.corpus_hash, self.topk, slot)
            if key not in _PAIR_ERRORS:
                keys = self.model.pair_keys
                vocab = self.vocab
                _PAIR_ERRORS[key] = _errors(keys, tab["cand"], slot, vocab)
            tab[slot], tab[("miss", slot)] = _PAIR_ERRORS[key]
        return tab

    def prepare(self, numerics: tuple[int, float] | None, ks) -> None:
        """Build this boot's tables for blocks of every k in `ks` now, as a boot does before serving."""
        if self.tabulate and self.markov and not self.serial:
            tables = self._tables_for(numerics)
            for k in ks:
                for slot in range(k):
                    tables.slot(k > self.block_size, slot)

    def _tables_for(self, numerics: tuple[int, float] | None) -> _BootTables:
        key = (id(self.model), self.topk, self.block_size, numerics)
        with _BOOT_LOCK:
            tables = _BOOT.get(key)
            if tables is None:
                _BOOT.clear()  # one boot's tables at a time: they are tens of MB
                tables = _BOOT[key] = _BootTables(self, numerics)
            return tables

    def _softmax(self, logp, z, scale, inv_t=None) -> np.ndarray:
        logits = self.sharpness * logp
        if (scale > 0.0).any():
            logits += scale[:, None] * z
        if inv_t is not None:
            logits *= inv_t
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        return cast(np.ndarray, probs)

    def _anchor_rows(self, tables: _BootTables, rows, classes, prev2, prev, slot: int, k: int):
        """Contexts without pair rows at temperature 1 (batch rows `rows`): the anchor token's candidates, the
        target there, and the slot's draft distribution (what `_contexts` and `_softmax` give them, in fewer
        passes)."""
        cls, prev_m = classes[rows], prev[rows]
        key3 = self.model._keys3(cls, prev2[rows], prev_m)
        cand = tables.anchor_cand.take(prev_m, axis=0)
        p = tables.other_p(cls, prev_m, key3)
        z, miss_u = _errors(key3, cand, slot, self.vocab)
        logp = np.log(np.maximum(p, 1e-30).astype(np.float64))
        return cand, p, self._softmax(logp, z, self.slot_error_scale(cls, k, slot, miss_u))

    def _block_compiled(
        self, compiled, tables: _BootTables, classes, prev2, prev, k: int, u_cols, argmax
    ) -> DraftBlock:
        """`_draft_tabulated` on the kernels as one call (draft_block): per slot the pair rows' draws from the
        tables, the rows without pair rows computed as `_anchor_rows` computes them (numpy's own ndtri, exp
        and row sums called on scratch arrays), and the block's candidates, target values and q written out:
        the values of the numpy path, bit for bit."""
        batch, width = prev.shape[0], tables.anchor_cand.shape[1]
        slots, keeps = self._block_args(tables, k)
        err, z, logits = np.empty((3, batch, width))
        tokens, choice = np.empty((batch, k), dtype=np.int64), np.empty((batch, k), dtype=np.int64)
        cand = np.empty((batch, k, width), dtype=np.int64)
        p, q = np.empty((batch, k, width), dtype=np.float32), np.empty((batch, k, width), dtype=np.float32)
        compiled.draft_block(
            slots,
            keeps,
            _BLOCK_OPS,
            self.model.pair_keys,
            classes,
            np.ascontiguousarray(prev2),
            np.ascontiguousarray(prev),
            u_cols,
            argmax,
            tables.cand_flat,
            tables.next_flat,
            tables.cand,
            tables.p,
            tables.anchor_cand,
            self.model.tri_keys,
            tables.tri_p,
            tables.bi_p,
            tables.tri_logp,
            tables.bi_logp,
            tables.anchor_next,
            err,
            z,
            logits,
            np.empty(batch),
            tokens,
            cand,
            p,
            q,
            choice,
            self.vocab,
            int(_ERROR_KEY[0]),
            int(_MISS_KEY[0]),
            float(self.noise),
            float(self.miss_noise),
            float(self.sharpness),
        )
        return DraftBlock(tokens, cand, q, p, choice)

    def _block_args(self, tables: _BootTables, k: int) -> tuple[tuple[np.ndarray, ...], tuple[np.ndarray, ...]]:
        """draft_block's per-slot tables (table, remap, overrides) and keeps for a k-slot block, built once per k."""
        got = tables.block_args.get(k)
        if got is None:
            wide = k > self.block_size
            slots = []
            for slot in range(k):
                table, remap, over = tables.slot(wide, slot)
                slots += [table, _NO_REMAP if remap is None else remap, _NO_OVER if over is None else over]
            got = tables.block_args[k] = (tuple(slots), tuple(self._keep(k, slot) for slot in range(k)))
        return got

    def _keep(self, k: int, slot: int) -> np.ndarray:
        """Per class, the chance slot `slot` of a k-slot block keeps the small error (`slot_error_scale`'s keep)."""
        key = (k > self.block_size, slot)
        keep = self._keeps.get(key)
        if keep is None:
            classes = np.arange(self.miss.shape[0])
            keep = 1.0 - self.miss[classes]
            if k > self.block_size:
                keep *= 1.0 - self.wide_block[classes]
            past = slot + 1 - self.block_size
            if past > 0:
                keep *= (1.0 - self.cliff) ** past
            keep = self._keeps[key] = np.ascontiguousarray(keep, dtype=np.float64)
        return keep

    def _draft_tabulated(
        self, tables: _BootTables, classes, prev2, prev, k, inv_t, greedy_rows, uniforms, probabilistic, numerics
    ) -> DraftBlock:
        """`draft_block` with the pair rows gathered from the boot tables, slot by slot.

        Rows without pair rows, and rows at a temperature other than 1 (their
        logits are scaled), are computed as `draft_block` computes them; the
        rest read the tables, which hold the same values. The next slot's pair
        is the table's next pair at the drafted candidate.
        """
        model, topk, vocab = self.model, self.topk, self.vocab
        batch = prev.shape[0]
        own = inv_t[:, 0] != 1.0
        any_own, any_greedy = bool(own.any()), bool(greedy_rows.any())
        compiled = kernels.active()
        if compiled is not None:
            u_cols = np.ascontiguousarray(uniforms.T, dtype=np.float64)
            argmax = (greedy_rows if probabilistic else np.ones(batch, dtype=bool)).astype(np.int64)
        # Rows without pair rows go through the kernels too where every input is as they take it.
        fused = (
            compiled is not None
            and not any_own
            and k <= 16
            and classes.dtype == prev2.dtype == prev.dtype == np.int64
            and classes.flags.c_contiguous
        )
        if fused and compiled is not None:
            return self._block_compiled(compiled, tables, classes, prev2, prev, k, u_cols, argmax)
        wide = k > self.block_size
        pair = model.pair_rows(classes, prev2, prev)
        rows = np.arange(batch)
        slot_tables = [tables.slot(wide, slot) for slot in range(k)]
        u_slots = uniforms.T[:, :, None]
        # Per slot: the pair rows, choices, tokens and distributions, stacked once at the end (the kernels
        # write them into rows of arrays laid out for that).
        pairs, choices, tokens, dists = [], [], [], []
        computed = []
        if compiled is not None:
            pair_rows = np.empty((k + 1, batch), dtype=np.int64)
            pair_rows[0] = pair
            pair = pair_rows[0]
            choice_rows, token_rows = np.empty((k, batch), dtype=np.int64), np.empty((k, batch), dtype=np.int64)
            dist_rows = np.empty((k, batch, topk))
        without = 0
        for slot in range(k):
            table, remap, over = slot_tables[slot]
            if compiled is not None:
                # The pair rows' distribution, draw, token and next pair in one call; rows without
                # pair rows are filled in below.
                probs, choice, token, nxt = dist_rows[slot], choice_rows[slot], token_rows[slot], pair_rows[slot + 1]
                without = compiled.draft_slot(
                    table,
                    _NO_REMAP if remap is None else remap,
                    _NO_OVER if over is None else over,
                    pair,
                    u_cols[slot],
                    argmax,
                    tables.cand_flat,
                    tables.next_flat,
                    probs,
                    choice,
                    token,
                    nxt,
                )
            else:
                probs = table.take(pair, axis=0)
                if remap is not None and over is not None:  # a wide block: the pairs whose error became a miss
                    o = remap[pair]
                    hit = np.flatnonzero(o >= 0)
                    if hit.size:
                        probs[hit] = over[o[hit]]
            if any_own:
                m: np.ndarray | None = np.flatnonzero((pair < 0) | own)
            else:
                # The kernel counted the rows without pair rows; numpy looks only where there are some.
                m = (
                    (np.flatnonzero(pair < 0) if without else None)
                    if compiled is not None
                    else np.flatnonzero(pair < 0)
                    if np.minimum.reduce(pair) < 0
                    else None
                )
            if m is not None:
                n: np.ndarray | None = None
                if any_own:
                    at = pair[m]
                    c_m, p_m = tables.cand[at], tables.p[at]
                    # The pairs' errors, as the slot's table was built from (a row without a pair reads
                    # the last pair's and is overwritten below).
                    z_m, miss_m = _errors(model.pair_keys[at], c_m.astype(np.int64), slot, vocab)
                    n = np.flatnonzero(at < 0)
                    rn = m[n]
                cls_m = classes[m]
                if n is None:
                    # Contexts without pair rows at temperature 1 (their logits scale by 1.0, exactly).
                    prev_m = prev[m]
                    c_m, p_m, probs[m] = self._anchor_rows(tables, m, classes, prev2, prev, slot, k)
                else:
                    if rn.size:
                        c_n = tables.anchor_cand.take(prev[rn], axis=0)
                        key3 = model._keys3(classes[rn], prev2[rn], prev[rn])
                        c_m[n], p_m[n] = c_n, tables.other_p(classes[rn], prev[rn], key3)
                        z_m[n], miss_m[n] = _errors(key3, c_n, slot, vocab)
                    logp_m = np.log(np.maximum(p_m, 1e-30).astype(np.float64))
                    probs[m] = self._softmax(logp_m, z_m, self.slot_error_scale(cls_m, k, slot, miss_m), inv_t[m])
            if compiled is None:
                choice = _draw(probs, u_slots[slot], greedy_rows if any_greedy else None, probabilistic)
                # Flat positions into the (pairs, K) tables; a row without a pair (-1) reads the last
                # pair's and is overwritten below.
                at_flat = pair * topk + choice
                token = tables.cand_flat.take(at_flat)
                nxt = tables.next_flat.take(at_flat)
            elif m is not None:
                choice[m] = _draw(probs[m], u_slots[slot][m], greedy_rows[m] if any_greedy else None, probabilistic)
            if m is not None:
                pick = choice[m]
                token[m] = c_m[np.arange(m.size), pick]
                if any_own:
                    nxt[m] = model.pair_rows(cls_m, prev[m], token[m])
                else:  # every odd row drafted from its anchor token's candidates
                    nxt[m] = tables.anchor_next[cls_m * vocab + prev_m, pick]
                computed.append((slot, m, c_m, p_m))
            if compiled is None:
                pairs.append(pair)
                choices.append(choice)
                tokens.append(token)
                dists.append(probs)
            prev2, prev, pair = prev, token, nxt
        if compiled is not None:
            pair_all, choice_all, tokens_all = pair_rows[:k].T.copy(), choice_rows.T.copy(), token_rows.T.copy()
            dist_all = dist_rows
        else:
            pair_all, choice_all = np.array(pairs, dtype=np.int64).T.copy(), np.array(choices).T.copy()
            tokens_all, dist_all = np.array(tokens, dtype=np.int64).T.copy(), np.array(dists)
        cand_all, p_all = tables.cand.take(pair_all, axis=0), tables.p.take(pair_all, axis=0)
        for slot, m, c_m, p_m in computed:
            cand_all[m, slot] = c_m
            p_all[m, slot] = p_m
        if probabilistic:
            q_all = dist_all.transpose(1, 0, 2).astype(np.float32, order="C")
            if any_greedy:  # a greedy row's verifier path ignores q; one-hot keeps it a distribution
                g = np.flatnonzero(greedy_rows)
                q_all[g] = 0.0
                q_all[g[:, None], np.arange(k)[None, :], choice_all[g]] = 1.0
        else:
            q_all = np.zeros((batch, k, topk), dtype=np.float32)
            q_all[rows[:, None], np.arange(k)[None, :], choice_all] = 1.0
        return DraftBlock(tokens_all, cand_all, q_all, p_all, choice_all)

    def draft_block(
        self,
        classes: np.ndarray,
        anchor_prev: np.ndarray,
        anchors: np.ndarray,
        k: int,
        temperatures: np.ndarray,
        uniforms: np.ndarray,
        *,
        probabilistic: bool,
        numerics: tuple[int, float] | None = None,
    ) -> DraftBlock:
        """Drafts on their support; `numerics` is the boot's, so `p` is the target's own values there."""
        batch = anchors.shape[0]
        topk = self.topk
        greedy_rows = temperatures < GREEDY_TEMPERATURE
        if self.tabulate and k and batch:
            inv_t = np.where(greedy_rows, 1.0, 1.0 / np.maximum(temperatures, GREEDY_TEMPERATURE))[:, None]
            return self._draft_tabulated(
                self._tables_for(numerics),
                classes,
                anchor_prev.astype(np.int64),
                anchors.astype(np.int64),
                k,
                inv_t,
                greedy_rows,
                uniforms,
                probabilistic,
                numerics,
            )
        tokens = np.empty((batch, k), dtype=np.int64)
        cand_all = np.empty((batch, k, topk), dtype=np.int64)
        q_all = np.empty((batch, k, topk), dtype=np.float32)
        p_all = np.empty((batch, k, topk), dtype=np.float32)
        choice_all = np.zeros((batch, k), dtype=np.int64)
        if k == 0 or batch == 0:
            return DraftBlock(tokens, cand_all, q_all, p_all, choice_all)
        inv_t = np.where(greedy_rows, 1.0, 1.0 / np.maximum(temperatures, GREEDY_TEMPERATURE))[:, None]
        rows = np.arange(batch)
        prev2, prev = anchor_prev.astype(np.int64), anchors.astype(np.int64)
        for slot in range(k):
            cand, logp, p, z, miss_u = self._contexts(classes, prev2, prev, slot, numerics)
            probs = self._softmax(logp, z, self.slot_error_scale(classes, k, slot, miss_u), inv_t)
            choice = probs.argmax(axis=1)
            if probabilistic:
                cdf = np.cumsum(probs, axis=1)
                sampled = np.minimum((cdf < uniforms[:, slot, None] * cdf[:, -1:]).sum(axis=1), topk - 1)
                choice = np.where(greedy_rows, choice, sampled)
                qv = probs.astype(np.float32)
                g = np.flatnonzero(greedy_rows)
                if g.size:  # a greedy row's verifier path ignores q; one-hot keeps it a distribution
                    qv[g] = 0.0
                    qv[g, choice[g]] = 1.0
            else:
                qv = np.zeros((batch, topk), dtype=np.float32)
                qv[rows, choice] = 1.0
            token = cand[rows, choice]
            tokens[:, slot] = token
            cand_all[:, slot] = cand
            q_all[:, slot] = qv
            p_all[:, slot] = p
            choice_all[:, slot] = choice
            prev2, prev = prev, token
        return DraftBlock(tokens, cand_all, q_all, p_all, choice_all)

    def _draft_tables(
        self,
        classes: np.ndarray,
        anchor_prev: np.ndarray,
        anchors: np.ndarray,
        k: int,
        temperatures: np.ndarray,
        uniforms: np.ndarray,
        *,
        probabilistic: bool,
    ) -> tuple[np.ndarray, np.ndarray]:
        """The parallel pass alone (`markov=False`) or the MTP chain (`serial=True`), from the tables.

        The anchor state is the request's class and its last two accepted tokens.
        `temperatures` (B,) below 1e-5 mean greedy rows (argmax drafts);
        `uniforms` (B, k) in [0, 1) drive the probabilistic draws.
        """
        batch = anchors.shape[0]
        topk = self.topk
        drafts = np.empty((batch, k), dtype=np.int64)
        q = np.zeros((batch, k, self.vocab), dtype=np.float32)
        if k == 0 or batch == 0:
            return drafts, q
        greedy_rows = temperatures < GREEDY_TEMPERATURE
        inv_t = np.where(greedy_rows, 1.0, 1.0 / np.maximum(temperatures, GREEDY_TEMPERATURE))[:, None]
        rows = np.arange(batch)
        model = self.model
        pair = model.pair_rows(classes, anchor_prev, anchors)
        prev = None
        prev2 = anchors
        for slot in range(k):
            if self.serial and prev is not None:
                pair = model.pair_rows(classes, prev2, prev)
                source = prev
            else:
                source = anchors
            if slot >= self.block_size and not self.serial:
                # No trained table for this offset and no trained transition into it:
                # the unigram prior is all the slot has.
                cand = np.broadcast_to(self._prior_ids, (batch, topk))
                logits = np.broadcast_to(self._prior_logp, (batch, topk)).copy()
            else:
                table = 0 if self.serial else slot
                has_pair = (pair >= 0)[:, None]
                pidx = np.maximum(pair, 0)
                cand = np.where(has_pair, model.pair_ids[table, pidx, :topk], model.draft_ids[table, source, :topk])
                logits = np.where(
                    has_pair, model.pair_logp[table, pidx, :topk], model.draft_logp[table, source, :topk]
                ).astype(np.float64)
            logits *= inv_t
            logits -= logits.max(axis=1, keepdims=True)
            probs = np.exp(logits)
            probs /= probs.sum(axis=1, keepdims=True)
            choice = probs.argmax(axis=1)
            if probabilistic:
                cdf = np.cumsum(probs, axis=1)
                sampled = np.minimum((cdf < uniforms[:, slot, None] * cdf[:, -1:]).sum(axis=1), topk - 1)
                choice = np.where(greedy_rows, choice, sampled)
                q[rows[:, None], slot, cand] = probs
            token = cand[rows, choice].astype(np.int64)
            if not probabilistic:
                q[rows, slot, token] = 1.0
            else:
                # A greedy row's verifier path ignores q; one-hot keeps it a valid distribution.
                g = np.flatnonzero(greedy_rows)
                if g.size:
                    q[g, slot] = 0.0
                    q[g, slot, token[g]] = 1.0
            drafts[:, slot] = token
            prev2, prev = (prev if prev is not None else anchors), token
        return drafts, q
