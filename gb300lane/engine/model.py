"""The builtin model: target and drafter tables built from the shipped corpora.

Target: an interpolated (Witten-Bell) trigram over the word-and-punctuation
vocabulary, conditioned on the traffic class the prompt reads as (a topic
variable, as a language model conditions on its whole context): the class's
trigram backs off to the class's bigram, which backs off to the all-corpora
bigram and a smoothed unigram. Every token has mass in every context, so the
target yields a full next-token distribution at any temperature.

Drafter: DSpark-shaped tables. For each offset d = 1..DSPARK_BLOCK_SIZE the
checkpoint holds P_d(x | anchor state), the token d places after the anchor
given the anchor state alone (slots cannot see each other): rows per frequent
(class, anchor pair), else per anchor token, kept as the top `TOPK_MAX`
candidates; the Markov fix-up reads the all-corpora bigram. No table exists
past the trained block: the drafter extrapolates from the last one (see
drafter.py).

Built once per corpus content and cached as an .npz under
`$GB300LANE_MODEL_CACHE` (default `~/.cache/gb300lane`), so later loads are a
file read.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import cast

import numpy as np

from gb300lane.engine.calibration import Calibration, shipped_calibration
from gb300lane.engine.intent import read_intent
from gb300lane.engine.streams import uniforms_at
from gb300lane.engine.tokenizer import EOS_TEXT, Tokenizer
from gb300lane.fsio import sha256_bytes
from gb300lane.spec import kernels

#: The shipped corpora (package data, read through importlib.resources).
CORPORA_DIR = resources.files("gb300lane.engine") / "corpora"
CLASSES: tuple[str, ...] = ("prose", "structured", "code", "shell_ops", "tool_json")
#: Index of the all-corpora layer (the `mixed` class) in class-keyed tables.
MIXED = len(CLASSES)
VOCAB_SIZE = 3072
#: The drafter checkpoint's trained block (`dspark_block_size`) and MTP stage count.
DSPARK_BLOCK_SIZE = 5
MTP_STAGES = 3
#: Candidates kept per drafter row; `dspark_draft_topk` may not exceed it.
TOPK_MAX = 128
#: An anchor pair seen at least this often (within its class) gets its own
#: drafter rows; rarer pairs fall back to the anchor token's rows. The drafter
#: is a compressed model: it knows frequent contexts as well as the target
#: does and rare ones worse, so how formulaic a class is decides how well it
#: drafts.
MIN_PAIR_COUNT = 4
_BUILD_VERSION = "3"
#: Nats per token by which a prompt must read as one corpus over the next to be taken as that corpus's text.
CONTENT_MARGIN = 0.25


def corpus_texts() -> dict[str, str]:
    """Class name -> corpus text (documents separated by the EOS piece)."""
    return {name: CORPORA_DIR.joinpath(f"{name}.txt").read_text(encoding="utf-8") for name in CLASSES}


def cache_dir() -> Path:
    env = os.environ.get("GB300LANE_MODEL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "gb300lane"


def _csr_lookup(keys: np.ndarray, table_keys: np.ndarray) -> np.ndarray:
    """Row index of each key in sorted `table_keys`, -1 where absent."""
    if table_keys.size == 0:
        return np.full(keys.shape, -1, dtype=np.int64)
    slot = np.minimum(table_keys.searchsorted(keys), table_keys.size - 1)
    return np.where(table_keys[slot] == keys, slot, -1)


#: Prompt tails whose class `BuiltinModel.classify` keeps (the memo starts over when full).
CLASSIFIED_MAX = 4096


@dataclass(frozen=True)
class BuiltinModel:
    """Arrays of the builtin target and drafter (read-only after load)."""

    tokenizer: Tokenizer
    corpus_hash: str
    unigram: np.ndarray  # (V,) float32, smoothed, all corpora
    class_log_unigram: np.ndarray  # (len(CLASSES), V) float32, for reading a prompt's class
    bigram: np.ndarray  # (V, V) float32, row a = P(x | a) over all corpora, interpolated with the unigram
    bi_keys: np.ndarray  # (N2,) int64 sorted class * V + a (class bigram contexts)
    bi_indptr: np.ndarray
    bi_cols: np.ndarray
    bi_ml: np.ndarray
    bi_lambda: np.ndarray
    tri_keys: np.ndarray  # (N3,) int64 sorted (class * V + c2) * V + c1, class MIXED = all corpora
    tri_indptr: np.ndarray
    tri_cols: np.ndarray
    tri_ml: np.ndarray
    tri_lambda: np.ndarray
    draft_ids: np.ndarray  # (DSPARK_BLOCK_SIZE, V, TOPK_MAX) int32 candidates by offset and anchor token
    draft_logp: np.ndarray  # (DSPARK_BLOCK_SIZE, V, TOPK_MAX) float32 log P_d(candidate | anchor)
    pair_keys: np.ndarray  # (M,) int64 sorted (class * V + c2) * V + c1 with their own drafter rows
    pair_ids: np.ndarray  # (DSPARK_BLOCK_SIZE, M, TOPK_MAX) int32
    pair_logp: np.ndarray  # (DSPARK_BLOCK_SIZE, M, TOPK_MAX) float32
    calibration: Calibration = field(default_factory=shipped_calibration)
    bi_entries: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # sorted ctx_index * V + col
    tri_entries: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    built: dict[str, np.ndarray] | None = None  # lambdas and ML rows as built, before any calibration
    # The class each prompt tail read as (`classify`), so a prompt sent again is not read again.
    _classified: dict[tuple[int, ...], int] = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    def classify(self, prompt_ids: list[int]) -> int:
        """The class a prompt reads as; MIXED for an empty prompt or a conversation across classes.

        Text that reads as one corpus (its per-token log-likelihood ratio to the
        all-corpora unigram leads the runner-up's by `CONTENT_MARGIN` nats) is
        that corpus's class; an instruction, which reads as plain English to
        every corpus, is the class it asks for (`intent.py`); with no cue either
        way, naive Bayes over the class unigrams decides.
        """
        if not prompt_ids:
            return MIXED
        key = tuple(prompt_ids[-512:])
        known = self._classified.get(key)
        if known is None:
            if len(self._classified) >= CLASSIFIED_MAX:
                self._classified.clear()
            known = self._classified[key] = self._classify(key)
        return known

    def _classify(self, tail: tuple[int, ...]) -> int:
        ids = np.asarray(tail, dtype=np.int64)
        ratio = (self.class_log_unigram[:, ids] - np.log(self.unigram[ids])).mean(axis=1)
        top2 = np.sort(ratio)[-2:]
        if top2[1] - top2[0] < CONTENT_MARGIN:
            asked = read_intent(self.tokenizer.decode(ids.tolist()), mixed=MIXED)
            if asked is not None:
                return asked
        return int(self.class_log_unigram[:, ids].sum(axis=1).argmax())

    def _keys3(self, cls: np.ndarray, c2: np.ndarray, c1: np.ndarray) -> np.ndarray:
        vocab = self.vocab_size
        return cast(np.ndarray, (cls.astype(np.int64) * vocab + c2) * vocab + c1)

    def pair_rows(self, cls: np.ndarray, c2: np.ndarray, c1: np.ndarray) -> np.ndarray:
        """Index into the pair tables per context, -1 where the pair has no rows."""
        return _csr_lookup(self._keys3(cls, c2, c1), self.pair_keys)

    def target_probs(
        self, cls: np.ndarray, c2: np.ndarray, c1: np.ndarray, numerics: tuple[int, float] | None = None
    ) -> np.ndarray:
        """(R, V) float32 target next-token distributions for class `cls` and context (c2, c1).

        `numerics` = (boot key, scale) gives one boot's arithmetic: each context's
        interpolation weights move by up to `scale` (relative) either way, by a
        fixed amount per (boot, layer, context). Every row stays a distribution;
        what changes between boots is the order of near-tied tokens, as batch-
        variant kernels change the last bits of a real lane's logits.
        """
        vocab = self.vocab_size
        bi_lambda, tri_lambda = _boot_lambdas(self, numerics)
        tables = self.target_tables(numerics) if kernels.active() is not None else None
        if tables is not None:
            # The same float32 operations, row by row, in one pass (_kernels.c target_rows).
            out = np.empty((np.shape(c1)[0], vocab), dtype=np.float32)
            kernels.active().target_rows(  # type: ignore[union-attr]
                np.ascontiguousarray(cls, dtype=np.int64),
                np.ascontiguousarray(c2, dtype=np.int64),
                np.ascontiguousarray(c1, dtype=np.int64),
                *tables,
                out,
            )
            return out
        probs = self.bigram[c1]  # fancy indexing copies, so the rows are ours to scale
        n = probs.shape[0]
        base = cls.astype(np.int64) * vocab
        kb, kt = base + c1, (base + c2) * vocab + c1  # the bigram and trigram layers' context keys
        cb, ct = _csr_lookup(kb, self.bi_keys), _csr_lookup(kt, self.tri_keys)
        rb, rt = np.flatnonzero(cb >= 0), np.flatnonzero(ct >= 0)
        nb, nt = rb.size, rt.size
        if nb < n:
            cb = cb[rb]
        if nt < n:
            ct = ct[rt]
        # Both layers at once where the arithmetic is per context: weights (jittered per boot), sparse-row indices.
        lam = np.concatenate([bi_lambda[cb], tri_lambda[ct]])
        starts = np.concatenate([self.bi_indptr[cb], self.tri_indptr[ct]])
        lengths = np.concatenate([self.bi_indptr[cb + 1], self.tri_indptr[ct + 1]]) - starts
        ends = np.cumsum(lengths)
        row_of = np.repeat(np.arange(nb + nt), lengths)
        flat = np.repeat(starts - (ends - lengths), lengths) + np.arange(int(ends[-1]) if ends.size else 0)
        keep = 1.0 - lam
        split = int(ends[nb - 1]) if nb else 0
        # probs[rows] = (1 - lam) * probs[rows] + lam * ML, bigram layer then trigram layer.
        for rows, lo, hi, cols, ml in (
            (rb, 0, split, self.bi_cols, self.bi_ml),
            (rt, split, flat.size, self.tri_cols, self.tri_ml),
        ):
            if not rows.size:
                continue
            first = 0 if lo == 0 else nb
            w = keep[first : first + rows.size, None]
            if rows.size == n:
                probs *= w
            else:
                probs[rows] *= w
            r, f = row_of[lo:hi], flat[lo:hi]
            probs[r - first if rows.size == n else rows[r - first], cols[f]] += lam[r] * ml[f]
        return cast(np.ndarray, probs)

    def target_tables(self, numerics: tuple[int, float] | None = None) -> tuple[np.ndarray, ...] | None:
        """The arrays the compiled kernels read `target_probs`' rows from under a boot's numerics (bigram, then
        per layer keys, indptr, cols, ML values and weights), or None where they are not in the kernels' dtypes."""
        bi_lambda, tri_lambda = _boot_lambdas(self, numerics)
        if not (
            self.bigram.dtype
            == self.bi_ml.dtype
            == self.tri_ml.dtype
            == bi_lambda.dtype
            == tri_lambda.dtype
            == np.float32
            and self.bi_cols.dtype == self.tri_cols.dtype == np.int32
        ):
            return None
        return (
            self.bigram,
            self.bi_keys,
            self.bi_indptr,
            self.bi_cols,
            self.bi_ml,
            bi_lambda,
            self.tri_keys,
            self.tri_indptr,
            self.tri_cols,
            self.tri_ml,
            tri_lambda,
        )

    def target_at(
        self,
        cls: np.ndarray,
        c2: np.ndarray,
        c1: np.ndarray,
        cols: np.ndarray,
        numerics: tuple[int, float] | None = None,
        *,
        trigram: bool = True,
    ) -> np.ndarray:
        """(R, K) float32: `target_probs(cls, c2, c1, numerics)[r, cols[r]]`, bit for bit, without the rows.

        The same float32 operations in the same order on K columns instead of V:
        what verifying and drafting on a draft's support need. `trigram=False`
        leaves the trigram layer out (what a context the trigram tables lack gets).
        """
        cols = np.asarray(cols, dtype=np.int64)
        vals = self.bigram[c1[:, None], cols]
        vocab = self.vocab_size
        layers = [
            (
                cls.astype(np.int64) * vocab + c1,
                self.bi_keys,
                self.bi_entries,
                self.bi_indptr,
                self.bi_ml,
                self.bi_lambda,
                0,
            )
        ]
        if trigram:
            layers.append(
                (
                    self._keys3(cls, c2, c1),
                    self.tri_keys,
                    self.tri_entries,
                    self.tri_indptr,
                    self.tri_ml,
                    self.tri_lambda,
                    1,
                )
            )
        for keys, table, entries, indptr, ml, lam, layer in layers:
            ctx = _csr_lookup(keys, table)
            rows = np.flatnonzero(ctx >= 0)
            if not rows.size:
                continue
            lam_r = lam[ctx[rows]]
            jit = _jitter(numerics, keys[rows], layer)
            if jit is not None:
                lam_r = _jittered(lam_r, jit[1], jit[0])
            sub = vals[rows]
            sub *= (1.0 - lam_r)[:, None]
            at = _csr_lookup(ctx[rows, None] * vocab + cols[rows], entries)
            hit = at >= 0
            sub[hit] += (lam_r[:, None] * ml[np.maximum(at, 0)])[hit]
            vals[rows] = sub
        return cast(np.ndarray, vals)


#: The interpolation weights of every context under the last boot's numerics, by (model, numerics).
_BOOT_LAMBDAS: dict[tuple[int, tuple[int, float]], tuple[BuiltinModel, np.ndarray, np.ndarray]] = {}


def _boot_lambdas(model: BuiltinModel, numerics: tuple[int, float] | None) -> tuple[np.ndarray, np.ndarray]:
    """Every bigram and trigram context's weight under a boot's numerics (the model's own when exact).

    Each context's jitter is a pure function of (boot, layer, context), so a
    boot's weights are formed once for all contexts, with `_jittered`'s
    arithmetic, and gathered per step.
    """
    if numerics is None or numerics[1] == 0.0:
        return model.bi_lambda, model.tri_lambda
    key = (id(model), numerics)
    hit = _BOOT_LAMBDAS.get(key)
    if hit is None or hit[0] is not model:
        nb = model.bi_keys.size
        u = _jitter_uniforms(numerics, np.concatenate([model.bi_keys, model.tri_keys]), nb)
        lam = _jittered(np.concatenate([model.bi_lambda, model.tri_lambda]), u, numerics[1])
        _BOOT_LAMBDAS.clear()
        hit = _BOOT_LAMBDAS[key] = (model, lam[:nb], lam[nb:])
    return hit[1], hit[2]


def _jitter_uniforms(numerics: tuple[int, float], keys: np.ndarray, bigram_rows: int) -> np.ndarray:
    """`_jitter`'s uniforms for keys of which the first `bigram_rows` are bigram contexts, the rest trigram."""
    words = keys.astype(np.uint64) << np.uint64(2)
    words[bigram_rows:] |= np.uint64(1)
    return cast(np.ndarray, uniforms_at(np.array([numerics[0]], dtype=np.uint64), words[None, :])[0])


def _jittered(lam: np.ndarray, u: np.ndarray, scale: float) -> np.ndarray:
    """Interpolation weights moved by up to `scale` (relative) either way: a boot's numerics (see `target_probs`)."""
    return np.minimum(np.maximum(lam * (1.0 + scale * (2.0 * u - 1.0)), 0.0), 1.0).astype(np.float32)


def _jitter(numerics: tuple[int, float] | None, keys: np.ndarray, layer):
    """(scale, uniforms) for rows of a layer (0 bigram, 1 trigram; per row or one for all) under a boot's numerics.

    None when exact.
    """
    if numerics is None or numerics[1] == 0.0:
        return None
    key, scale = numerics
    words = (keys.astype(np.uint64) << np.uint64(2)) | np.asarray(layer).astype(np.uint64)
    return scale, uniforms_at(np.array([key], dtype=np.uint64), words[None, :])[0]


def _witten_bell_rows(keys: np.ndarray, vocab: int, base: np.ndarray) -> np.ndarray:
    """Dense (V, V) P(x | a) from pair keys a * V + x, interpolated with `base` (Witten-Bell)."""
    uniq, counts = np.unique(keys, return_counts=True)
    rows, cols = uniq // vocab, uniq % vocab
    ctx_count = np.bincount(rows, weights=counts, minlength=vocab)
    ctx_types = np.bincount(rows, minlength=vocab).astype(np.float64)
    denom = ctx_count + ctx_types
    lam = np.divide(ctx_count, denom, out=np.zeros(vocab), where=denom > 0)
    table = np.empty((vocab, vocab), dtype=np.float32)
    table[:] = base[None, :].astype(np.float32)
    table *= (1.0 - lam)[:, None].astype(np.float32)
    # lam * ML(x | a) == c(a, x) / (c(a) + t(a)); every row here was seen, so denom > 0.
    table[rows, cols] += (counts / denom[rows]).astype(np.float32)
    return table


def _sparse_ml(keys: np.ndarray, vocab: int) -> dict[str, np.ndarray]:
    """Witten-Bell sparse rows from keys ctx * V + x: sorted contexts, CSR of ML probabilities, lambdas."""
    uniq, counts = np.unique(keys, return_counts=True)
    ctx = uniq // vocab
    ctx_keys, first = np.unique(ctx, return_index=True)
    indptr = np.append(first, uniq.size).astype(np.int64)
    ctx_count = np.add.reduceat(counts, first).astype(np.float64)
    ctx_types = np.diff(indptr).astype(np.float64)
    return {
        "keys": ctx_keys.astype(np.int64),
        "indptr": indptr,
        "cols": (uniq % vocab).astype(np.int32),
        "ml": (counts / np.repeat(ctx_count, np.diff(indptr))).astype(np.float32),
        "lambda": (ctx_count / (ctx_count + ctx_types)).astype(np.float32),
    }


def _top_rows(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    top = np.argpartition(-table, TOPK_MAX - 1, axis=1)[:, :TOPK_MAX]
    vals = np.take_along_axis(table, top, axis=1)
    order = np.argsort(-vals, axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1).astype(np.int32), np.log(np.take_along_axis(vals, order, axis=1))


def _pair_rows(ctx: np.ndarray, nxt: np.ndarray, vocab: int, pair_keys: np.ndarray, anchor_table: np.ndarray):
    """Top candidates of P_d(x | class, c2, c1) for the kept pairs, Witten-Bell over the anchor table.

    `ctx` holds the (class, c2, c1) key of each position, `nxt` the token d places on.
    """
    keep = np.isin(ctx, pair_keys)
    idx = np.searchsorted(pair_keys, ctx[keep])
    uniq, counts = np.unique(idx * vocab + nxt[keep], return_counts=True)
    rows, cols = uniq // vocab, uniq % vocab
    ctx_count = np.bincount(rows, weights=counts, minlength=pair_keys.size)
    ctx_types = np.bincount(rows, minlength=pair_keys.size).astype(np.float64)
    denom = np.maximum(ctx_count + ctx_types, 1.0)
    lam = ctx_count / denom
    ids = np.empty((pair_keys.size, TOPK_MAX), dtype=np.int32)
    logp = np.empty((pair_keys.size, TOPK_MAX), dtype=np.float32)
    chunk = 1024
    for lo in range(0, pair_keys.size, chunk):
        hi = min(lo + chunk, pair_keys.size)
        dense = anchor_table[pair_keys[lo:hi] % vocab] * (1.0 - lam[lo:hi, None]).astype(np.float32)
        sel = (rows >= lo) & (rows < hi)
        dense[rows[sel] - lo, cols[sel]] += (counts[sel] / denom[rows[sel]]).astype(np.float32)
        ids[lo:hi], logp[lo:hi] = _top_rows(dense)
    return ids, logp


def _build(texts: dict[str, str], corpus_hash: str) -> dict[str, np.ndarray]:
    joined = "".join(t if t.endswith("\n") else t + "\n" for t in texts.values())
    tok = Tokenizer.train([joined], VOCAB_SIZE)
    vocab = tok.vocab_size
    eos = np.asarray(tok.encode(EOS_TEXT), dtype=np.int64)
    streams = [np.concatenate([np.asarray(tok.encode(texts[c]), dtype=np.int64), eos]) for c in CLASSES]
    stream = np.concatenate(streams)
    uni_counts = np.bincount(stream, minlength=vocab).astype(np.float64)
    # Add-half smoothing keeps every token possible in every context.
    unigram = (uni_counts + 0.5) / (uni_counts.sum() + 0.5 * vocab)
    class_log_unigram = np.stack(
        [np.log((np.bincount(s, minlength=vocab) + 0.5) / (s.size + 0.5 * vocab)) for s in streams]
    ).astype(np.float32)
    bigram = _witten_bell_rows(stream[:-1] * vocab + stream[1:], vocab, unigram)

    # Class-keyed n-gram positions; the all-corpora layer is class MIXED.
    labelled = [(c, s) for c, s in enumerate(streams)] + [(MIXED, stream)]
    bi = _sparse_ml(np.concatenate([(c * vocab + s[:-1]) * vocab + s[1:] for c, s in enumerate(streams)]), vocab)
    tri = _sparse_ml(
        np.concatenate([((c * vocab + s[:-2]) * vocab + s[1:-1]) * vocab + s[2:] for c, s in labelled]), vocab
    )

    pair_all, pair_counts = np.unique(
        np.concatenate([(c * vocab + s[:-1]) * vocab + s[1:] for c, s in labelled]), return_counts=True
    )
    pair_keys = pair_all[pair_counts >= MIN_PAIR_COUNT].astype(np.int64)
    draft_ids = np.empty((DSPARK_BLOCK_SIZE, vocab, TOPK_MAX), dtype=np.int32)
    draft_logp = np.empty((DSPARK_BLOCK_SIZE, vocab, TOPK_MAX), dtype=np.float32)
    pair_ids = np.empty((DSPARK_BLOCK_SIZE, pair_keys.size, TOPK_MAX), dtype=np.int32)
    pair_logp = np.empty((DSPARK_BLOCK_SIZE, pair_keys.size, TOPK_MAX), dtype=np.float32)
    for d in range(1, DSPARK_BLOCK_SIZE + 1):
        table = bigram if d == 1 else _witten_bell_rows(stream[:-d] * vocab + stream[d:], vocab, unigram)
        draft_ids[d - 1], draft_logp[d - 1] = _top_rows(table)
        ctx = np.concatenate([(c * vocab + s[: -d - 1]) * vocab + s[1:-d] for c, s in labelled])
        nxt = np.concatenate([s[1 + d :] for _, s in labelled])
        pair_ids[d - 1], pair_logp[d - 1] = _pair_rows(ctx, nxt, vocab, pair_keys, table)
        del table
    return {
        "pieces": np.array(tok.pieces),
        "corpus_hash": np.array(corpus_hash),
        "unigram": unigram.astype(np.float32),
        "class_log_unigram": class_log_unigram,
        "bigram": bigram,
        **{f"bi_{k}": v for k, v in bi.items()},
        **{f"tri_{k}": v for k, v in tri.items()},
        "draft_ids": draft_ids,
        "draft_logp": draft_logp,
        "pair_keys": pair_keys,
        "pair_ids": pair_ids,
        "pair_logp": pair_logp,
    }


_FIELDS = (
    "unigram",
    "class_log_unigram",
    "bigram",
    "bi_keys",
    "bi_indptr",
    "bi_cols",
    "bi_ml",
    "bi_lambda",
    "tri_keys",
    "tri_indptr",
    "tri_cols",
    "tri_ml",
    "tri_lambda",
    "draft_ids",
    "draft_logp",
    "pair_keys",
    "pair_ids",
    "pair_logp",
)


def _from_arrays(arrays) -> BuiltinModel:
    model = BuiltinModel(
        tokenizer=Tokenizer([str(p) for p in arrays["pieces"]]),
        corpus_hash=str(arrays["corpus_hash"]),
        **{name: arrays[name] for name in _FIELDS},
    )
    return with_calibration(model, shipped_calibration())


def _entries(keys: np.ndarray, indptr: np.ndarray, cols: np.ndarray, vocab: int) -> np.ndarray:
    """Sorted ctx_index * V + col for every stored (context, column) of a CSR layer."""
    return cast(np.ndarray, np.repeat(np.arange(keys.size, dtype=np.int64), np.diff(indptr)) * vocab + cols)


def with_calibration(model: BuiltinModel, calibration: Calibration) -> BuiltinModel:
    """The model under `calibration`: each class's layers at its predictability rho.

    A context's weight on its seen continuations lambda -> lambda ** rho, and
    those continuations ML -> ML ** (1 / rho), renormalised over the context's
    row: rho < 1 trusts and sharpens what the class's text does next (more
    predictable), rho > 1 backs off and flattens. rho = 1 is the model as
    built. Always from the built arrays, so recalibrating never compounds.
    """
    vocab = model.vocab_size
    built = model.built or {
        "bi_lambda": model.bi_lambda,
        "tri_lambda": model.tri_lambda,
        "bi_ml": model.bi_ml,
        "tri_ml": model.tri_ml,
    }
    rho = np.array([calibration.for_class(i).predictability for i in range(MIXED + 1)], dtype=np.float64)
    arrays: dict[str, np.ndarray] = {}
    for layer, keys, indptr, cls_div in (
        ("bi", model.bi_keys, model.bi_indptr, vocab),
        ("tri", model.tri_keys, model.tri_indptr, vocab * vocab),
    ):
        r = rho[keys // cls_div]
        arrays[f"{layer}_lambda"] = np.power(built[f"{layer}_lambda"].astype(np.float64), r).astype(np.float32)
        lengths = np.diff(indptr)
        sharp = np.power(built[f"{layer}_ml"].astype(np.float64), np.repeat(1.0 / r, lengths))
        sums = np.add.reduceat(sharp, indptr[:-1]) if sharp.size else sharp
        arrays[f"{layer}_ml"] = (sharp / np.repeat(sums, lengths)).astype(np.float32)
    entries = (
        model.bi_entries if model.bi_entries.size else _entries(model.bi_keys, model.bi_indptr, model.bi_cols, vocab)
    )
    tri_entries = (
        model.tri_entries
        if model.tri_entries.size
        else _entries(model.tri_keys, model.tri_indptr, model.tri_cols, vocab)
    )
    return replace(
        model,
        calibration=calibration,
        bi_entries=entries,
        tri_entries=tri_entries,
        built=built,
        bi_lambda=arrays["bi_lambda"],
        tri_lambda=arrays["tri_lambda"],
        bi_ml=arrays["bi_ml"],
        tri_ml=arrays["tri_ml"],
    )


_lock = threading.Lock()
_loaded: dict[str, BuiltinModel] = {}


def builtin_config() -> dict[str, int | str]:
    """The builtin checkpoint's config, as a checkpoint's config.json would state it."""
    return {
        "architecture": "gb300lane-builtin-ngram",
        "vocab_size": VOCAB_SIZE,
        "mtp_stages": MTP_STAGES,
        "dspark_block_size": DSPARK_BLOCK_SIZE,
        "draft_topk_max": TOPK_MAX,
        "build_version": _BUILD_VERSION,
    }


def model_hash() -> str:
    """Hash of everything the model is built from: corpora and build parameters."""
    texts = corpus_texts()
    return sha256_bytes(
        _BUILD_VERSION
        + f"|{VOCAB_SIZE}|{DSPARK_BLOCK_SIZE}|{TOPK_MAX}|{MIN_PAIR_COUNT}|"
        + "".join(texts[c] for c in CLASSES)
    )[:16]


def load_model() -> BuiltinModel:
    """The builtin model, built on first use per corpus content and cached on disk and in memory."""
    corpus_hash = model_hash()
    with _lock:
        if corpus_hash in _loaded:
            return _loaded[corpus_hash]
        path = cache_dir() / f"builtin-{corpus_hash}.npz"
        arrays = None
        if path.is_file():
            try:
                with np.load(path) as data:
                    arrays = {k: data[k] for k in data.files}
                if any(name not in arrays for name in _FIELDS):
                    arrays = None
            except (OSError, ValueError, KeyError):
                arrays = None  # a torn or foreign file is rebuilt, not trusted
        if arrays is None:
            arrays = _build(corpus_texts(), corpus_hash)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp.npz")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                np.savez(tmp, **arrays)  # type: ignore[arg-type]  # numpy's stub reads the keys as allow_pickle
                os.replace(tmp, path)
            except OSError:
                # An unwritable cache costs a rebuild per process (about 2 s), not a failure.
                tmp.unlink(missing_ok=True)
        model = _from_arrays(arrays)
        _loaded[corpus_hash] = model
        return model
