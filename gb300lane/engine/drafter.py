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

from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from gb300lane.engine.model import MIXED, BuiltinModel
from gb300lane.engine.sampling import GREEDY_TEMPERATURE
from gb300lane.engine.streams import uniforms_at

#: Key of the checkpoint's fixed errors (a constant: the drafter is one checkpoint).
_ERROR_KEY = np.array([0xD5A4_C0DE_2026_0005], dtype=np.uint64)
_MISS_KEY = np.array([0xD5A4_C0DE_2026_0006], dtype=np.uint64)


#: (corpus hash, top-k, slot) -> the checkpoint's errors at every anchor pair's candidates.
_PAIR_ERRORS: dict[tuple[str, int, int], tuple[np.ndarray, np.ndarray]] = {}


def _errors(classes, prev2, prev, cand, slot: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """The checkpoint's unit errors (R, K) at (class, context, candidate, slot), and its miss uniform (R,)."""
    cls64 = classes.astype(np.int64)
    ctx_words = (((cls64 * vocab + prev2) * vocab + prev) << 4) | slot
    words = (ctx_words[:, None] - slot) * vocab + (cand << 4) + slot
    z = ndtri(np.clip(uniforms_at(_ERROR_KEY, words.astype(np.uint64)), 1e-12, 1.0 - 1e-12))
    return z, uniforms_at(_MISS_KEY, ctx_words[:, None].astype(np.uint64))[:, 0]


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
            np.put_along_axis(q.reshape(batch * k, vocab), cand.reshape(batch * k, -1),
                              qv.reshape(batch * k, -1), axis=1)
        return q


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
        self._pair_tab: dict | None = None
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
        self._tables: dict | None = None
        self._tables_numerics: tuple[int, float] | None = None


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
            block = self.draft_block(classes, anchor_prev, anchors, k, temperatures, uniforms,
                                     probabilistic=probabilistic, numerics=numerics)
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

    def _contexts(self, classes, prev2, prev, slot, numerics):
        """Per row: candidates, log p_target there, p_target there, unit errors, and the miss uniform.

        Contexts with their own drafter rows (the frequent anchor pairs) have
        all of these tabulated once per boot and slot (`_pair_tables`); the
        rest are computed as they come, by the same arithmetic.
        """
        model, topk, vocab = self.model, self.topk, self.vocab
        pair = model.pair_rows(classes, prev2, prev)
        tab = self._pair_tables(numerics, slot, pair)
        idx = np.maximum(pair, 0)
        cand, logp, p, z, miss_u = (a[idx] for a in (tab["cand"], tab["logp"], tab["p"], tab[slot], tab[("miss", slot)]))
        if (pair < 0).any():
            m = np.flatnonzero(pair < 0)
            c_m = model.draft_ids[0, prev[m], :topk].astype(np.int64)
            cand[m] = c_m
            p[m] = model.target_at(classes[m], prev2[m], prev[m], c_m, numerics)
            logp[m] = np.log(np.maximum(p[m], 1e-30).astype(np.float64))
            z[m], miss_u[m] = _errors(classes[m], prev2[m], prev[m], c_m, slot, vocab)
        return cand, logp, p, z, miss_u

    def _pair_tables(self, numerics, slot, pair):
        """The anchor pairs' tables, the target's values filled in for the pairs in `pair` (lazily, per boot)."""
        model, vocab = self.model, self.vocab
        if self._pair_numerics != numerics or self._pair_tab is None:
            size = model.pair_keys.size
            self._pair_tab = {"cand": model.pair_ids[0, :, : self.topk].astype(np.int64),
                              "p": np.zeros((size, self.topk), dtype=np.float32),
                              "logp": np.zeros((size, self.topk), dtype=np.float64),
                              "have": np.zeros(size, dtype=bool)}
            self._pair_numerics = numerics
        tab = self._pair_tab
        wanted = pair[pair >= 0]
        todo = np.unique(wanted[~tab["have"][wanted]])
        if todo.size:
            keys = model.pair_keys[todo]
            p = model.target_at(keys // (vocab * vocab), (keys // vocab) % vocab, keys % vocab, tab["cand"][todo], numerics)
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
                _PAIR_ERRORS[key] = _errors(keys // (vocab * vocab), (keys // vocab) % vocab, keys % vocab,
                                            tab["cand"], slot, vocab)
            tab[slot], tab[("miss", slot)] = _PAIR_ERRORS[key]
        return tab

    def _boot_tables(self, numerics) -> dict:
        """Every anchor pair's candidates and the target's values there under this boot's numerics.

        One vectorised pass over all pairs (`target_at` is row by row the same
        arithmetic, so each value is what a step computing its rows alone gets).
        """
        if self._tables is None or self._tables_numerics != numerics:
            model, vocab = self.model, self.vocab
            keys = model.pair_keys
            cand = model.pair_ids[0, :, : self.topk].astype(np.int64)
            p = model.target_at(keys // (vocab * vocab), (keys // vocab) % vocab, keys % vocab, cand, numerics)
            self._tables = {"cand": cand, "p": p, "logp": np.log(np.maximum(p, 1e-30).astype(np.float64)),
                            "classes": keys // (vocab * vocab)}
            self._tables_numerics = numerics
        return self._tables

    def _slot_table(self, numerics, k: int, slot: int) -> np.ndarray:
        """(M, K) float64: each anchor pair's draft distribution at `slot` of a k-slot block, temperature 1.

        The softmax of `draft_block`'s logits, computed once for all pairs:
        the same float64 operations row by row, so a step gathers them instead.
        """
        tables = self._boot_tables(numerics)
        if (k, slot) not in tables:
            key = (self.model.corpus_hash, self.topk, slot)
            if key not in _PAIR_ERRORS:
                keys, vocab = self.model.pair_keys, self.vocab
                _PAIR_ERRORS[key] = _errors(keys // (vocab * vocab), (keys // vocab) % vocab, keys % vocab,
                                            tables["cand"], slot, vocab)
            z, miss_u = _PAIR_ERRORS[key]
            tables[(k, slot)] = self._softmax(tables["logp"], z, self.slot_error_scale(tables["classes"], k, slot, miss_u))
        return tables[(k, slot)]

    def _softmax(self, logp, z, scale, inv_t=None) -> np.ndarray:
        logits = self.sharpness * logp
        if np.any(scale > 0.0):
            logits += scale[:, None] * z
        if inv_t is not None:
            logits *= inv_t
        logits -= logits.max(axis=1, keepdims=True)
        probs = np.exp(logits)
        probs /= probs.sum(axis=1, keepdims=True)
        return probs

    def _slot_from_tables(self, classes, prev2, prev, k, slot, numerics, own, inv_t):
        """Candidates, target values and draft probabilities at `slot` for every row, from the boot tables.

        Rows in `own` (no pair rows, or a temperature other than 1) are computed
        as `draft_block` computes them; the rest are gathered.
        """
        model, topk, vocab = self.model, self.topk, self.vocab
        pair = model.pair_rows(classes, prev2, prev)
        tables = self._boot_tables(numerics)
        probs_tab = self._slot_table(numerics, k, slot)
        idx = np.maximum(pair, 0)
        cand, p, probs = tables["cand"][idx], tables["p"][idx], probs_tab[idx]
        odd = own | (pair < 0)
        if odd.any():
            m = np.flatnonzero(odd)
            c_m, p_m, logp_m = cand[m], p[m], tables["logp"][idx[m]]
            z_m, miss_m = _PAIR_ERRORS[(model.corpus_hash, topk, slot)]
            z_m, miss_m = z_m[idx[m]], miss_m[idx[m]]
            miss = np.flatnonzero(pair[m] < 0)
            if miss.size:
                n = m[miss]
                c_n = model.draft_ids[0, prev[n], :topk].astype(np.int64)
                c_m[miss] = c_n
                p_m[miss] = model.target_at(classes[n], prev2[n], prev[n], c_n, numerics)
                logp_m[miss] = np.log(np.maximum(p_m[miss], 1e-30).astype(np.float64))
                z_m[miss], miss_m[miss] = _errors(classes[n], prev2[n], prev[n], c_n, slot, vocab)
            scale = self.slot_error_scale(classes[m], k, slot, miss_m)
            cand[m], p[m] = c_m, p_m
            probs[m] = self._softmax(logp_m, z_m, scale, inv_t[m])
        return cand, p, probs

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
        tokens = np.empty((batch, k), dtype=np.int64)
        cand_all = np.empty((batch, k, topk), dtype=np.int64)
        q_all = np.empty((batch, k, topk), dtype=np.float32)
        p_all = np.empty((batch, k, topk), dtype=np.float32)
        choice_all = np.zeros((batch, k), dtype=np.int64)
        if k == 0 or batch == 0:
            return DraftBlock(tokens, cand_all, q_all, p_all, choice_all)
        greedy_rows = temperatures < GREEDY_TEMPERATURE
        inv_t = np.where(greedy_rows, 1.0, 1.0 / np.maximum(temperatures, GREEDY_TEMPERATURE))[:, None]
        rows = np.arange(batch)
        prev2, prev = anchor_prev.astype(np.int64), anchors.astype(np.int64)
        # A temperature-1 or greedy row's logits are multiplied by exactly 1: the tables hold them.
        own = (inv_t[:, 0] != 1.0) if self.tabulate else None
        any_greedy = bool(greedy_rows.any())
        for slot in range(k):
            if own is not None:
                cand, p, probs = self._slot_from_tables(classes, prev2, prev, k, slot, numerics, own, inv_t)
            else:
                cand, logp, p, z, miss_u = self._contexts(classes, prev2, prev, slot, numerics)
                probs = self._softmax(logp, z, self.slot_error_scale(classes, k, slot, miss_u), inv_t)
            if probabilistic:
                cdf = np.cumsum(probs, axis=1)
                choice = np.minimum((cdf < uniforms[:, slot, None] * cdf[:, -1:]).sum(axis=1), topk - 1)
                qv = probs.astype(np.float32)
                if any_greedy:  # a greedy row's verifier path ignores q; one-hot keeps it a distribution
                    g = np.flatnonzero(greedy_rows)
                    choice[g] = probs[g].argmax(axis=1)
                    qv[g] = 0.0
                    qv[g, choice[g]] = 1.0
            else:
                choice = probs.argmax(axis=1)
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
