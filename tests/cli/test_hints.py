"""Every hint is true: each command line and option the tool suggests exists in the CLI.

Read statically from the package's source (every `gb300lane ...` command line in any string, every `--flag` in an
error message, checked against the command that raises it where the source says which), and dynamically from the
messages a few commands really print (the flags must exist on the command that printed them).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
from typer.testing import CliRunner

import gb300lane
from gb300lane.cli.main import app

PACKAGE = Path(gb300lane.__file__).parent
ROOT_COMMAND = typer.main.get_command(app)


def _walk(cmd: Any, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    found = {path: cmd}
    for name, sub in getattr(cmd, "commands", {}).items():
        found.update(_walk(sub, path + (name,)))
    return found


COMMANDS = _walk(ROOT_COMMAND)
#: (module, function) of each command's callback -> its command path.
CALLBACKS = {
    (c.callback.__module__, c.callback.__qualname__): p for p, c in COMMANDS.items() if getattr(c, "callback", None)
}


def options(path: tuple[str, ...]) -> set[str]:
    cmd = COMMANDS[path]
    found = {"--help"} if cmd.add_help_option else set()
    for param in cmd.params:
        found.update(o for o in [*param.opts, *getattr(param, "secondary_opts", [])] if o.startswith("-"))
    return found


ALL_OPTIONS = set().union(*(options(p) for p in COMMANDS))
_COMMAND_LINE = re.compile(r"(`?)gb300lane((?: +[^\s`'\"(),;:|]+)+)")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9.-]*")
#: Other programs' command lines (`vllm serve --x`, `nvidia-smi --y`, vllm bench serve --z): their flags are theirs.
_FOREIGN = re.compile(r"`(?!gb300lane\b)[^`]*`|\bvllm(?: [a-z]+)+(?: --[a-z][a-z0-9-]*)+")


def command_line_problem(words: list[str], *, strict: bool) -> str | None:
    """Why `gb300lane WORDS` is not a command line the CLI accepts (None when it is, or when it is only prose)."""
    path: tuple[str, ...] = ()
    for w in words:
        if path + (w,) not in COMMANDS:
            break
        path += (w,)
    if not path and not (words and words[0].startswith("--")):
        if strict and words and words[0] != "X":  # a placeholder stands for a command the code fills in
            return f"no command `gb300lane {words[0]}`"
        return None
    allowed = options(path)
    bad = [w.split("=")[0].rstrip(".") for w in words[len(path) :] if w.startswith("--")]
    bad = [w for w in bad if w not in allowed]
    if bad:
        return f"`gb300lane {' '.join(path)}` has no {', '.join(bad)}"
    if COMMANDS[path] is not ROOT_COMMAND and hasattr(COMMANDS[path], "commands") and len(words) > len(path):
        nxt = words[len(path)]
        if not nxt.startswith("-") and nxt not in ("X", "...") and nxt.isidentifier():
            return f"`gb300lane {' '.join(path)}` has no command {nxt}"
    return None


def command_line_problems(text: str) -> Iterator[str]:
    for m in _COMMAND_LINE.finditer(text):
        problem = command_line_problem(m.group(2).split(), strict=bool(m.group(1)))
        if problem:
            yield f"{problem} (in {m.group(0).strip('`')!r})"


def flag_problems(text: str, path: tuple[str, ...] | None) -> Iterator[str]:
    """Bare --flags of a message: on `path` when known, else on some command."""
    text = _COMMAND_LINE.sub("", _FOREIGN.sub("", text))
    allowed = options(path) if path is not None else ALL_OPTIONS
    for flag in (f.rstrip(".") for f in _FLAG.findall(text)):
        if "." not in flag and flag not in allowed:  # --collector.textfile.directory: node_exporter's
            yield f"`gb300lane {' '.join(path)}` has no {flag}" if path is not None else f"no command has {flag}"


def _text(node: ast.AST) -> Iterator[str]:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.value
        elif isinstance(sub, ast.JoinedStr):
            yield "".join(v.value if isinstance(v, ast.Constant) else "X" for v in sub.values)


def _is_message(node: ast.AST) -> bool:
    """A raise, an exception built, a `fail(...)` / BadParameter, or a `fix = ...` / `hint = ...`."""
    if isinstance(node, ast.Raise):
        return True
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        return name in ("fail", "BadParameter") or name.endswith("Error")
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id in ("fix", "hint") for t in node.targets)
    return False


def source_problems() -> Iterator[str]:
    for f in sorted(PACKAGE.rglob("*.py")):
        rel = f.relative_to(PACKAGE.parent)
        if "engine" in rel.parts[1:2]:
            continue  # the embedded engine's own command line is vLLM's (`engine serve` hands its flags over)
        tree = ast.parse(f.read_text(encoding="utf-8"))
        module = ".".join(rel.with_suffix("").parts)
        for text in _text(tree):
            for problem in command_line_problems(text):
                yield f"{rel}: {problem}"
        for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] + [tree]:
            path = CALLBACKS.get((module, func.name)) if isinstance(func, ast.FunctionDef) else None
            body = (
                func.body
                if not isinstance(func, ast.Module)
                else [n for n in func.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
            )
            if path is not None and isinstance(func, ast.FunctionDef):
                # A command's own help (its options' help and its docstring) speaks of its own options.
                own = [*func.args.defaults, *[d for d in func.args.kw_defaults if d is not None]]
                own += [a.annotation for a in [*func.args.args, *func.args.kwonlyargs] if a.annotation is not None]
                doc = ast.get_docstring(func)
                for text in [t for node in own for t in _text(node)] + ([doc] if doc else []):
                    for problem in flag_problems(text, path):
                        yield f"{rel}:{func.lineno}: {problem} (in the help of {text[:90]!r})"
            for stmt in body:
                for node in ast.walk(stmt):
                    if _is_message(node):
                        for text in _text(node):
                            for problem in flag_problems(text, path):
                                yield f"{rel}:{getattr(node, 'lineno', '?')}: {problem} (in {text[:90]!r})"


def test_every_suggested_command_and_option_exists() -> None:
    problems = sorted(set(source_problems()))
    assert not problems, "hints name what the CLI does not have:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("run `gb300lane engine-image build --force`", None),
        ("run `gb300lane engine-image biuld`", "has no command biuld"),
        ("pass `gb300lane logs --all`", "`gb300lane logs` has no --all"),
        ("`gb300lane nosuch`", "no command `gb300lane nosuch`"),
        ("gb300lane card run X --port N", None),
        ("see `gb300lane spec advise --help`", None),
    ],
)
def test_the_reader_of_command_lines_catches_a_false_one(text: str, expected: str | None) -> None:
    found = list(command_line_problems(text))
    if expected is None:
        assert not found, found
    else:
        assert found and expected in found[0], found


def test_the_reader_of_flags_checks_the_command_that_prints_them() -> None:
    assert list(flag_problems("name a recipe, or pass --all", ("logs",))) == ["`gb300lane logs` has no --all"]
    assert list(flag_problems("pass --bogus", None)) == ["no command has --bogus"]
    assert not list(flag_problems("name a recipe, or pass --all", ("down",)))
    assert not list(flag_problems("run `nvidia-smi --query-gpu=index`", ("up",)))
    assert not list(flag_problems("as vllm bench serve --save-result writes", ("bench",)))


# What commands really print: the flags in a message exist on the command that printed it.


def _printed_problems(path: tuple[str, ...], output: str) -> list[str]:
    return [*command_line_problems(output), *flag_problems(output, path)]


@pytest.fixture
def two_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    from gb300lane import lane
    from gb300lane.lane import InstanceInfo, manage

    # The package's name is bound before the patch, so the fake never becomes `lane.list_instances` for later tests.
    assert lane.list_instances is manage.list_instances

    def fake() -> list[InstanceInfo]:  # only what resolving a name reads
        return [
            InstanceInfo.model_construct(name=name, recipe=recipe, arm=None)
            for name, recipe in (("lane-local-v26", "local-v26"), ("lane-local-v27", "local-v27"))
        ]

    monkeypatch.setattr(manage, "list_instances", fake)


@pytest.mark.parametrize("argv", [["logs"], ["down"]], ids=" ".join)
def test_an_ambiguous_instance_hint_names_only_options_of_its_command(two_instances: None, argv: list[str]) -> None:
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 1 and "instances exist" in result.output, result.output
    assert not _printed_problems(tuple(argv), result.output), result.output


def test_a_busy_port_hint_names_only_options_of_up(recipes: Path) -> None:
    import socket

    import yaml

    from gb300lane.testing.free_ports import free_port

    # Ports of its own: the shipped recipes' ports may be serving another test's lane.
    port = free_port()
    (recipes / "t-busy.yaml").write_text(yaml.safe_dump({
        "schema_version": 1, "name": "t-busy", "extends": "local-v26", "description": "a lane whose port is taken",
        "lane": {"port": port}, "sidecar": {"port": free_port()},
    }))  # fmt: skip
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", port))
        busy.listen()
        result = CliRunner().invoke(app, ["up", "t-busy", "--runtime", "process", "--dark"])
    assert result.exit_code == 1 and f"port {port}" in result.output, result.output
    assert "--port" in result.output and not _printed_problems(("up",), result.output), result.output


# The lane's boot errors are printed by every command that boots one: the options they name must be on each.

#: What a command's callback calls when it boots a lane (its own instance, a card's arms, a pilot, production).
_BOOTS = re.compile(r"\blane_up\(|\bLiveArmOps\(|\breproduce\(|\bcore\.promote\(")


def booting_commands() -> set[tuple[str, ...]]:
    import inspect

    return {
        path
        for path, cmd in COMMANDS.items()
        if getattr(cmd, "callback", None) is not None and _BOOTS.search(inspect.getsource(cmd.callback))
    }


def test_every_command_that_boots_a_lane_has_the_options_the_boot_errors_name() -> None:
    found = booting_commands()
    # The reader of callbacks finds the commands known to boot (a new one joins this list knowingly).
    assert {("up",), ("card", "run"), ("card", "reproduce"), ("card", "plan"), ("promote",)} <= found, found
    tree = ast.parse((PACKAGE / "lane" / "preconditions.py").read_text(encoding="utf-8"))
    # Every string of the module: its problems are collected (`problems.append(...)`) and raised as one.
    # A flag inside a whole command line (`gb300lane up RECIPE --name ARM`) is that command's: checked above.
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    texts = [
        "".join(v.value if isinstance(v, ast.Constant) else "X" for v in n.values)
        if isinstance(n, ast.JoinedStr)
        else n.value
        for n in ast.walk(tree)
        if id(n) not in parts
        and isinstance(n, (ast.Constant, ast.JoinedStr))
        and isinstance(getattr(n, "value", ""), str)
    ]
    flags = {f.rstrip(".") for t in texts for f in _FLAG.findall(_COMMAND_LINE.sub("", _FOREIGN.sub("", t)))}
    assert "--port" in flags, flags
    problems = [
        f"`gb300lane {' '.join(path)}` boots a lane and has no {flag} (named by lane/preconditions.py)"
        for path in sorted(found)
        for flag in sorted(flags)
        if flag not in options(path)
    ]
    assert not problems, "\n".join(problems)
