"""The builtin model's tokenizer: words and punctuation, lossless on ASCII text.

A piece is an optional leading space plus a word, a digit, or one punctuation
character; newlines and runs of blanks are pieces of their own. The
vocabulary holds the two special tokens, every character seen in the corpora
(so any piece can be spelled out), and the most frequent pieces up to a fixed
size. A piece outside the vocabulary is spelled character by character;
a character never seen in the corpora becomes `<unk>`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

EOS_TEXT = "<|endoftext|>"
UNK_TEXT = "<unk>"
EOS_ID = 0
UNK_ID = 1

PIECE_RE = re.compile(r"<\|endoftext\|>| ?[A-Za-z_]+| ?[0-9]| ?[^\sA-Za-z0-9_]|\n|[ \t]+|\s")


def split_pieces(text: str) -> list[str]:
    """The text as pieces; `''.join(split_pieces(t)) == t` for every t."""
    return PIECE_RE.findall(text)


class Tokenizer:
    """Maps text to token ids and back. Build with `Tokenizer.train`, or from a saved piece list."""

    def __init__(self, pieces: Sequence[str]) -> None:
        if len(pieces) < 2 or pieces[EOS_ID] != EOS_TEXT or pieces[UNK_ID] != UNK_TEXT:
            raise ValueError("a vocabulary starts with the EOS and UNK pieces")
        self.pieces: list[str] = list(pieces)
        self.index: dict[str, int] = {p: i for i, p in enumerate(self.pieces)}
        self._cache: dict[str, tuple[int, ...]] = {}

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> Tokenizer:
        counts: Counter[str] = Counter()
        chars: set[str] = set()
        for text in texts:
            pieces = split_pieces(text)
            counts.update(pieces)
            chars.update(text)
        chars.discard("")
        vocab = [EOS_TEXT, UNK_TEXT] + sorted(chars - {EOS_TEXT})
        seen = set(vocab)
        # Ties broken by the piece itself so the vocabulary is a pure function of the corpora.
        for piece, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
            if len(vocab) >= vocab_size:
                break
            if piece not in seen:
                vocab.append(piece)
                seen.add(piece)
        return cls(vocab)

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        hit = self._cache.get(piece)
        if hit is not None:
            return hit
        tid = self.index.get(piece)
        ids = (tid,) if tid is not None else tuple(self.index.get(ch, UNK_ID) for ch in piece)
        if len(self._cache) < 200_000:
            self._cache[piece] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        # finditer, not findall: a long text is matched piece by piece, so a thread encoding
        # a 30 MB prompt lets the event loop's thread run between pieces.
        for match in PIECE_RE.finditer(text):
            out.extend(self._encode_piece(match.group()))
        return out

    def decode(self, ids: Iterable[int], *, skip_special: bool = True) -> str:
        pieces = self.pieces
        parts = []
        for tid in ids:
            if skip_special and tid in (EOS_ID, UNK_ID):
                continue
            parts.append(pieces[tid])
        return "".join(parts)
