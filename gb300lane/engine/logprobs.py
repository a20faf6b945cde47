"""Log-probabilities of the target model, and their vLLM response shapes.

What is reported is vLLM's default `logprobs_mode`, `raw_logprobs`: the
target's own next-token distribution at each position (temperature 1, before
temperature, top_k, top_p, min_p, the min_tokens EOS ban or a grammar's mask),
as `BuiltinModel.target_probs` gives it under the boot's numerics, which is
the row the verifier's target side starts from. `--logprobs-mode
processed_logprobs` reports the distribution the request samples from
instead (`sampling.shape_rows` of that row: temperature, min_p, top_k,
top_p). Either way the numbers come from the model, never from the verify
step, so a faulted verifier (faults.py) still reports the exact target and a
referee can score the engine's own outputs against them.

A position's context is the two tokens before it (EOS pads a short prefix, as
`Sequence.last_two` does), and the class the request's prompt reads as, so
the logprob of a prompt token at position i (`prompt_logprobs`) and of an
output token at the same place in prompt + output are the same number when
both requests read as the same class.

Each position gives a `Scored`: the token, its logprob and rank (the number
of tokens at least as likely, itself included, as vLLM counts it), and the
top-k by logprob (ties by token id). The dictionaries vLLM builds put the scored token first,
then the top-k (the token appears once), and every logprob is floored at
-9999.0 as vLLM's server floors them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from gb300lane.engine.model import BuiltinModel
from gb300lane.engine.sampling import SamplingParams, shape_rows
from gb300lane.engine.tokenizer import EOS_ID, Tokenizer

#: vLLM's default `--max-logprobs`: the most logprobs (and prompt_logprobs) a request may ask for.
MAX_LOGPROBS = 20
#: vLLM's `--logprobs-mode` values the engine computes.
LOGPROBS_MODES: tuple[str, ...] = ("raw_logprobs", "processed_logprobs")
#: The floor vLLM's server puts under a logprob it returns (a -inf does not serialise).
LOGPROB_FLOOR = -9999.0
#: Positions scored per call to the target (bounds the rows held at once: 512 x V float32).
_ROWS_PER_CALL = 512


@dataclass(frozen=True)
class Scored:
    """One position: the token there, its logprob and rank, and the top-k (token id, logprob) in rank order."""

    token: int
    logprob: float
    rank: int
    top: tuple[tuple[int, float, int], ...]  # (token id, logprob, rank)

    def items(self) -> list[tuple[int, float, int]]:
        """(token id, logprob, rank) as vLLM's dictionary holds them: this token first, then the top-k."""
        out = [(self.token, self.logprob, self.rank)]
        out.extend(entry for entry in self.top if entry[0] != self.token)
        return out


def _floor(value: float) -> float:
    return max(value, LOGPROB_FLOOR) if not math.isnan(value) else LOGPROB_FLOOR


def score_positions(
    model: BuiltinModel,
    numerics: tuple[int, float] | None,
    cls: int,
    ids: list[int],
    start: int,
    end: int,
    k: int,
    *,
    params: SamplingParams | None = None,
) -> list[Scored]:
    """`Scored` for positions start..end-1 of `ids` (prompt then output), each given the two tokens before it
    and the class `cls`, under the boot's `numerics`.

    `params` selects processed logprobs (the request's sampling applied); None
    is raw. `k` top entries per position (0 gives the token alone).
    """
    out: list[Scored] = []
    arr = np.asarray([EOS_ID, EOS_ID] + list(ids), dtype=np.int64)
    for lo in range(start, end, _ROWS_PER_CALL):
        hi = min(end, lo + _ROWS_PER_CALL)
        pos = np.arange(lo, hi) + 2  # index into the padded array
        rows = model.target_probs(np.full(hi - lo, cls, dtype=np.int64), arr[pos - 2], arr[pos - 1], numerics)
        if params is not None:
            rows = shape_rows(rows, params)
        with np.errstate(divide="ignore"):
            logp = np.log(rows.astype(np.float64))
        tokens = arr[pos]
        own = logp[np.arange(hi - lo), tokens]
        ranks = (logp >= own[:, None]).sum(axis=1)
        top = np.argsort(-logp, axis=1, kind="stable")[:, :k] if k else np.empty((hi - lo, 0), dtype=np.int64)
        for r in range(hi - lo):
            row = logp[r]
            out.append(
                Scored(
                    int(tokens[r]),
                    _floor(float(own[r])),
                    int(ranks[r]),
                    tuple((int(t), _floor(float(row[t])), int((row >= row[t]).sum())) for t in top[r]),
                )
            )
    return out


def processed(params: SamplingParams) -> SamplingParams:
    """The parameters processed logprobs apply: the request's sampling, nothing about its length."""
    return replace(params, min_tokens=0, ignore_eos=True)


def prompt_logprobs_json(tokenizer: Tokenizer, scored: list[Scored]) -> list[dict[str, dict[str, object]] | None]:
    """vLLM's `prompt_logprobs`: None for the first prompt token, then {token id: {logprob, rank, decoded_token}}."""
    out: list[dict[str, dict[str, object]] | None] = [None]
    for s in scored:
        out.append(
            {
                str(tid): {"logprob": lp, "rank": rank, "decoded_token": tokenizer.pieces[tid]}
                for tid, lp, rank in s.items()
            }
        )
    return out


def completion_logprobs_json(
    tokenizer: Tokenizer,
    ids: list[int],
    scored: list[Scored | None],
    k: int,
) -> dict[str, list[object]]:
    """A completion choice's `logprobs` (vLLM's CompletionLogProbs) for `ids`, one `scored` entry (or None) each.

    `top_logprobs` holds the token's own entry and then the top-k (k + 1 at
    most, k when the token is among them); `text_offset` counts characters of
    the tokens before, from 0.
    """
    text_offset: list[object] = []
    token_logprobs: list[object] = []
    tokens: list[object] = []
    top_logprobs: list[object] = []
    last_len = 0
    for tid, s in zip(ids, scored):
        token = tokenizer.pieces[tid]
        tokens.append(token)
        if s is None:
            token_logprobs.append(None)
            top_logprobs.append(None)
        else:
            token_logprobs.append(s.logprob)
            top_logprobs.append({tokenizer.pieces[t]: lp for t, lp, _ in s.items()[: k + 1]})
        text_offset.append(text_offset[-1] + last_len if text_offset else 0)  # type: ignore[operator]
        last_len = len(token)
    return {
        "text_offset": text_offset,
        "token_logprobs": token_logprobs,
        "tokens": tokens,
        "top_logprobs": top_logprobs,
    }


def chat_logprobs_json(tokenizer: Tokenizer, scored: list[Scored], k: int) -> dict[str, list[dict[str, object]]]:
    """A chat choice's `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}]}; `top_logprobs` is the
    first k entries of vLLM's dictionary (the token's own entry first, then the most likely)."""
    content: list[dict[str, object]] = []
    for s in scored:
        token = tokenizer.pieces[s.token]
        tops = [
            {"token": tokenizer.pieces[t], "logprob": lp, "bytes": list(tokenizer.pieces[t].encode("utf-8"))}
            for t, lp, _ in s.items()[:k]
        ]
        content.append(
            {"token": token, "logprob": s.logprob, "bytes": list(token.encode("utf-8")), "top_logprobs": tops}
        )
    return {"content": content}
