"""Import of one file of each format (written from each format's published description), and what it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gb300lane.errors import BenchError, WorkloadError
from gb300lane.workloads import load_workload, split_workload
from gb300lane.workloads.importing import import_workload, render_import
from gb300lane.workloads.parsers import TRACE_BLOCK

DATA = Path(__file__).parent / "data"


@pytest.fixture(autouse=True)
def _workloads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GB300LANE_WORKLOADS_DIR", raising=False)
    return tmp_path / "workloads"


def test_openai_bodies_keep_chat_tools_and_completions_by_the_users_class() -> None:
    r = import_workload(DATA / "openai.jsonl", name="ops", fmt="openai", class_field="metadata.team")
    assert (r.records, r.kept) == (7, 4)
    assert {d.reason: d.first.rsplit(":", 1)[1] for d in r.dropped} == {
        "prompt is token ids (no text to send)": "5",
        "duplicate of an earlier record (same content, same class)": "6",
        "no metadata.team (a string) to class it by": "7",
    }
    w = load_workload("ops")
    assert w.classes == ("support-bots", "search")  # "Support Bots" and "support bots" are one class
    bots = w.by_class["support-bots"]
    assert [t.kind for t in bots] == ["chat", "chat"]
    assert bots[0].tools and bots[0].tools[0]["function"]["name"] == "get_current_weather"
    assert bots[1].response_format == {"type": "json_object"} and bots[1].output_tokens == 128
    assert [t.prompt for t in w.by_class["search"]] == ["Say this is a test", "Write a tagline for an ice cream shop."]
    stats = {c.name: c for c in r.classes}
    assert stats["support-bots"].with_tools == 1 and stats["support-bots"].tool_names == {"get_current_weather": 1}
    text = render_import(r)
    assert "dropped 1: prompt is token ids" in text and "class search: 2 transcripts" in text


def test_sharegpt_takes_the_first_human_turn_after_the_system_turn() -> None:
    r = import_workload(DATA / "sharegpt.json", name="chats", fmt="sharegpt", class_field="category")
    assert (r.records, r.kept) == (4, 3)
    assert [d.reason for d in r.dropped] == ["no human turn before the first reply"]
    coding = load_workload("chats").by_class["coding"]
    assert coding[0].messages == [
        {"role": "system", "content": "You are a concise coding tutor."},
        {"role": "user", "content": "How do I reverse a list in Python?"},
    ]


def test_vllm_custom_keeps_output_tokens_in_one_class() -> None:
    r = import_workload(DATA / "custom.jsonl", name="custom", fmt="vllm-custom")
    assert (r.records, r.kept) == (5, 4) and [c.name for c in r.classes] == ["traffic"]
    outs = [t.output_tokens for t in load_workload("custom").by_class["traffic"]]
    assert outs == [None, 32, 64, 256]


def test_trace_blocks_share_prefixes_and_arrivals_are_relative_seconds() -> None:
    r = import_workload(DATA / "trace.jsonl", name="trace", fmt="trace")
    assert (r.records, r.kept) == (4, 3)
    a, b, c = load_workload("trace").by_class["traffic"]
    assert [t.arrival_s for t in (a, b, c)] == [0.0, 3.053, 8.248]
    assert [t.output_tokens for t in (a, b, c)] == [52, 26, 30]
    wa, wb = a.prompt.split(), b.prompt.split()  # type: ignore[union-attr]
    assert (len(wa), len(wb)) == (6955, 6472)
    shared = 12 * TRACE_BLOCK  # the twelve hash_ids the two requests share
    assert wa[:shared] == wb[:shared] and wa[shared : shared + 50] != wb[shared : shared + 50]


def test_a_record_that_holds_a_secret_is_refused_naming_line_and_field(tmp_path: Path) -> None:
    f = tmp_path / "leak.jsonl"
    f.write_text('{"prompt": "fine"}\n{"prompt": "use key sk-abcdefghijklmnopqrstuvwxyz123456 to call it"}\n')
    with pytest.raises(WorkloadError, match=r"leak.jsonl:2: field prompt looks like it holds an OpenAI-style key"):
        import_workload(f, name="leak", fmt="vllm-custom")
    assert not (tmp_path / "workloads" / "leak").exists()
    r = import_workload(f, name="leak", fmt="vllm-custom", allow_secrets=True)
    assert r.kept == 2


def test_an_over_long_prompt_is_refused_unless_dropped(tmp_path: Path) -> None:
    f = tmp_path / "long.jsonl"
    f.write_text(
        json.dumps({"messages": [{"role": "user", "content": "word " * 30}]})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": "hi"}]})
        + "\n"
    )
    with pytest.raises(WorkloadError, match=r"long.jsonl:1: field messages is 150 characters, over the limit of 100"):
        import_workload(f, name="long", fmt="openai", max_prompt_chars=100)
    r = import_workload(f, name="long", fmt="openai", max_prompt_chars=100, drop_long=True)
    assert r.kept == 1 and r.dropped[0].reason == "prompt over 100 characters"


def test_ids_are_stable_across_reimports_and_change_with_content(tmp_path: Path) -> None:
    f = tmp_path / "c.jsonl"
    f.write_text('{"prompt": "alpha"}\n{"prompt": "beta"}\n')
    import_workload(f, name="c", fmt="vllm-custom")
    first = [t.id for t in load_workload("c").by_class["traffic"]]
    with pytest.raises(WorkloadError, match="already holds workload c; pass --replace"):
        import_workload(f, name="c", fmt="vllm-custom")
    import_workload(f, name="c", fmt="vllm-custom", replace=True)
    assert [t.id for t in load_workload("c").by_class["traffic"]] == first
    f.write_text('{"prompt": "alpha"}\n{"prompt": "beta, edited"}\n')
    import_workload(f, name="c", fmt="vllm-custom", replace=True)
    again = [t.id for t in load_workload("c").by_class["traffic"]]
    assert again[0] == first[0] and again[1] != first[1]


def test_an_edited_class_file_is_refused_naming_it() -> None:
    import_workload(DATA / "custom.jsonl", name="custom", fmt="vllm-custom")
    path = Path("workloads/custom/traffic.jsonl")
    path.write_text(path.read_text().replace("capital of Iran", "capital of Peru"))
    with pytest.raises(WorkloadError, match=r"workloads/custom/traffic.jsonl: sha256 \w+ differs from the manifest"):
        load_workload("custom")


def test_split_is_seeded_stratified_and_changes_the_content_hash(tmp_path: Path) -> None:
    f = tmp_path / "many.jsonl"
    f.write_text(
        "".join(json.dumps({"prompt": f"question {i}", "team": "a" if i % 2 else "b"}) + "\n" for i in range(20))
    )
    import_workload(f, name="many", fmt="vllm-custom", class_field="team")
    before = load_workload("many").manifest.content_sha256
    m = split_workload("many", 0.3, seed=4)
    assert m.content_sha256 != before and m.split is not None
    held = set(m.split.held_out_ids)
    assert sum(i.startswith("a-") for i in held) == 3 and sum(i.startswith("b-") for i in held) == 3
    w = load_workload("many")
    assert len(w.transcripts("a")) == 7 and len(w.transcripts("a", held_out=True)) == 3
    assert not held & {t.id for t in w.transcripts("mixed")}
    assert split_workload("many", 0.3, seed=4).split == m.split  # the same seed draws the same split
    with pytest.raises(WorkloadError, match="builtin is shipped with the tool and read-only"):
        split_workload("builtin", 0.3)


def test_a_trace_window_replays_the_recorded_arrivals_open_loop(tmp_path: Path) -> None:
    from gb300lane.bench.models import LoadSpec
    from gb300lane.bench.window import run_window
    from gb300lane.recipes.schema import WindowSpec

    from fakes import lane as fake_lane

    f = tmp_path / "t.jsonl"
    f.write_text(
        "".join(
            json.dumps({"timestamp": 1000 + ms, "input_length": 20, "output_length": 4, "hash_ids": [1]}) + "\n"
            for ms in (0, 30, 60, 150)
        )
    )
    import_workload(f, name="t", fmt="trace")
    w = WindowSpec(
        name="t",
        workload="t",
        classes=["traffic"],
        transcripts_per_class=4,
        concurrency=[1],
        temperature=1.0,
        seed_base=1,
        forced_tokens=4,
    )
    server = fake_lane.FakeLane().start()
    try:
        result = run_window(
            server.url, w, model="fake-model", load=LoadSpec(mode="open", request_rates=[2.0], arrivals="trace")
        )
        import_workload(DATA / "custom.jsonl", name="custom", fmt="vllm-custom")
        with pytest.raises(BenchError, match="transcript traffic-[0-9a-f]{12} has no recorded arrival time"):
            run_window(
                server.url,
                w.model_copy(update={"workload": "custom"}),
                model="fake-model",
                load=LoadSpec(mode="open", request_rates=[1.0], arrivals="trace"),
            )
    finally:
        server.stop()
    (cell,) = result.cells
    assert cell.arrivals == "trace"
    assert [r.scheduled_s for r in result.records] == pytest.approx([0.0, 0.015, 0.03, 0.075])  # replayed 2x


def test_sharegpt_turns_all_makes_sessions_whose_turns_share_a_prefix() -> None:
    r = import_workload(DATA / "sharegpt.json", name="turns", fmt="sharegpt", class_field="category", turns="all")
    assert {c.name: (c.transcripts, c.sessions) for c in r.classes} == {"writing": (2, 2), "coding": (2, 1)}
    first, second = load_workload("turns").by_class["coding"]
    assert first.session == second.session == "i6IyJda_0"
    assert second.messages is not None and first.messages is not None
    assert second.messages[: len(first.messages)] == first.messages  # turn 2 is turn 1, its reply and more
    assert second.messages[len(first.messages) :] == [
        {"role": "assistant", "content": "Use my_list.reverse() in place, or my_list[::-1] for a reversed copy."},
        {"role": "user", "content": "And a string?"},
    ]
    with pytest.raises(WorkloadError, match="--turns all splits ShareGPT conversations"):
        import_workload(DATA / "custom.jsonl", name="x", fmt="vllm-custom", turns="all")


def test_pad_takes_every_prompt_to_the_target_length() -> None:
    from gb300lane.workloads.shape import pad_workload

    import_workload(DATA / "openai.jsonl", name="ops", fmt="openai", class_field="metadata.team")
    m = pad_workload("ops", "ops-2k", 2048)
    assert m.source is not None and m.source.format == "pad:2048 words"
    w = load_workload("ops-2k")
    prompts = [t.prompt or "" for t in w.by_class["search"]]
    assert [len(p.split()) for p in prompts] == [2048, 2048]
    assert prompts[0].startswith("Context: ") and prompts[0].endswith("\n\nSay this is a test")
    chat = w.by_class["support-bots"][0]
    assert chat.messages is not None and sum(len(m["content"].split()) for m in chat.messages) == 2048
    assert chat.tools  # the request is the same but for its length
    with pytest.raises(WorkloadError, match="its other messages alone are 5 long, over 3"):
        pad_workload("ops", "ops-3", 3)
    import_workload(DATA / "custom.jsonl", name="qa", fmt="vllm-custom")
    pad_workload("qa", "qa-3", 3)
    assert [t.prompt for t in load_workload("qa-3").by_class["traffic"]][:2] == [
        "capital of India?",
        "capital of Iran?",
    ]


def test_pad_counts_with_the_tokenizer_it_is_given() -> None:
    from gb300lane.workloads.shape import pad_workload

    import_workload(DATA / "custom.jsonl", name="qa", fmt="vllm-custom")
    chars = len  # a tokenizer of one token a character: the fit is exact to the character or one word short
    pad_workload("qa", "qa-500", 500, count=chars, unit="chars")
    prompts = [t.prompt or "" for t in load_workload("qa-500").by_class["traffic"]]
    assert all(480 < len(p) <= 500 for p in prompts)
    assert prompts[0].endswith("\n\nWhat is the capital of India?")
