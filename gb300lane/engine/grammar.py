"""Grammar-constrained decoding: llguidance token masks in the target's sampling and in the drafts.

A request with `response_format` (json_object, json_schema) or a forced tool
call (`tool_choice` required or a named function) carries a `Grammar`: an
llguidance matcher compiled from a JSON schema over the builtin tokenizer.
Every step the core asks it for the tokens allowed at each of the k + 1
positions it verifies, walking the drafts (so position j's mask is the
grammar's state after drafts 1..j), then rolls back and commits only the
tokens the step kept.

Speculative decoding stays lossless under the mask because both sides see it:

- The target's rows are the request's distributions with the disallowed
  tokens removed (`shape_rows(allowed=...)`), as vLLM's structured-output
  bitmask does before sampling.
- Each draft is a draw from the drafter's distribution restricted to the
  allowed tokens, and that restricted distribution is what the verifier
  receives as q. A draft the drafter proposed outside the grammar is redrawn
  from the restricted q with a uniform of its own (use `GRAMMAR`): keeping an
  allowed draw and redrawing a disallowed one gives exactly q restricted and
  renormalised. Where none of the drafter's candidates is allowed, the slot
  drafts from the all-corpora bigram after the previous token, restricted
  (greedy drafts take its argmax). The verifier's guarantee needs only that
  each draft is drawn from the q it is handed, so the output distribution is
  the masked target's, whatever the drafter does.

A served model ends its values: once a string, a number or an array item
could stop, a trained model gives the closing token weight that grows with
the value's length. The builtin target is an n-gram model of text, which
would run a string or an integer to the token limit and append calls to a
forced call's array forever. So under a grammar the target's rows also get an
end-of-value preference (`Grammar.prefer_closing`): among the tokens the
grammar allows, those that close a value (inside a string, a piece that starts with
an unescaped `"`; outside one, a piece that starts with `}` or `]`, or a `,`
where neither is allowed) are weighted `CLOSE_BASE x exp(CLOSE_RATE x n)`,
n the tokens since the last structural one. It is part
of the target, so drafting stays lossless against it, and only requests
with a grammar see it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, cast

import numpy as np
from llguidance import LLMatcher, LLTokenizer, TokenizerWrapper, grammar_from

from gb300lane.engine.tokenizer import EOS_ID, UNK_ID, Tokenizer
from gb300lane.spec import kernels

if TYPE_CHECKING:  # a TypedDict of llguidance's stubs, not of its compiled module
    from llguidance._lib import JsonCompileOptions

#: JSON compile options: one line with `", "` and `": "` separators, as the tool_json corpus's compact
#: calls are written. (Flexible whitespace lets an n-gram target wander into runs of blanks.)
JSON_OPTIONS: JsonCompileOptions = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


#: End-of-value preference (see the module docstring): the weight of a closing token after n tokens of a value.
CLOSE_BASE = 8.0
CLOSE_RATE = 0.7
_CLOSE_MAX = 1e6
#: Characters that make a piece structural (the end of the value before it).
_STRUCTURAL = frozenset('{}[],:"')


class GrammarError(ValueError):
    """A schema llguidance cannot compile; the message says why."""


class _Vocabulary:
    """The builtin tokenizer in the shape llguidance's TokenizerWrapper reads."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.eos_token_id = EOS_ID
        self.bos_token_id = None
        # Special tokens are spelled with a leading 0xFF byte, which no text contains.
        self.tokens = [
            b"\xff" + p.encode() if i in (EOS_ID, UNK_ID) else p.encode() for i, p in enumerate(tokenizer.pieces)
        ]
        self.special_token_ids = [EOS_ID, UNK_ID]
        self._tokenizer = tokenizer

    def __call__(self, text: str) -> list[int]:
        return self._tokenizer.encode(text)


_lock = threading.Lock()
_compiled: dict[int, LLTokenizer] = {}


def ll_tokenizer(tokenizer: Tokenizer) -> LLTokenizer:
    """llguidance's view of `tokenizer` (built once per tokenizer, about 40 ms)."""
    with _lock:
        hit = _compiled.get(id(tokenizer))
        if hit is None:
            hit = LLTokenizer(TokenizerWrapper(_Vocabulary(tokenizer)))
            _compiled[id(tokenizer)] = hit
        return hit


_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")


def strict(schema: object) -> object:
    """`schema` with `additionalProperties: false` wherever a schema names properties and leaves it unsaid.

    vLLM's default structured-output backend (xgrammar) compiles schemas in strict mode:
    properties a schema does not name are not generated. Doing the same keeps a forced
    call's arguments to the declared parameters.
    """
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: strict(sub) for name, sub in out[key].items()}
    for key in (*_SUBSCHEMA_LISTS, "items", "additionalProperties", "not"):
        if key in out:
            out[key] = strict(out[key])
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out


def compile_json_schema(tokenizer: Tokenizer, schema: Mapping[str, object] | None) -> str:
    """The llguidance grammar for `schema`, strict (None: any JSON object); GrammarError if it does not compile."""
    return compile_constraint(tokenizer, "json" if schema is not None else "json_object", schema)


def compile_constraint(tokenizer: Tokenizer, kind: str, value: object) -> str:
    """The llguidance grammar for one of vLLM's structured-output kinds; GrammarError if it does not compile.

    json (a schema, compiled strict), json_object (any object), regex, choice (one
    of the strings), grammar (Lark or GBNF, as llguidance reads them).
    """
    try:
        if kind == "json":
            grammar = LLMatcher.grammar_from_json_schema(json.dumps(strict(value)), defaults=JSON_OPTIONS)
        elif kind == "json_object":
            grammar = LLMatcher.grammar_from_json_schema(json.dumps({"type": "object"}), defaults=JSON_OPTIONS)
        elif kind == "regex":
            grammar = LLMatcher.grammar_from_regex(cast(str, value))  # parse_constraint checked it is a string
        elif kind == "choice":
            grammar = grammar_from("choice", json.dumps(value))
        elif kind == "grammar":
            grammar = grammar_from("grammar", cast(str, value))
        else:
            raise GrammarError(f"unknown structured-output kind {kind!r}")
    except (ValueError, RecursionError) as exc:
        raise GrammarError(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__) from None
    is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar, ll_tokenizer(tokenizer))
    if is_error:
        raise GrammarError(messages[0].strip().splitlines()[0] if messages else "the constraint does not compile")
    return grammar


_KINDS: dict[int, tuple[Tokenizer, np.ndarray, np.ndarray, np.ndarray]] = {}
_KINDS_LOCK = threading.Lock()


def token_kinds(tokenizer: Tokenizer) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(quotes, brackets, commas): (V,) booleans of the pieces that start with `"`, with `}` or `]`, with `,`."""
    with _KINDS_LOCK:
        hit = _KINDS.get(id(tokenizer))
        if hit is None or hit[0] is not tokenizer:
            pieces = tokenizer.pieces
            quotes = np.array([p[:1] == '"' for p in pieces], dtype=bool)
            brackets = np.array([p[:1] in ("}", "]") for p in pieces], dtype=bool)
            commas = np.array([p[:1] == "," for p in pieces], dtype=bool)
            for kind in (quotes, brackets, commas):
                kind[EOS_ID] = kind[UNK_ID] = False
            hit = (tokenizer, quotes, brackets, commas)
            _KINDS[id(tokenizer)] = hit
        return hit[1], hit[2], hit[3]


class _JsonPosition:
    """Where JSON text stands, read a piece at a time: inside a string, after a backslash, tokens into the value."""

    __slots__ = ("in_string", "escaped", "run")

    def __init__(self, in_string: bool = False, escaped: bool = False, run: int = 0) -> None:
        self.in_string, self.escaped, self.run = in_string, escaped, run

    def copy(self) -> _JsonPosition:
        return _JsonPosition(self.in_string, self.escaped, self.run)

    def feed(self, piece: str) -> None:
        boundary = False
        for ch in piece:
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif ch == "\\":
                    self.escaped = True
                elif ch == '"':
                    self.in_string, boundary = False, True
            elif ch == '"':
                self.in_string, boundary = True, True
            elif ch in _STRUCTURAL:
                boundary = True
        self.run = 0 if boundary else self.run + 1


class Grammar:
    """One request's matcher: masks for the positions a step verifies, commits of what it kept."""

    def __init__(self, tokenizer: Tokenizer, grammar: str) -> None:
        self.vocab = tokenizer.vocab_size
        # The closing tokens as sorted ids: a row's allowed closers are these ids where its mask is set, the
        # elements a boolean mask of them selects, in the same order.
        self._quotes, self._brackets, self._commas = (np.flatnonzero(kind) for kind in token_kinds(tokenizer))
        self._pieces = tokenizer.pieces
        self._position = _JsonPosition()
        self._matcher = LLMatcher(ll_tokenizer(tokenizer), grammar, log_level=0)
        if self._matcher.is_error():
            raise GrammarError(self._matcher.get_error())

    def allowed(self) -> np.ndarray:
        """(V,) booleans: the tokens the grammar accepts next (EOS only once it is complete)."""
        bits = np.unpackbits(
            np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8), count=self.vocab, bitorder="little"
        )
        return bits.view(bool)  # unpackbits' 0 and 1 bytes are numpy's booleans

    def prefer_closing(self, rows: np.ndarray, allowed: np.ndarray, drafts: np.ndarray) -> None:
        """Give the masked target rows (k + 1, V) their end-of-value preference, in place (module docstring).

        Row j follows the committed output and drafts 1..j; `allowed` is the grammar's mask of each row.
        Inside a string only a quote closes; outside one, `}` or `]`, else a `,`.
        """
        at = self._position.copy()
        for j in range(rows.shape[0]):
            if j:
                tok = int(drafts[j - 1])
                if tok in (EOS_ID, UNK_ID):
                    break
                at.feed(self._pieces[tok])
            mask = allowed[j]
            if at.in_string:
                if at.escaped:
                    continue
                close = self._quotes[mask[self._quotes]]
            else:
                close = self._brackets[mask[self._brackets]]
                if not close.size:
                    close = self._commas[mask[self._commas]]
            row = rows[j]
            if not close.size or close.size == self.vocab or row[close].sum() <= 0.0:
                continue
            weight = min(CLOSE_BASE * float(np.exp(CLOSE_RATE * at.run)), _CLOSE_MAX)
            row[close] *= weight
            row /= row.sum()

    def advance(self, token: int) -> bool:
        return self._matcher.consume_token(int(token))

    def rollback(self, count: int) -> None:
        if count:
            self._matcher.rollback(count)

    def commit(self, tokens: list[int]) -> bool:
        """Consume the tokens a step kept, up to an EOS; False if the grammar refused one.

        EOS is never consumed: the grammar only allows it once complete, and what follows
        it (under ignore_eos) is EOS again, so the matcher never has to leave its last state.
        """
        text = [int(t) for t in tokens]
        if EOS_ID in text:
            text = text[: text.index(EOS_ID)]
        for tok in text:
            self._position.feed(self._pieces[tok])
        return self._matcher.consume_tokens(text) if text else True

    @property
    def done(self) -> bool:
        """The grammar is complete and takes nothing more (EOS aside)."""
        return self._matcher.is_stopped()

    @property
    def error(self) -> str:
        return self._matcher.get_error()


def _redraw(row: np.ndarray, u: float) -> int:
    """The inverse-CDF index of `row` at `u`: searchsorted (right) in its running sum, at most the last index."""
    compiled = kernels.active()
    if compiled is not None and row.dtype == np.float32 and row.ndim == 1 and row.flags.c_contiguous:
        return int(compiled.row_index(row, u))  # the same float32 running sum and double comparisons, one pass
    cdf = np.cumsum(row)
    return int(min(np.searchsorted(cdf, np.float64(u) * cdf[-1], side="right"), row.shape[0] - 1))


def constrain_drafts(
    grammar: Grammar,
    drafts: np.ndarray,
    q: np.ndarray,
    bigram: np.ndarray,
    anchor: int,
    uniforms: np.ndarray,
    *,
    greedy: bool,
) -> np.ndarray:
    """Redraw one row's drafts inside the grammar, in place; returns its k + 1 target masks.

    `drafts` (k,) and `q` (k, V) are the row's drafts and draft distributions;
    `uniforms` (k,) drive redraws. See the module docstring for why the result
    is lossless.
    """
    k = drafts.shape[0]
    masks = np.empty((k + 1, grammar.vocab), dtype=bool)
    prev = anchor
    consumed = 0
    for j in range(k):
        allowed = grammar.allowed()
        masks[j] = allowed
        token = int(drafts[j])
        drafted = bool(q[j, token] > 0.0)
        # q's row zeroed off the mask, in place (q >= 0, so the product is np.where's row).
        row = np.multiply(q[j], allowed, out=q[j])
        mass = float(row.sum())
        if mass <= 0.0:
            row = np.where(allowed, bigram[prev], 0.0)
            mass = float(row.sum())
            if mass <= 0.0:  # nothing allowed at all: the grammar is finished; only EOS can follow
                row = np.zeros(grammar.vocab)
                row[EOS_ID] = 1.0
                mass = 1.0
            if greedy:
                best = int(np.argmax(row))
                row = np.zeros(grammar.vocab)
                row[best] = 1.0
                mass = 1.0
            row = row / mass
            q[j] = row
        else:
            row /= mass
        if not allowed[token] or not drafted or row[token] <= 0.0:
            token = _redraw(row, float(uniforms[j]))
        drafts[j] = token
        if token == EOS_ID:
            # The grammar is complete here; after an EOS only EOS follows (see Grammar.commit).
            masks[j + 1 :] = False
            masks[j + 1 :, EOS_ID] = True
            grammar.rollback(consumed)
            return masks
        if not grammar.advance(token):
            # The matcher gave up (a parser limit) on a token its own mask allowed: it stays in error,
            # so the step's commit fails and that request alone ends with llguidance's reason.
            masks[j + 1 :] = masks[j]
            return masks
        consumed += 1
        prev = token
    masks[k] = grammar.allowed()
    grammar.rollback(consumed)
    return masks
