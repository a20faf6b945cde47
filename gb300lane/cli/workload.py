"""CLI group: workload — the traffic windows run: import an operator's file, list, show, stats, split."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gb300lane.cli.common import console, print_json

workload_app = typer.Typer(
    help="Workloads: the transcripts a window runs (`workloads/<name>/`: class files and a manifest that hashes "
    "them); builtin is the shipped one. A window names its workload with `workload:`.",
    no_args_is_help=True,
)


def _say(text: str) -> None:
    console.print(text, highlight=False, soft_wrap=True, markup=False)


@workload_app.command(
    "import",
    help="Import a file of your traffic into ./workloads/NAME/ and print what was kept, "
    "what was dropped and why, the length histograms and tool use per class.",
)
def import_cmd(
    file: Annotated[Path, typer.Argument(help="The file to import.")],
    name: Annotated[str, typer.Option("--name", help="The workload's name (its folder under ./workloads).")],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="openai (request bodies, one a line), sharegpt, "
            "vllm-custom (prompt, output_tokens) or trace (mooncake-style).",
        ),
    ],
    class_field: Annotated[
        str | None,
        typer.Option(
            "--class-field",
            help="Dotted field of each record that names its class, e.g. metadata.team (default: one class, traffic).",
        ),
    ] = None,
    allow_secrets: Annotated[
        bool,
        typer.Option("--allow-secrets", help="Import records that look like they hold a secret (refused by default)."),
    ] = False,
    max_prompt_chars: Annotated[
        int, typer.Option("--max-prompt-chars", help="The longest prompt imported, in characters.")
    ] = 65536,
    drop_long: Annotated[
        bool, typer.Option("--drop-long", help="Drop prompts over the limit (reported) instead of refusing the import.")
    ] = False,
    replace: Annotated[bool, typer.Option("--replace", help="Import over an existing workload of that name.")] = False,
    description: Annotated[str, typer.Option("--description", help="One line: what traffic this is.")] = "",
    turns: Annotated[
        str,
        typer.Option(
            "--turns",
            help="sharegpt: first (the first human turn) or all (every human turn, sent with the "
            "conversation so far: multi-turn sessions).",
        ),
    ] = "first",
    as_json: Annotated[bool, typer.Option("--json", help="Print the import report as JSON.")] = False,
) -> None:
    from gb300lane.workloads.importing import import_workload, render_import

    report = import_workload(
        file,
        name=name,
        fmt=fmt,
        class_field=class_field,
        allow_secrets=allow_secrets,
        max_prompt_chars=max_prompt_chars,
        drop_long=drop_long,
        replace=replace,
        description=description,
        turns=turns,
    )
    if as_json:
        print_json(report.model_dump(mode="json"))
    else:
        _say(render_import(report))


@workload_app.command("list", help="List the workloads found (./workloads first, then the shipped ones).")
def list_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print the list as JSON.")] = False) -> None:
    from gb300lane.workloads.views import list_workloads

    rows = list_workloads()
    if as_json:
        print_json([r.model_dump(mode="json") for r in rows])
        return
    for r in rows:
        split = f", split {r.dev} dev / {r.held_out} held out" if r.held_out else ""
        _say(
            f"{r.name:<20} {r.transcripts:>5} transcripts in {len(r.classes)} classes ({', '.join(r.classes)}){split}"
            f"  sha256 {r.content_sha256[:12]}  {r.folder}"
        )


@workload_app.command(
    "show",
    help="Show a workload's manifest: where it is, its classes and files, the split and "
    "the content hash a card's registration freezes.",
)
def show_cmd(
    name: Annotated[str, typer.Argument(help="The workload.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the manifest as JSON.")] = False,
) -> None:
    from gb300lane.workloads import load_workload

    w = load_workload(name)
    m = w.manifest
    if as_json:
        print_json({"folder": str(w.folder), **m.model_dump(mode="json")})
        return
    _say(f"workload {m.name}: {w.folder}")
    if m.description:
        _say(f"  {m.description}")
    _say(f"  content sha256 {m.content_sha256}")
    if m.source is not None:
        _say(
            f"  imported from {m.source.file} ({m.source.format}, sha256 {m.source.sha256[:12]})"
            + (f", classes from {m.source.class_field}" if m.source.class_field else "")
        )
    for c in m.classes:
        _say(f"  class {c.name:<16} {c.transcripts:>5} transcripts  {c.file}  sha256 {c.sha256[:12]}")
    if m.split is not None:
        _say(f"  split: {len(m.split.held_out_ids)} held out ({m.split.held_out:g} of each class, seed {m.split.seed})")
    else:
        _say("  split: none (every transcript is dev)")


@workload_app.command(
    "stats",
    help="Per class: transcripts, chat share, tool use and the prompt and output length "
    "histograms (of one part with --part).",
)
def stats_cmd(
    name: Annotated[str, typer.Argument(help="The workload.")],
    part: Annotated[str, typer.Option("--part", help="all, dev or held-out.")] = "all",
    as_json: Annotated[bool, typer.Option("--json", help="Print the figures as JSON.")] = False,
) -> None:
    from gb300lane.workloads.importing import render_classes
    from gb300lane.workloads.views import workload_stats

    stats = workload_stats(name, part)
    if as_json:
        print_json([s.model_dump(mode="json") for s in stats])
    else:
        _say(f"workload {name} ({part})")
        _say("\n".join(render_classes(stats)))


@workload_app.command(
    "diff",
    help="What differs between two workloads, class by class, by transcript id (an "
    "edited transcript shows as one id gone and one new), and whether their splits differ.",
)
def diff_cmd(
    a: Annotated[str, typer.Argument(help="The first workload.")],
    b: Annotated[str, typer.Argument(help="The second workload.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the difference as JSON.")] = False,
) -> None:
    from gb300lane.workloads.views import diff_workloads

    d = diff_workloads(a, b)
    if as_json:
        print_json(d.model_dump(mode="json"))
        return
    _say(
        f"{a} vs {b}: "
        + ("same content" if d.same_content else "content differs")
        + (", splits differ" if d.split_differs else "")
    )
    for c in d.classes:
        _say(f"  class {c.name}: {c.same} in both, {len(c.only_a)} only in {a}, {len(c.only_b)} only in {b}")
        for i in c.only_a:
            _say(f"    - {i}")
        for i in c.only_b:
            _say(f"    + {i}")


@workload_app.command(
    "split",
    help="Hold out a seeded fraction of each class: a card with held_out: true runs them, "
    "selection work (bench, spec advise) never does. Changes the content hash.",
)
def split_cmd(
    name: Annotated[str, typer.Argument(help="The workload (one of ./workloads).")],
    held_out: Annotated[float, typer.Option("--held-out", help="The fraction of each class held out, e.g. 0.3.")],
    seed: Annotated[int, typer.Option("--seed", help="The seed of the draw.")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print the new manifest as JSON.")] = False,
) -> None:
    from gb300lane.workloads import split_workload

    m = split_workload(name, held_out, seed=seed)
    if as_json:
        print_json(m.model_dump(mode="json"))
        return
    assert m.split is not None
    total = sum(c.transcripts for c in m.classes)
    _say(
        f"workload {name}: {len(m.split.held_out_ids)} of {total} transcripts held out (seed {seed}); "
        f"content sha256 {m.content_sha256[:12]}"
    )


@workload_app.command(
    "pad",
    help="Write a workload whose every prompt is padded (a context block in front) or cut to "
    "a length in words or in the embedded engine's tokens: a long-context cell (2K, 64K input) of "
    "the same requests.",
)
def pad_cmd(
    source: Annotated[str, typer.Argument(help="The workload whose transcripts are padded.")],
    name: Annotated[str, typer.Option("--name", help="The new workload's name.")],
    words: Annotated[int | None, typer.Option("--words", help="The prompt length in words.")] = None,
    tokens: Annotated[
        int | None,
        typer.Option(
            "--tokens", help="The prompt length in the embedded engine's tokens (exact on the embedded lane)."
        ),
    ] = None,
    replace: Annotated[bool, typer.Option("--replace", help="Write over an existing workload of that name.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the new manifest as JSON.")] = False,
) -> None:
    from gb300lane.workloads.shape import pad_workload

    if (words is None) == (tokens is None):
        raise typer.BadParameter("pass exactly one of --words N or --tokens N", param_hint="--words/--tokens")
    if tokens is not None:
        from gb300lane.engine import load_model

        tok = load_model().tokenizer
        m = pad_workload(source, name, tokens, count=lambda text: len(tok.encode(text)), unit="tokens", replace=replace)
    else:
        assert words is not None
        m = pad_workload(source, name, words, replace=replace)
    if as_json:
        print_json(m.model_dump(mode="json"))
        return
    unit = f"{tokens} tokens" if tokens is not None else f"{words} words"
    _say(
        f"workload {name}: {sum(c.transcripts for c in m.classes)} transcripts of {source} at {unit}; "
        f"content sha256 {m.content_sha256[:12]}"
    )


def register(app: typer.Typer) -> None:
    """Attach this group's commands to the top-level app."""
    app.add_typer(workload_app, name="workload")
