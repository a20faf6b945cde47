"""CLI group: engine — `serve` and `sidecar`, the same command lines as `python -m gb300lane.engine`."""

from __future__ import annotations

import typer

_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


def register(app: typer.Typer) -> None:
    """Attach this group's commands to the top-level app."""
    group = typer.Typer(help="The embedded lane engine: a vLLM-compatible server and the expert-sidecar stand-in.",
                        no_args_is_help=True)

    @group.command("serve", context_settings=_PASS_THROUGH, add_help_option=False,
                   help="Serve the builtin model with vLLM's API; takes `vllm serve` flags (see --help).")
    def serve(ctx: typer.Context) -> None:
        from gb300lane.engine.__main__ import main

        raise typer.Exit(main(["serve", *ctx.args]))

    @group.command("sidecar", context_settings=_PASS_THROUGH, add_help_option=False,
                   help="Serve the expert-sidecar stand-in: --host H --port P.")
    def sidecar(ctx: typer.Context) -> None:
        from gb300lane.engine.__main__ import main

        raise typer.Exit(main(["sidecar", *ctx.args]))

    app.add_typer(group, name="engine")
