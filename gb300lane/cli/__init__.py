"""The thin typer CLI: each module registers one command group and only parses,
calls the library core, and prints. Business logic lives outside `cli/`."""
