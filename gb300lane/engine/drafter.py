"""The DSpark drafter: one parallel pass over k slots, then the Markov fix-up.

Parallel pass: slot i (0-based) proposes the token i + 1 places after the
anchor from the anchor state alone (the anchor pair's rows when the
checkpoint has them, else the anchor token's), reading the table for offset
i + 1; the slots never see each other. Only the top `dspark_draft_topk`
candidates of each slot's base logits are scored.

Markov fix-up: walking the slots left to right, slot i's candidate logits get
`markov_weight * (log P(x | t_{i-1}) - log P(x))`, the pointwise mutual
information of each candidate with the token sampled one slot earlier, so
the block recovers some of the dependency the parallel pass cannot see.
The slot's distribution is a softmax over its candidates, scattered into
target-vocabulary columns (zero elsewhere), which is what the verifier needs
on the probabilistic path; greedy drafts hand the verifier a one-hot.

Past the trained block (offset > dspark_block_size) the checkpoint has
nothing: no table for the offset, and no trained transition into the slot
(the Markov head holds one per slot pair of the trained block, slot i-1 to
slot i). Such a slot's logits decay to the unigram prior, scored over its
own top-k candidates. That is where the k=9 cliff comes from; nothing here knows
an acceptance rate.
"""

from __future__ import annotations

import numpy as np

from gb300lane.engine.model import BuiltinModel
from gb300lane.engine.sampling import GREEDY_TEMPERATURE

#: Weight of the Markov bias. 1.0 makes the fixed-up slot the product of the
#: two experts (anchor table and bigram) with the shared unigram counted once.
MARKOV_WEIGHT = 1.0


class DSparkDrafter:
    """Drafts k tokens per sequence from the anchor; see the module docstring."""

    def __init__(
        self,
        model: BuiltinModel,
        *,
        topk: int,
        block_size: int,
        markov_weight: float = MARKOV_WEIGHT,
        serial: bool = False,
    ) -> None:
        trained = model.draft_ids.shape[0]
        if not 1 <= topk <= model.draft_ids.shape[2]:
            raise ValueError(f"dspark_draft_topk must lie in [1, {model.draft_ids.shape[2]}]; got {topk}")
        if not 1 <= block_size <= trained:
            raise ValueError(f"dspark_block_size must lie in [1, {trained}]; got {block_size}")
        self.model = model
        self.topk = topk
        self.block_size = block_size
        self.markov_weight = markov_weight
        self.vocab = model.vocab_size
        self.log_unigram = np.log(model.unigram)
        order = np.argsort(-model.unigram, kind="stable")[:topk]
        self._prior_ids = order.astype(np.int32)
        self._prior_logp = self.log_unigram[order].astype(np.float64)
        # MTP chains one stage per slot: each slot reads the next-token table at the
        # previous slot's token, so there is no parallel pass and no Markov bias.
        self.serial = serial


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
    ) -> tuple[np.ndarray, np.ndarray]:
        """Draft tokens (B, k) int64 and draft probabilities q (B, k, V) float32.

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
            if prev is not None and self.markov_weight and not self.serial and slot < self.block_size:
                link = model.bigram[prev[:, None], cand]
                logits += self.markov_weight * (np.log(link) - self.log_unigram[cand])
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
