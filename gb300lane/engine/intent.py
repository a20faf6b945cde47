"""What a prompt asks for: the traffic class an instruction sets, read from its cue words.

The builtin target continues text; it cannot follow an instruction. A prompt
that asks for shell commands in plain English reads as English to the
corpora's unigrams, where a served model would answer in the class asked
for. This reader closes that gap with a short cue lexicon per class (words
that name the output's kind: `bash`, `CSV`, `Python`, `tools`, `essay`).
The class with the most cues wins; a prompt with cues of three or more
classes, none of them dominant, is a conversation across classes and reads
as `mixed`. No cue at all leaves the choice to the corpora (`model.py`).
"""

from __future__ import annotations

import re
from collections import Counter

#: Cue words per class, in the order of model.CLASSES; matched whole, case-insensitively.
CUES: tuple[frozenset[str], ...] = (
    frozenset(
        {
            "essay",
            "story",
            "letter",
            "paragraphs",
            "prose",
            "narrative",
            "feature",
            "article",
            "poem",
            "reflective",
            "memoir",
            "describe",
            "explain",
        }
    ),
    frozenset(
        {
            "csv",
            "table",
            "yaml",
            "markdown",
            "columns",
            "column",
            "spreadsheet",
            "rows",
            "list",
            "glossary",
            "data",
            "schema",
            "inventory",
            "object",
            "array",
            "keyed",
        }
    ),
    frozenset(
        {
            "python",
            "function",
            "rust",
            "go",
            "typescript",
            "javascript",
            "c",
            "cpp",
            "sql",
            "class",
            "implement",
            "code",
            "unit",
            "tests",
            "docstrings",
            "compile",
            "algorithm",
            "```python",
            "```",
        }
    ),
    frozenset(
        {
            "bash",
            "shell",
            "commands",
            "command",
            "sudo",
            "ubuntu",
            "debian",
            "systemctl",
            "server",
            "disk",
            "logs",
            "process",
            "processes",
            "nginx",
            "docker",
            "host",
            "cron",
            "ssh",
            "kernel",
            "$",
        }
    ),
    frozenset({"tools", "tool", "json", "call", "calls", "assistant", "agent"}),
)
_WORD = re.compile(r"```\w*|\$|[A-Za-z+#]+")


def cue_counts(text: str) -> list[int]:
    words = Counter(w.lower() for w in _WORD.findall(text))
    return [sum(n for w, n in words.items() if w in cues) for cues in CUES]


def read_intent(text: str, *, mixed: int) -> int | None:
    """The class index a prompt asks for, `mixed` for a conversation across classes, None without cues."""
    counts = cue_counts(text)
    total = sum(counts)
    if total == 0:
        return None
    ranked = sorted(range(len(counts)), key=lambda i: (-counts[i], i))
    present = sum(1 for n in counts if n > 0)
    if present >= 4 and counts[ranked[0]] < 0.5 * total:
        return mixed
    return ranked[0]
