"""The engine's calibration: shipped parameters, the target on a support, verifying on the draft support."""

from __future__ import annotations

import json

import numpy as np
import pytest

from gb300lane.engine.calibration import CALIBRATED_CLASSES, NEUTRAL, parse_calibration, shipped_calibration
from gb300lane.engine.core import EngineCore, SamplingParams, Sequence
from gb300lane.engine.intent import read_intent
from gb300lane.engine.model import MIXED, load_model, with_calibration
from gb300lane.errors import EngineError


@pytest.fixture(scope="module")
def model():
    return load_model()


def test_shipped_calibration_covers_every_class_and_names_its_fit():
    cal = shipped_calibration()
    assert set(cal.classes) == set(CALIBRATED_CLASSES)
    assert "scripts/fit_engine.py" in cal.fitted_by


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{", "not JSON"),
        (json.dumps({"classes": {}, "drafter": NEUTRAL.drafter.model_dump()}), "missing prose"),
        (json.dumps({**json.loads(NEUTRAL.model_dump_json()), "surprise": 1}), "surprise"),
    ],
)
def test_a_bad_calibration_file_is_one_line_naming_the_file_and_the_fix(text, needle):
    with pytest.raises(EngineError) as err:
        parse_calibration(text, "calibration.json")
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("calibration.json: ") and needle in msg
    assert "scripts/fit_engine.py" in msg


def test_the_target_on_a_support_is_the_full_rows_columns_bit_for_bit(model):
    rng = np.random.default_rng(0)
    vocab = model.vocab_size
    keys = model.tri_keys[rng.integers(0, model.tri_keys.size, 64)]
    cls, c2, c1 = keys // (vocab * vocab), (keys // vocab) % vocab, keys % vocab
    cols = rng.integers(0, vocab, (64, 16))
    for numerics in (None, (99, 0.01)):
        full = model.target_probs(cls, c2, c1, numerics)
        assert np.array_equal(model.target_at(cls, c2, c1, cols, numerics), np.take_along_axis(full, cols, axis=1))


def test_predictability_sharpens_a_class_and_leaves_rows_distributions(model):
    sharp = NEUTRAL.model_copy(
        update={
            "classes": {**NEUTRAL.classes, "code": NEUTRAL.classes["code"].model_copy(update={"predictability": 0.3})}
        }
    )
    neutral, sharpened = with_calibration(model, NEUTRAL), with_calibration(model, sharp)
    vocab = model.vocab_size
    code = 2
    keys = model.tri_keys[(model.tri_keys // (vocab * vocab)) == code][:200]
    c2, c1, cls = (keys // vocab) % vocab, keys % vocab, np.full(keys.size, code)
    p0, p1 = neutral.target_probs(cls, c2, c1), sharpened.target_probs(cls, c2, c1)
    assert np.allclose(p1.sum(axis=1), 1.0, atol=1e-4)
    assert p1.max(axis=1).mean() > p0.max(axis=1).mean()
    # Recalibrating starts from the built model, never from the last calibration.
    again = with_calibration(sharpened, NEUTRAL)
    assert np.array_equal(again.target_probs(cls, c2, c1), p0)


def test_a_conversation_across_classes_reads_as_mixed_and_an_instruction_as_what_it_asks_for():
    assert read_intent("Write a bash loop that retries a command on the server.", mixed=MIXED) == 3
    assert read_intent("Produce ten novels as a CSV table with columns title, author.", mixed=MIXED) == 1
    assert read_intent("the", mixed=MIXED) is None
    conversation = (
        "Write a reflective essay about tides.\n\nProduce a CSV table of ten rivers.\n\n"
        "Write a Python function that merges intervals.\n\nGive the bash commands to free disk.\n\n"
        "Call tools and answer only with JSON."
    )
    assert read_intent(conversation, mixed=MIXED) == MIXED


@pytest.mark.parametrize("method", ["standard", "block"])
def test_verifying_on_the_draft_support_emits_what_full_rows_emit(model, method):
    from gb300lane.bench.fidelity import class_prompts, spec_for

    prompts = class_prompts(model, "prose", 4) + class_prompts(model, "tool_json", 4)
    runs = []
    for support in (False, True):
        core = EngineCore(model, spec_for(5, method), max_num_seqs=8, seed=0, boot_seed=5, support=support)
        seqs = [
            Sequence(f"r{i}", ids, SamplingParams(max_tokens=64, ignore_eos=True, seed=i))
            for i, ids in enumerate(prompts)
        ]
        for s in seqs:
            core.add(s)
        while core.has_work:
            core.step()
        runs.append(([s.output_ids for s in seqs], core.counters.num_accepted, tuple(core.counters.accepted_per_pos)))
    assert runs[0] == runs[1]
    assert runs[1][1] > 0


def test_the_shipped_transcripts_read_as_the_class_they_ask_for(model):
    from gb300lane.bench.fidelity import FIDELITY_CLASSES, class_prompts

    for index, cls in enumerate(FIDELITY_CLASSES):
        read = [model.classify(ids) for ids in class_prompts(model, cls, 40)]
        assert sum(r == index for r in read) >= 38, (cls, read)
