"""The builtin model: tokenizer round trip, full target distributions, class reading, the load cache."""

from __future__ import annotations

import numpy as np

from gb300lane.engine.model import CLASSES, MIXED, corpus_texts, load_model
from gb300lane.engine.tokenizer import EOS_ID, Tokenizer, split_pieces


def test_pieces_are_lossless_and_words_keep_their_space():
    text = "def f(x):\n    return x  + 1  # ok\n"
    assert "".join(split_pieces(text)) == text
    assert " x" in split_pieces(text) and "    " in split_pieces(text)


def test_tokenizer_round_trips_ascii_outside_the_vocabulary():
    tok = Tokenizer.train(["the cat sat on the mat"], 64)
    text = "the toast  sat"
    assert tok.decode(tok.encode(text)) == text


def test_corpora_are_shipped_with_a_notice():
    texts = corpus_texts()
    assert set(texts) == set(CLASSES)
    total = sum(len(t.encode()) for t in texts.values())
    assert 300_000 < total < 1_000_000
    from gb300lane.engine.model import CORPORA_DIR

    notice = (CORPORA_DIR.parent / "NOTICE").read_text()
    for name in CLASSES:
        assert f"{name}.txt" in notice


def test_target_gives_a_full_distribution_in_every_context():
    model = load_model()
    rng = np.random.default_rng(0)
    c2 = rng.integers(0, model.vocab_size, 64)
    c1 = rng.integers(0, model.vocab_size, 64)
    cls = rng.integers(0, MIXED + 1, 64)
    p = model.target_probs(cls, c2, c1)
    assert p.shape == (64, model.vocab_size)
    assert np.all(p > 0)
    assert np.allclose(p.sum(axis=1), 1.0, atol=1e-4)


def test_prompts_read_as_their_own_class():
    model = load_model()
    texts = corpus_texts()
    for index, name in enumerate(CLASSES):
        docs = [model.tokenizer.encode(d) for d in texts[name].split("<|endoftext|>") if d.strip()][:20]
        # From the middle of each document: a module's opening docstring reads as prose, rightly.
        hits = sum(model.classify(ids[len(ids) // 2 :][:128]) == index for ids in docs)
        assert hits >= 0.9 * len(docs), name


def test_a_cached_model_is_read_back_not_rebuilt_and_is_the_same(monkeypatch) -> None:
    """The on-disk cache answers a fresh process; how long that takes is benchmarks/engine.py's (cached load row)."""
    from gb300lane.engine import model as model_mod

    first = load_model()  # builds the cache if this machine never did
    model_mod._loaded.clear()

    def rebuilt(*_args, **_kw):
        raise AssertionError("the model was rebuilt although its cache file is there")

    monkeypatch.setattr(model_mod, "_build", rebuilt)
    again = load_model()
    assert again is not first
    for name in model_mod._FIELDS:
        assert np.array_equal(getattr(again, name), getattr(first, name)), name
    assert again.tokenizer.encode("hello world") == first.tokenizer.encode("hello world")
    assert again.tokenizer.encode("hello world")[-1] != EOS_ID
