"""docs/architecture.md's signatures are the code's: every call listed in its python blocks is checked with inspect.

A listed signature names its parameters in the code's order, with the code's kinds (a bare `*` before the
keyword-only ones) and, where it shows a default or a return type, the code's. `...` in a list stands for
parameters the doc leaves out (it may only trail); `**same options...` is prose for "the options listed above".
A `Name(a, b, ...)` line for a model lists its fields.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
_SECTION = re.compile(r"^## .*?\(`(gb300lane[\w.]*)`.*$")
_MODULE = re.compile(r"`(gb300lane(?:\.\w+)+)`")
_CALL = re.compile(r"^([A-Za-z_][\w.]*)\((.*)$")


@dataclass(frozen=True)
class Listed:
    """One signature as the doc lists it."""

    line: int
    name: str
    params: str
    returns: str | None
    modules: tuple[str, ...]

    def __str__(self) -> str:
        return f"docs/architecture.md:{self.line}: {self.name}({self.params})"


def _balanced_end(text: str) -> int | None:
    """Index of the `)` that closes the `(` before `text`, None when the text does not close it."""
    depth = 1
    for i, ch in enumerate(text):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0:
            return i
    return None


def listed_signatures(doc: str = DOC.read_text()) -> list[Listed]:
    out: list[Listed] = []
    modules: tuple[str, ...] = ("gb300lane",)
    in_python = False
    pending: tuple[int, str] | None = None
    for number, raw in enumerate(doc.splitlines(), 1):
        section = _SECTION.match(raw)
        if section:
            modules = (*_MODULE.findall(raw), "gb300lane")
        if raw.startswith("```"):
            in_python = raw.strip() == "```python"
            continue
        if not in_python:
            continue
        code = raw.split("  #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if pending is not None:
            start, text = pending
            text += " " + code.strip()
        elif _CALL.match(code) and not raw.startswith(" "):
            start, text = number, code
        else:
            continue
        name, rest = text.split("(", 1)
        end = _balanced_end(rest)
        if end is None:
            pending = (start, text)
            continue
        pending = None
        tail = rest[end + 1 :].strip()
        returns = tail[2:].split(";")[0].strip() if tail.startswith("->") else None
        out.append(Listed(start, name, rest[:end], returns, modules))
        # `a(...) -> X; b(...) -> Y`: a second signature on the same line.
        second = tail.split(";", 1)[1].strip() if ";" in tail else ""
        if second and _CALL.match(second):
            name2, rest2 = second.split("(", 1)
            end2 = _balanced_end(rest2)
            if end2 is not None:
                tail2 = rest2[end2 + 1 :].strip()
                out.append(Listed(start, name2, rest2[:end2], tail2[2:].strip() if tail2.startswith("->") else None,
                                  modules))  # fmt: skip
    return out


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def resolve(item: Listed) -> Callable[..., Any]:
    for base in item.modules:
        obj: Any = importlib.import_module(base)
        for part in item.name.split("."):
            if not hasattr(obj, part):
                try:
                    obj = importlib.import_module(f"{obj.__name__}.{part}")
                    continue
                except (ImportError, AttributeError):
                    obj = None
                    break
            obj = getattr(obj, part)
        if obj is not None:
            return obj
    raise AssertionError(f"{item}: no {item.name} in {', '.join(item.modules)}")


def _norm(annotation: str) -> str:
    text = re.sub(r"\s+", "", annotation)
    return re.sub(r"\b(?:[a-z_]\w*\.)+(?=[A-Za-z_])", "", text)  # module prefixes: lane.Protected -> Protected


def _default_problems(item: Listed, target: Callable[..., Any], param: inspect.Parameter, default: str) -> list[str]:
    if param.default is param.empty:
        return [f"`{param.name}` has no default in the code"]
    if default == "...":
        return []  # "has a default", left unsaid
    try:
        value = ast.literal_eval(default)
    except (ValueError, SyntaxError):
        # A name (NOTHING): its value in the module that defines the function, a module that one imports
        # (lane.NOTHING), or the section's packages.
        missing = object()
        home = inspect.getmodule(target)
        homes = [home, *(v for v in vars(home).values() if inspect.ismodule(v))]
        homes += [importlib.import_module(m) for m in item.modules]
        value = next((v for v in (getattr(m, default, missing) for m in homes) if v is not missing), missing)
        if value is missing:
            return [f"`{param.name}` defaults to {param.default!r} in the code, not {default}"]
    if value != param.default:
        return [f"`{param.name}` defaults to {param.default!r} in the code, not {default}"]
    return []


def check(item: Listed) -> list[str]:
    """What differs between the listed signature and the code's; empty when they agree."""
    target = resolve(item)
    if isinstance(target, type) and issubclass(target, BaseModel):
        target.model_rebuild()  # models build their validator (and signature) on first use
    sig = inspect.signature(target)
    code = [p for p in sig.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    problems: list[str] = []
    listed = _split_top(item.params)
    open_ended = any(p == "..." or p.startswith("**") for p in listed)
    keyword_only = False
    names: list[str] = []
    by_name = {p.name: p for p in code}
    for part in listed:
        if part == "*":
            keyword_only = True
            continue
        if part == "..." or part.startswith("**"):
            continue
        head, _, default = part.partition("=")
        pname, _, annotation = head.partition(":")
        pname, annotation, default = pname.strip(), annotation.strip(), default.strip()
        names.append(pname)
        param = by_name.get(pname)
        if param is None:
            problems.append(f"lists `{pname}`, which the code does not take")
            continue
        if not inspect.isclass(target) and keyword_only != (param.kind == param.KEYWORD_ONLY):
            problems.append(f"`{pname}` is {param.kind.description} in the code")
        if default:
            problems.extend(_default_problems(item, target, param, default))
        if annotation and not annotation.startswith('"') and param.annotation is not param.empty:
            if _norm(annotation) != _norm(str(param.annotation)):
                problems.append(f"`{pname}` is annotated `{param.annotation}` in the code, not `{annotation}`")
    code_names = [p.name for p in code]
    if inspect.isclass(target):
        code_names = [n for n in code_names if n != "self"]
    if names != [n for n in code_names if n in names]:
        problems.append(f"lists {names} in another order than the code's {code_names}")
    if not open_ended:
        missing = [n for n in code_names if n not in names]
        if missing:
            problems.append(f"leaves out {missing} (the code's parameters: {code_names}); list them or write `...`")
    if item.returns and sig.return_annotation is not sig.empty and not inspect.isclass(target):
        doc_ret, code_ret = _norm(item.returns), _norm(str(sig.return_annotation))
        if doc_ret != code_ret and not (
            doc_ret.startswith("ContextManager[")
            and code_ret.startswith("Iterator[")
            and doc_ret[len("ContextManager") :] == code_ret[len("Iterator") :]
        ):
            problems.append(f"returns `{sig.return_annotation}` in the code, not `{item.returns}`")
    return problems


SIGNATURES = listed_signatures()


def test_the_doc_lists_signatures() -> None:
    # The parser finds the blocks; a rewrite that moved them out of ```python blocks would check nothing.
    names = {s.name for s in SIGNATURES}
    assert {"up", "down", "run_window", "run_smoke", "load_recipe", "promote", "GateResult"} <= names
    assert len(SIGNATURES) >= 40


@pytest.mark.parametrize("item", SIGNATURES, ids=lambda s: f"{s.line}-{s.name}")
def test_listed_signature_matches_the_code(item: Listed) -> None:
    problems = check(item)
    assert not problems, f"{item}: " + "; ".join(problems)


def test_a_drifted_signature_is_caught() -> None:
    """The checker itself: a wrong name, a wrong order, a missing parameter and a wrong default are each reported."""
    doc = "## lane (`gb300lane.lane`)\n```python\n{}\n```\n"

    def problems(line: str) -> list[str]:
        (item,) = listed_signatures(doc.format(line))
        return check(item)

    assert problems("stop_instance(instance: str) -> None") == []
    assert problems("stop_instance(name: str) -> None")
    assert problems("stop_instance(instance: str) -> int")
    assert problems("stop_instance(instance: str, *, timeout_s=10.0) -> None")  # a parameter the code lacks
    assert problems("start_instance(instance, *, progress=None, timeout_s=None) -> BootReport")  # order
    assert problems("start_instance(instance, *, timeout_s=None) -> BootReport")  # progress left out
    assert problems("start_instance(instance, timeout_s=None, progress=None) -> BootReport")  # keyword-only
    assert problems("start_instance(instance, *, timeout_s=1.0, progress=None) -> BootReport")  # default
    assert problems("start_instance(instance, *, timeout_s=None, ...) -> BootReport") == []
    assert problems("start_instance(instance, *, timeout_s=None, progress=None) -> BootReport") == []
