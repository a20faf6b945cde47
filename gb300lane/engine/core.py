"""The engine core: continuous batching, one draft + verify step at a time, the modelled clock.

Requests join the running batch between steps (up to `max_num_seqs`) and
leave when they finish; each step takes k from the speculative schedule for
the batch size it runs at, drafts, and verifies. A plain random row
(temperature 1, nothing truncated) is verified on the draft's support
(`gb300lane.spec.verify_support`): the drafter hands over its candidates with
q and the target's probabilities there, and the target's full row is built
only at the one position whose token the target samples itself; the
drafter gathers frequent anchor pairs' slot distributions from tables built
once per boot. Greedy and shaped rows, and every row with `support=False` or
a wrapped verifier, get the target's full rows at all k + 1 positions and
`gb300lane.spec.verify`; `support=False` also drafts step by step without the
boot tables (the reference path: same tokens, more arithmetic). The core is
synchronous and knows no HTTP: the server drives it, the benchmark calls it
directly.

Randomness is per request and addressed, not consumed (`streams.py`): every
uniform a step draws for a request is keyed by the request (its `seed`, else
the engine seed and its arrival number), the output position the step starts
at, what the draw is for and its slot. What that makes invariant, and what it
does not (each claim has a test in tests/engine/test_core.py):

- Within one boot, a seeded request's text does not depend on which requests
  share its steps or in what order they arrived, as long as its steps run at
  the same k. Greedy requests (temperature < 1e-5) go further: their text is
  the target's argmax chain whatever the k, the batch or the seed.
- Under a batch-size k schedule it is not invariant: a request that runs at
  k = 3 in a batch of five and at k = 5 alone verifies different blocks, so
  its text diverges from the first step where k differs. The slots both shapes
  have still draw the same uniforms, so the drafts agree on those slots.
- Across boots it is not invariant unless pinned. Each boot has a boot seed
  (fresh per boot, `--boot-seed` / `GB300LANE_BOOT_SEED` pins it) that sets
  the target's numerics: every context's interpolation weights move by up to
  `numerics_jitter` (relative, default `NUMERICS_JITTER`) either way, which
  reorders near-tied tokens, as a real lane's batch-variant kernels do. A
  seeded control re-run on a new boot therefore differs where a sample or an
  accept test sat near a tie, and from there on; `numerics_jitter = 0` makes
  boots bit-identical.

The step-time model is memory-bound, as the lane is: a base cost, a cost per
verified slot (B x (k + 1)), a cost per token of context read, and a prefill
cost for prompts admitted in the step. Calibrated so that one stream at a 2K
context costs 11.0 ms at k=5 and 12.2 ms at k=9.
"""

from __future__ import annotations

import secrets
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from gb300lane.engine.config import SpecConfig
from gb300lane.engine.drafter import DSparkDrafter
from gb300lane.engine.faults import Faults
from gb300lane.engine.grammar import Grammar, constrain_drafts
from gb300lane.engine.model import DSPARK_BLOCK_SIZE, BuiltinModel
from gb300lane.engine.sampling import GREEDY_TEMPERATURE, SamplingParams, shape_rows
from gb300lane.engine.streams import GRAMMAR, boot_key, request_key, step_uniforms, uniforms, unseeded_key
from gb300lane.engine.tokenizer import EOS_ID
from gb300lane.spec import kernels, verify
from gb300lane.spec.verification import verify_support

#: Relative move of the target's interpolation weights between boots (see the module docstring);
#: sized so that seeded controls on two boots differ as the write-up's do (about 0.5% in
#: tokens/step at its window sizes).
NUMERICS_JITTER = 0.01


@dataclass(frozen=True)
class StepTimeModel:
    """Seconds per verify step (see the module docstring for the calibration)."""

    base_s: float = 8.7e-3
    per_slot_s: float = 0.3e-3
    per_context_token_s: float = 0.25e-6
    prefill_per_token_s: float = 20e-6

    def step_seconds(self, batch: int, k: int, context_tokens: int, prefill_tokens: int = 0) -> float:
        return (
            self.base_s
            + self.per_slot_s * batch * (k + 1)
            + self.per_context_token_s * context_tokens
            + self.prefill_per_token_s * prefill_tokens
        )


@dataclass
class Sequence:
    """One request in flight: its prompt, output, randomness and counters."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    stream_key: int | None = None  # set on add: from the seed, else the engine seed and arrival number
    output_ids: list[int] = field(default_factory=list)
    cls: int = 0  # the traffic class the prompt reads as (set on add)
    finish_reason: str | None = None
    arrival_modelled: float = 0.0
    arrival_wall: float = 0.0
    admitted_modelled: float | None = None
    admitted_wall: float | None = None
    token_modelled: list[float] = field(default_factory=list)
    token_wall: list[float] = field(default_factory=list)
    # Per output token, the verify-block position that emitted it: 1..k for a draft accepted at that position, the
    # position after the accepted ones for the token the verifier sampled there (recovered or bonus); 0 for a
    # token from a step that verified no draft (the prefill's)
    block_positions: list[int] = field(default_factory=list)
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    grammar: Grammar | None = None  # structured output: the tokens allowed are the grammar's (grammar.py)
    error: str | None = None  # why the request failed alone (its grammar stopped), if it did

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def context_len(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)

    def last_two(self) -> tuple[int, int]:
        """The two tokens before the next position (EOS pads a short prompt, as a document start)."""
        tail = (self.prompt_ids[-2:] + self.output_ids[-2:])[-2:]
        tail = [EOS_ID] * (2 - len(tail)) + tail
        return tail[0], tail[1]


@dataclass
class EngineCounters:
    """Cumulative counters the metrics and the stats log read."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)
    drafts_by_length: dict[int, int] = field(default_factory=dict)
    generation_tokens: int = 0
    prompt_tokens: int = 0
    verify_steps: int = 0
    modelled_seconds: float = 0.0


@dataclass
class StepOutcome:
    """What one step did: per sequence, the tokens it emitted and whether it finished."""

    emitted: list[tuple[Sequence, list[int]]]
    finished: list[Sequence]
    step_seconds: float
    k: int
    batch: int


class StepDraws:
    """A step's verify uniforms, served in the `Generator.random` shape the verifier draws with.

    The verifier draws (B, k) accept uniforms, then (B,) for its own token,
    and nothing else; both were computed from the rows' streams before the
    call. A copy replays the same draws (a paired comparison of two rules).
    """

    def __init__(self, accept: np.ndarray, sample: np.ndarray) -> None:
        self._queue = [accept, sample]
        self._next = 0

    def random(self, size=None):
        if self._next >= len(self._queue):
            raise RuntimeError("a verify step draws (B, k) then (B,) uniforms; it asked for a third draw")
        out = self._queue[self._next]
        shape = (size,) if isinstance(size, int) else tuple(size or ())
        if shape != out.shape:
            raise ValueError(f"the step holds uniforms of shape {out.shape} for this draw; asked for {shape}")
        self._next += 1
        return out.copy()


class EngineCore:
    """The scheduler and the step; see the module docstring."""

    def __init__(
        self,
        model: BuiltinModel,
        spec: SpecConfig | None,
        *,
        max_num_seqs: int = 32,
        seed: int = 0,
        step_model: StepTimeModel | None = None,
        verifier=verify,
        boot_seed: int | None = None,
        numerics_jitter: float = NUMERICS_JITTER,
        support: bool = True,
        faults: Faults | None = None,
    ) -> None:
        if not (np.isfinite(numerics_jitter) and 0.0 <= numerics_jitter <= 1.0):
            raise ValueError(f"numerics_jitter must lie in [0, 1]; got {numerics_jitter}")
        self.model = model
        self.spec = spec
        self.max_num_seqs = max_num_seqs
        self.seed = seed
        # A boot seed not given is drawn fresh, as a real boot's kernel choices are.
        self.boot_seed = secrets.randbits(63) if boot_seed is None else int(boot_seed)
        self.numerics_jitter = float(numerics_jitter)
        self._numerics = (boot_key(self.boot_seed), self.numerics_jitter) if numerics_jitter > 0 else None
        self.step_model = step_model or StepTimeModel()
        # The verify seam: `gb300lane.spec.verify` unless a caller wraps it to observe steps.
        self.verifier = verifier
        # Verify on the draft support where the math allows (plain random rows, DSpark drafts);
        # False, or a wrapped verifier, verifies every row on full-vocabulary rows (the reference path).
        self.support = support
        # Deliberate faults (faults.py): every row then takes the reference path, with the faults applied there.
        self.faults = faults
        self.drafter = (
            DSparkDrafter(
                model,
                topk=spec.dspark_draft_topk,
                block_size=DSPARK_BLOCK_SIZE,
                serial=spec.method == "mtp",
                tabulate=support,
            )
            if spec
            else None
        )
        if self.drafter is not None and spec is not None:
            # The boot's drafter tables are built at boot, before the first request, as model loading is.
            schedule = spec.num_speculative_tokens_per_batch_size or ()
            ks = {spec.num_speculative_tokens} | {min(k, spec.num_speculative_tokens) for _, _, k in schedule}
            self.drafter.prepare(self._numerics, sorted(ks))
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.counters = EngineCounters()
        self.clock = 0.0  # modelled seconds since the engine started
        self._arrivals = 0

    @property
    def numerics(self) -> tuple[int, float] | None:
        """This boot's numerics as `BuiltinModel.target_probs` takes them (None: the model's own arithmetic)."""
        return self._numerics

    def add(self, seq: Sequence) -> None:
        seq.params.check()
        if seq.stream_key is None:
            seq.stream_key = (
                request_key(seq.params.seed) if seq.params.seed is not None else unseeded_key(self.seed, self._arrivals)
            )
        self._arrivals += 1
        seq.cls = self.model.classify(seq.prompt_ids)
        seq.arrival_modelled = self.clock
        seq.arrival_wall = time.monotonic()
        self.waiting.append(seq)

    def abort(self, seq: Sequence) -> None:
        seq.finish_reason = seq.finish_reason or "abort"
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def step(self) -> StepOutcome | None:
        prefill = 0
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting.popleft()
            seq.admitted_modelled = self.clock
            seq.admitted_wall = time.monotonic()
            prefill += len(seq.prompt_ids)
            self.counters.prompt_tokens += len(seq.prompt_ids)
            self.running.append(seq)
        if not self.running:
            return None
        batch_seqs = self.running
        batch = len(batch_seqs)
        k = self.spec.k_for_batch(batch) if self.spec else 0
        # One pass over the batch for what the step reads of each request.
        # "Plain" rows may verify on the draft support: no grammar, temperature-1 sampling, EOS allowed.
        rows_info = [
            (
                s.params.temperature,
                s.stream_key,
                len(s.output_ids),
                s.cls,
                s.grammar is None,
                *s.last_two(),
                s.grammar is None
                and s.params.plain
                and (s.params.ignore_eos or s.params.min_tokens <= len(s.output_ids)),
                len(s.prompt_ids) + len(s.output_ids),
            )
            for s in batch_seqs
        ]
        temps_l, keys_l, positions_l, classes_l, free_l, c2_l, c1_l, plain_l, context_l = zip(*rows_info)
        temps = np.array(temps_l, dtype=np.float64)
        greedy = temps < GREEDY_TEMPERATURE
        keys = np.array(keys_l, dtype=np.uint64)
        positions = np.array(positions_l, dtype=np.int64)
        ctx = np.array([c2_l, c1_l], dtype=np.int64).T
        classes = np.array(classes_l, dtype=np.int64)
        any_grammar = not all(free_l)
        draft_u, u_accept, u_sample = step_uniforms(keys, positions, k)
        block = None
        q = None
        if k > 0 and self.drafter is not None and self.spec is not None:  # k > 0 only with a speculative config
            probabilistic = self.spec.draft_sample_method == "probabilistic"
            if self.drafter.markov and not self.drafter.serial:
                block = self.drafter.draft_block(
                    classes,
                    ctx[:, 0],
                    ctx[:, 1],
                    k,
                    temps,
                    draft_u,
                    probabilistic=probabilistic,
                    numerics=self._numerics,
                )
                drafts = block.tokens
            else:
                drafts, q = self.drafter.draft(
                    classes,
                    ctx[:, 0],
                    ctx[:, 1],
                    k,
                    temps,
                    draft_u,
                    probabilistic=probabilistic,
                    numerics=self._numerics,
                )
        else:
            drafts = np.empty((batch, 0), dtype=np.int64)
            q = np.empty((batch, 0, self.model.vocab_size), dtype=np.float32)
        if block is not None and any_grammar:
            q = block.dense_q(self.model.vocab_size)  # a grammar redraws drafts and q in place
        masks = self._constrain(batch_seqs, drafts, q, ctx, keys, positions, greedy)
        method = self.spec.rejection_sample_method if self.spec else "standard"
        on_support = np.zeros(batch, dtype=bool)
        if (
            block is not None
            and self.support
            and self.verifier is verify
            and self.faults is None
            and self.spec is not None
            and self.spec.draft_sample_method == "probabilistic"
        ):
            on_support = np.array(plain_l, dtype=bool)
        sup = np.flatnonzero(on_support)
        every = sup.size == batch  # the common case: every row on the support, no copies
        if not every:
            accepted_arr = np.zeros(batch, dtype=np.int64)
            tokens_arr = np.full((batch, k + 1), -1, dtype=np.int64)
        if sup.size and block is not None:
            full = np.concatenate([ctx, drafts], axis=1)

            def rows_at(rows: np.ndarray, pos: np.ndarray) -> np.ndarray:
                at = rows if every else sup[rows]
                return self.model.target_probs(classes[at], full[at, pos], full[at, pos + 1], self._numerics)

            fused = self._verify_fused(method, block, u_accept, u_sample, classes, full) if every else None
            if fused is not None:
                accepted_arr, tokens_arr = fused
            elif every:
                res = verify_support(
                    method, block.p, block.q, block.cand, block.choice, u_accept, u_sample, rows_at, drafts=block.tokens
                )
                accepted_arr, tokens_arr = res.accepted, res.tokens
            else:
                res = verify_support(
                    method,
                    block.p[sup],
                    block.q[sup],
                    block.cand[sup],
                    block.choice[sup],
                    u_accept[sup],
                    u_sample[sup],
                    rows_at,
                    drafts=block.tokens[sup],
                )
                accepted_arr[sup], tokens_arr[sup] = res.accepted, res.tokens
        dense = np.flatnonzero(~on_support) if not every else sup[:0]
        if dense.size:
            d_seqs = [batch_seqs[i] for i in dense]
            d_masks = {j: masks[i] for j, i in enumerate(dense.tolist()) if i in masks}
            p = self._target(classes[dense], ctx[dense], drafts[dense], d_seqs, temps[dense], greedy[dense], d_masks)
            q_d = (
                q[dense]
                if q is not None
                else block.dense_q(self.model.vocab_size, dense)
                if block is not None
                else np.empty((dense.size, 0, self.model.vocab_size), dtype=np.float32)
            )
            draws = StepDraws(u_accept[dense], u_sample[dense])
            verifier = self.verifier if self.faults is None else self.faults.verify
            res = verifier(method, p, q_d, drafts[dense], draws, greedy=greedy[dense])
            accepted_arr[dense], tokens_arr[dense] = res.accepted, res.tokens

        context_tokens = sum(context_l)
        seconds = self.step_model.step_seconds(batch, k, context_tokens, prefill)
        self.clock += seconds
        c = self.counters
        c.verify_steps += 1
        c.modelled_seconds += seconds
        now_wall = time.monotonic()
        emitted: list[tuple[Sequence, list[int]]] = []
        finished: list[Sequence] = []
        accepted = accepted_arr.tolist()
        tokens = tokens_arr.tolist()
        if k > 0:
            c.num_drafts += batch
            c.num_draft_tokens += batch * k
            c.drafts_by_length[k] = c.drafts_by_length.get(k, 0) + batch
            if len(c.accepted_per_pos) < k:
                c.accepted_per_pos.extend([0] * (k - len(c.accepted_per_pos)))
        for row, seq in enumerate(batch_seqs):
            acc = accepted[row]
            if k > 0:
                c.num_accepted += acc
                seq.num_drafts += 1
                seq.num_draft_tokens += k
                seq.num_accepted += acc
                if len(seq.accepted_per_pos) < k:
                    seq.accepted_per_pos.extend([0] * (k - len(seq.accepted_per_pos)))
                for pos in range(acc):
                    c.accepted_per_pos[pos] += 1
                    seq.accepted_per_pos[pos] += 1
            new = self._take(seq, tokens[row][: acc + 1])
            if seq.grammar is not None and not seq.grammar.commit(new):
                # The grammar gave up (a parser limit): this request fails alone, with llguidance's reason.
                seq.error = f"structured output stopped: {seq.grammar.error.splitlines()[0]}"
                seq.finish_reason = "abort"
            if new:
                seq.output_ids.extend(new)
                stamp_m = self.clock - seq.arrival_modelled
                stamp_w = now_wall - seq.arrival_wall
                seq.token_modelled.extend([stamp_m] * len(new))
                seq.token_wall.extend([stamp_w] * len(new))
                seq.block_positions.extend(range(1, len(new) + 1) if k > 0 else [0] * len(new))
                c.generation_tokens += len(new)
                emitted.append((seq, new))
            if seq.finished:
                finished.append(seq)
        if finished:
            self.running = [s for s in self.running if not s.finished]
        return StepOutcome(emitted=emitted, finished=finished, step_seconds=seconds, k=k, batch=batch)

    def _verify_fused(self, method, block, u_accept, u_sample, classes, full) -> tuple[np.ndarray, np.ndarray] | None:
        """`verify_support` on every row with the target's rows read in the same compiled call (support_step):
        the accept rule, the row at each next position and its token, as the kernels `verify_support` calls
        give them; None where that call does not apply (no kernels, no drafts, other dtypes)."""
        compiled = kernels.active()
        batch, k = block.tokens.shape
        if (
            compiled is None
            or k == 0
            or method not in ("standard", "block")
            or not (block.p.dtype == block.q.dtype == np.float32 and block.choice.dtype == classes.dtype == np.int64)
        ):
            return None
        tables = self.model.target_tables(self._numerics)
        if tables is None:
            return None
        tau = np.empty(batch, dtype=np.int64)
        tokens = np.empty((batch, k + 1), dtype=np.int64)
        compiled.support_step(
            method == "block",
            np.ascontiguousarray(block.p),
            np.ascontiguousarray(block.q),
            np.ascontiguousarray(block.choice),
            np.ascontiguousarray(u_accept, dtype=np.float64),
            np.ascontiguousarray(u_sample, dtype=np.float64),
            np.ascontiguousarray(block.cand, dtype=np.int64),
            np.ascontiguousarray(block.tokens, dtype=np.int64),
            np.ascontiguousarray(classes),
            np.ascontiguousarray(full, dtype=np.int64),
            *tables,
            tau,
            tokens,
            np.empty(batch),
        )
        return tau, tokens

    def _take(self, seq: Sequence, tokens: list[int]) -> list[int]:
        """The prefix of a step's tokens the request keeps; sets its finish reason."""
        params = seq.params
        room = params.max_tokens - len(seq.output_ids)
        kept = []
        for tok in tokens:
            if room <= 0:
                break
            kept.append(tok)
            room -= 1
            if tok == EOS_ID and not params.ignore_eos and len(seq.output_ids) + len(kept) >= params.min_tokens:
                seq.finish_reason = "stop"
                return kept
        if room <= 0:
            seq.finish_reason = "length"
        return kept

    def _constrain(self, seqs, drafts, q, ctx, keys, positions, greedy) -> dict[int, np.ndarray]:
        """Per constrained row: its drafts redrawn inside its grammar (in place) and its k + 1 target masks."""
        rows = [row for row, seq in enumerate(seqs) if seq.grammar is not None]
        if not rows:
            return {}
        k = drafts.shape[1]
        greedy_drafts = self.spec is None or self.spec.draft_sample_method == "greedy"
        redraws = uniforms(keys[rows], positions[rows], GRAMMAR, max(k, 1))
        masks = {}
        for i, row in enumerate(rows):
            grammar = seqs[row].grammar
            masks[row] = constrain_drafts(
                grammar,
                drafts[row],
                q[row],
                self.model.bigram,
                int(ctx[row, 1]),
                redraws[i],
                greedy=bool(greedy_drafts or greedy[row]),
            )
        return masks

    def _target(self, classes, ctx, drafts, seqs, temps, greedy, masks=None) -> np.ndarray:
        """(B, k+1, V) target probabilities with temperature, top_p and min_tokens applied."""
        batch, k = drafts.shape
        vocab = self.model.vocab_size
        # Position j's context is the two tokens before it: anchor pair, then drafts.
        full = np.concatenate([ctx, drafts], axis=1)
        c2 = full[:, : k + 1].reshape(-1)
        c1 = full[:, 1 : k + 2].reshape(-1)
        p = self.model.target_probs(np.repeat(classes, k + 1), c2, c1, self._numerics).reshape(batch, k + 1, vocab)
        for row, seq in enumerate(seqs):
            params = seq.params if self.faults is None else self.faults.target_params(seq.params)
            short = 0 if params.ignore_eos else min(max(params.min_tokens - len(seq.output_ids), 0), k + 1)
            allowed = masks.get(row) if masks else None
            if short or allowed is not None or not (params.plain or params.greedy):
                p[row] = shape_rows(p[row], params, ban_eos=short, allowed=allowed)
            if allowed is not None:
                # A grammar can allow only tokens the target gives no mass here (a context whose
                # interpolation weight reached 1): the position then samples the allowed tokens by
                # their unigram prior, as a real model's logits are never -inf.
                empty = np.flatnonzero(p[row].sum(axis=1) <= 0.0)
                for j in empty:
                    prior = np.where(allowed[j], self.model.unigram, 0.0)
                    p[row, j] = prior / prior.sum() if prior.sum() > 0 else np.eye(vocab, dtype=p.dtype)[EOS_ID]
                if seq.grammar is not None:
                    seq.grammar.prefer_closing(p[row], allowed, drafts[row])
        return p
