"""The calibration fast path: a card's arms run on the embedded engine's core, in process.

What is the same as a full card run: the recipe is rendered to its `vllm
serve` command line and parsed by the engine's own argument parser; every
request body is built by bench's request builder (same transcripts, same
per-request seeds, forced length) and parsed by the engine's API parser;
the requests run through the same `EngineCore` the server steps, closed-loop
at the cell's concurrency; the per-request spec-decode counters and the
modelled clock are the ones the server reports; and the window data goes
through the same adapter (`cards.record.arms.window_data_from_result`) and the same
gate code as `card score`.

Each arm is one boot: its engine gets its own boot seed, so the numerics
jitter between boots (the engine's run-to-run variance) is there as on a
served run; a calibration derives the boot seeds from its replicate, so it
repeats.

What differs, and is said in every calibration's output (`DIFFERENCES`):
no boot sequence, so the boot gates (hash hit, flag, environment, KV pool, foreign
clients) are not exercised; no HTTP, so a finished stream's next request
joins the batch at once, while through the server it arrives a moment later
and the batch the k schedule sees can briefly be smaller; and decode rates
are on the modelled clock only (there is no wall clock to read).
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from gb300lane import __version__
from gb300lane.bench.models import CellResult, RequestRecord, RequestSpecDecode, SpecStats, WindowResult
from gb300lane.bench.quality import Ask, QualityOutcome, ToolCall, check
from gb300lane.bench.stats import Percentiles
from gb300lane.cards.decide.data import ArmData, BootFacts, WindowData, merge_stages
from gb300lane.cards.record.arms import window_data_from_result
from gb300lane.cards.schema import Arm, Card, LosslessGate
from gb300lane.recipes.schema import TranscriptClass, WindowSpec
from gb300lane.spec.lossless_result import LosslessResult

DIFFERENCES = (
    "in process on the engine core, each arm one engine with its own boot seed (numerics jitter as between "
    "boots): no boot sequence (boot gates not exercised), no HTTP (at C>1 a finished stream's next request joins "
    "the batch at once, so the k schedule can see a fuller batch than through the server), C1 requests run side "
    "by side at the one-user k and are timed as if alone (same tokens, same modelled clock), modelled clock only"
)


def _full(window: WindowSpec, n: int) -> bool:
    """Whether a request returned what its window asks: the forced length, else 1 to max_tokens tokens."""
    return n == window.forced_tokens if window.forced_tokens is not None else 1 <= n <= window.token_cap


def _outcome(asked: tuple[Ask, Any] | None, text: str, finish_reason: str | None) -> QualityOutcome | None:
    """A request's task-quality outcome, its text read as the server answers it: a chat answer's message is the
    engine's own (`chat_message`: the tool calls its parser takes from the text under the request's tool mode)."""
    if asked is None:
        return None
    ask, req = asked
    if not req.chat:
        return check(ask, text=text, finish_reason=finish_reason)
    from gb300lane.engine.api import chat_message

    message, finish = chat_message(req, text, finish_reason)
    calls = message.get("tool_calls")
    parsed = [ToolCall.model_validate(c["function"]) for c in calls] if isinstance(calls, list) else []
    content = message.get("content")
    return check(ask, text=content if isinstance(content, str) else "", tool_calls=parsed, finish_reason=finish)


@dataclass
class _ArmEngine:
    """One arm's engine: what a boot of its recipe would serve."""

    core: Any
    served: str
    max_num_seqs: int


@dataclass
class InProcessLane:
    """Runs card arms on the engine core in this process (the model loads once)."""

    model: Any = None
    _args: dict[str, Any] = field(default_factory=dict)
    #: What was sent for each request built (by the Sequence's id): its seed and endpoint kind.
    _sent: dict[int, tuple[int, Literal["completion", "chat"]]] = field(default_factory=dict)
    #: What each request's transcript asks for and its parsed request (by the Sequence's id), in a window whose
    #: requests stop at EOS.
    _asks: dict[int, tuple[Ask, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.model is None:
            from gb300lane.engine.model import load_model

            self.model = load_model()

    def _engine_args(self, recipe_name: str) -> Any:
        if recipe_name not in self._args:
            from gb300lane.engine.args import parse_serve_args
            from gb300lane.errors import CardError
            from gb300lane.recipes import load_recipe
            from gb300lane.recipes.containers import main_argv

            recipe = load_recipe(recipe_name)
            if recipe.engine != "embedded":
                raise CardError(
                    f"recipe {recipe_name} runs on {recipe.engine}, not the embedded engine: "
                    "the in-process fast path only drives the embedded engine (use a local- recipe)"
                )
            argv = list(main_argv(recipe, host="127.0.0.1", port=recipe.lane.port))
            self._args[recipe_name] = parse_serve_args(argv[argv.index("serve") + 1 :])
        return self._args[recipe_name]

    def boot(self, recipe_name: str, boot_seed: int | None = None) -> _ArmEngine:
        """A fresh engine for one arm, as a boot of the recipe would start it.

        Each boot has its own numerics (the engine's boot seed and numerics
        jitter, the lane's run-to-run variance): a recipe that pins a boot
        seed keeps it, otherwise `boot_seed` (a replicate derives one per arm,
        so a calibration repeats) or a fresh one, as a real boot draws.
        """
        from gb300lane.engine.core import EngineCore

        args = self._engine_args(recipe_name)
        pinned = args.boot_seed if args.boot_seed is not None else boot_seed
        core = EngineCore(
            self.model,
            args.spec,
            max_num_seqs=args.max_num_seqs,
            seed=args.seed,
            boot_seed=pinned,
            numerics_jitter=args.numerics_jitter,
        )
        return _ArmEngine(core=core, served=args.served_model_name, max_num_seqs=args.max_num_seqs)

    def _requests(self, engine: _ArmEngine, window: WindowSpec, cls: str, rnd: int) -> list[Any]:
        from gb300lane.bench.quality import asks_for
        from gb300lane.bench.transcripts import select_transcripts
        from gb300lane.bench.window import build_request
        from gb300lane.engine.api import parse_request
        from gb300lane.engine.core import Sequence
        from gb300lane.engine.grammar import Grammar, compile_constraint

        out = []
        for t in select_transcripts(cls, window.transcripts_per_class, window.workload, held_out=window.held_out):
            path, body, seed = build_request(t, window, model=engine.served, round=rnd)
            chat = path.endswith("/chat/completions")
            req = parse_request(body, chat=chat, served_model_name=engine.served)
            ids = req.prompt_ids if req.prompt_ids is not None else self.model.tokenizer.encode(req.prompt_text or "")
            out.append(Sequence(request_id=t.id, prompt_ids=list(ids), params=req.params))
            constraint = req.decoding_constraint
            if constraint is not None:  # as the server builds it: a forced tool call or a response_format
                out[-1].grammar = Grammar(
                    self.model.tokenizer, compile_constraint(self.model.tokenizer, constraint.kind, constraint.value)
                )
            self._sent[id(out[-1])] = (seed if seed is not None else -1, "chat" if chat else "completion")
            if window.stops_at_eos and (ask := asks_for(t)) is not None:
                self._asks[id(out[-1])] = (ask, req)
        return out

    def _closed_loop(self, engine: _ArmEngine, seqs: list[Any], conc: int) -> float:
        """Run `seqs` through the arm's core with at most `conc` running; returns the modelled span."""
        core = engine.core
        core.max_num_seqs = min(conc, engine.max_num_seqs)
        start = float(core.clock)
        for seq in seqs:
            core.add(seq)
        while core.has_work:
            core.step()
        return float(core.clock) - start

    def _one_user(self, engine: _ArmEngine, seqs: list[Any]) -> list[float]:
        """Run C1 requests side by side at the k one user gets, then time each as if it ran alone.

        With per-request random streams a request's tokens depend on its batch
        only through k, so holding k at the schedule's one-user value gives
        every request the tokens it gets alone. Its modelled times are then
        rebuilt step by step with the core's own step-time model at a batch of
        one (its prompt is the step's prefill the first time). Returns each
        request's span; stamps its token times like the core does.
        """
        from gb300lane.engine.core import EngineCore

        spec = engine.core.spec
        fixed = (
            spec.model_copy(
                update={"num_speculative_tokens_per_batch_size": None, "num_speculative_tokens": spec.k_for_batch(1)}
            )
            if spec
            else None
        )
        k = fixed.num_speculative_tokens if fixed else 0
        core = EngineCore(
            self.model,
            fixed,
            max_num_seqs=max(1, len(seqs)),
            seed=engine.core.seed,
            step_model=engine.core.step_model,
            verifier=engine.core.verifier,
            boot_seed=engine.core.boot_seed,
            numerics_jitter=engine.core.numerics_jitter,
        )
        steps: dict[int, list[int]] = {id(s): [] for s in seqs}
        for seq in seqs:
            core.add(seq)
        while core.has_work:
            outcome = core.step()
            if outcome is None:
                break
            for seq, new in outcome.emitted:
                steps[id(seq)].append(len(new))
        spans = []
        model = engine.core.step_model
        for seq in seqs:
            clock, done, stamps = 0.0, 0, []
            for i, n in enumerate(steps[id(seq)]):
                clock += model.step_seconds(1, k, len(seq.prompt_ids) + done, len(seq.prompt_ids) if i == 0 else 0)
                done += n
                stamps += [clock] * n
            seq.token_modelled = stamps
            spans.append(clock)
        return spans

    def _referee(self, engine: _ArmEngine, seqs: list[Any], window: WindowSpec, gate: LosslessGate) -> LosslessResult:
        """The lossless gate's check of a window's sequences, scored in process by the target's own rows (what
        the server's prompt_logprobs return: the raw target under the boot's numerics), never by the verifier.

        Sequences held to a grammar are left out (their sampled distribution is the masked one).
        """
        import time

        import numpy as np

        from gb300lane.spec.lossless import MAX_TOP_K, ScoredTranscript
        from gb300lane.spec.lossless import check as lossless_check

        t0 = time.perf_counter()
        model = self.model
        scored: list[ScoredTranscript] = []
        excluded: dict[str, int] = {}
        tokens = 0
        for seq in seqs:
            if seq.grammar is not None or len(seq.output_ids) < 2:
                why = (
                    "grammar-constrained: the sampled distribution is the masked one"
                    if seq.grammar is not None
                    else "fewer than two generated tokens (the first is not scored)"
                )
                excluded[why] = excluded.get(why, 0) + 1
                continue
            ids = np.asarray([0, 0, *seq.prompt_ids, *seq.output_ids], dtype=np.int64)  # EOS pads, as last_two
            start = len(seq.prompt_ids) + 1
            pos = np.arange(start, len(ids) - 2) + 2
            rows = model.target_probs(
                np.full(len(pos), seq.cls, dtype=np.int64), ids[pos - 2], ids[pos - 1], engine.core.numerics
            )
            tokens += len(ids) - 2
            with np.errstate(divide="ignore"):
                logp = np.log(rows.astype(np.float64))
            own = logp[np.arange(len(pos)), ids[pos]]
            top_idx = np.argsort(-logp, axis=1, kind="stable")[:, :MAX_TOP_K]
            top = np.take_along_axis(logp, top_idx, axis=1)
            hit = top_idx == ids[pos][:, None]
            rank = np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, MAX_TOP_K + 1)
            scored.append(
                ScoredTranscript(
                    klass=str(seq.request_id).rsplit("-", 1)[0],
                    sampled_rank=rank,
                    sampled_logprob=own,
                    top_logprobs=top,
                    label=str(seq.request_id),
                )
            )
        result = lossless_check(
            scored,
            temperature=window.temperature,
            top_p=window.top_p,
            alpha=gate.alpha,
            margin=gate.margin,
            min_tokens=gate.min_tokens,
        )
        return result.model_copy(
            update={
                "referee": "in process (the target's rows)",
                "referee_tokens": tokens,
                "referee_s": time.perf_counter() - t0,
                "excluded": excluded,
            }
        )

    def run_window(self, engine: _ArmEngine, window: WindowSpec, lossless: LosslessGate | None = None) -> WindowResult:
        """A window's cells, closed-loop, as bench's WindowResult (the modelled clock only; no HTTP, no wall clock);
        with `lossless`, its outputs checked by the gate (`_referee`)."""
        from gb300lane.bench.stats import decode_rate
        from gb300lane.spec import SpecCounters

        tok = self.model.tokenizer
        cells_in: list[tuple[int, TranscriptClass, int, list[Any], float]] = []
        one_user: list[tuple[int, list[Any]]] = []
        for rnd in range(1, window.rounds + 1):
            for cls in window.classes:
                for conc in window.concurrency:
                    seqs = self._requests(engine, window, cls, rnd)
                    if conc == 1:
                        one_user.append((len(cells_in), seqs))
                        cells_in.append((rnd, cls, conc, seqs, 0.0))
                    else:
                        cells_in.append((rnd, cls, conc, seqs, self._closed_loop(engine, seqs, conc)))
        if one_user:
            flat = [s for _, seqs in one_user for s in seqs]
            spans = iter(self._one_user(engine, flat))
            for index, seqs in one_user:
                rnd, cls, conc, _, _ = cells_in[index]
                cells_in[index] = (rnd, cls, conc, seqs, sum(next(spans) for _ in seqs))
        records: list[RequestRecord] = []
        cells: list[CellResult] = []
        none = Percentiles.from_values([])
        for rnd, cls, conc, seqs, span in cells_in:
            drafts = draft_tokens = accepted = 0
            per_pos: list[int] = []
            by_len: dict[int, int] = {}
            for seq in seqs:
                times = seq.token_modelled
                n = len(seq.output_ids)
                seed, kind = self._sent.get(id(seq), (0, "completion"))
                text = tok.decode(seq.output_ids)
                records.append(RequestRecord(
                    cls=cls, concurrency=conc, round=rnd, transcript_id=seq.request_id, seed=seed, kind=kind,
                    worker=0, start_s=0.0, ok=_full(window, n), error=None, http_status=None,
                    expected_tokens=window.forced_tokens, output_tokens=n, prompt_tokens=len(seq.prompt_ids),
                    chunks=0, token_attribution="usage", ttft_s=None, e2e_s=None, done_s=None, token_times_s=[],
                    engine=None, clock="modelled", tpot_s=None,
                    decode_tok_s=decode_rate(n, times[0], times[-1]) if times else None,
                    text=text,
                    spec_decode=RequestSpecDecode(num_drafts=seq.num_drafts, num_draft_tokens=seq.num_draft_tokens,
                                                  num_accepted_tokens=seq.num_accepted),
                    quality=_outcome(self._asks.get(id(seq)), text, seq.finish_reason),
                ))  # fmt: skip
                drafts += seq.num_drafts
                draft_tokens += seq.num_draft_tokens
                accepted += seq.num_accepted
                per_pos += [0] * (len(seq.accepted_per_pos) - len(per_pos))
                for i, x in enumerate(seq.accepted_per_pos):
                    per_pos[i] += x
                if seq.num_drafts and conc == 1:
                    k = seq.num_draft_tokens // seq.num_drafts
                    by_len[k] = by_len.get(k, 0) + seq.num_drafts
            counters = SpecCounters(
                num_drafts=drafts,
                num_draft_tokens=draft_tokens,
                num_accepted_tokens=accepted,
                accepted_per_pos=tuple(per_pos),
                drafts_by_length=by_len or None,
            )
            out_tokens = sum(len(s.output_ids) for s in seqs)
            cells.append(CellResult(
                cls=cls, concurrency=conc, round=rnd, valid=all(_full(window, len(s.output_ids)) for s in seqs),
                invalid_reasons=[], notes=[], requests=len(seqs), errors=0,
                expected_tokens=None if window.forced_tokens is None else window.forced_tokens * len(seqs),
                output_tokens=out_tokens, clock="modelled",
                span_s=span, wall_span_s=0.0, decode_tok_s=out_tokens / span if span > 0 else None,
                decode_tok_s_per_stream=none, ttft_s=none, tpot_s=none, itl_s=none, generation_tokens_delta=None,
                spec=SpecStats.from_counters(counters) if drafts else None,
                spec_absent_reason=None if drafts else "no drafts", counters_delta=None,
            ))  # fmt: skip
        return WindowResult(
            tool_version=__version__, python=platform.python_version(), platform=sys.platform,
            created_at=datetime.now(UTC).isoformat(), endpoint="in process", model=engine.served,
            server_version=None, recipe=None, fingerprint=None, window=window.model_dump(mode="json"),
            valid=all(c.valid for c in cells), cells=cells, records=records,
            lossless=None if lossless is None else self._referee(
                engine, [s for *_, seqs, _ in cells_in for s in seqs], window, lossless),
        )  # fmt: skip

    def run_arm(
        self,
        card: Card,
        arm: Arm,
        windows: list[WindowSpec],
        recipe: str | None = None,
        previous: dict[str, WindowData] | None = None,
        boot_seed: int | None = None,
    ) -> ArmData:
        """One arm (one boot) over `windows`, merged after `previous` stages' data when given."""
        engine = self.boot(recipe or arm.recipe, boot_seed)
        gates = {g.window: g for g in card.gates if isinstance(g, LosslessGate)}
        data = {w.name: window_data_from_result(self.run_window(engine, w, gates.get(w.name)), w.name) for w in windows}
        for name, old in (previous or {}).items():
            data[name] = merge_stages([old, data[name]]) if name in data else old
        return ArmData(
            arm=arm.name, recipe=recipe or arm.recipe, role=arm.role, source="measured", boot=BootFacts(), windows=data
        )
