"""Workloads: the traffic a window runs, as versioned inputs.

A workload is a folder `workloads/<name>/` of class files (one transcript a
line) and a manifest that pins each file's sha256 and a content hash over them
and the dev / held-out split. The shipped transcripts are the workload
`builtin`; an operator's own traffic comes in through `workload import`
(OpenAI request bodies, ShareGPT, vLLM bench's custom JSONL, a mooncake-style
trace). A card's registration freezes the content hash of every workload its
windows name, so an edited workload refuses to run or score.
"""

from __future__ import annotations

from gb300lane.workloads.model import BUILTIN, BUILTIN_CLASSES, MIXED, Manifest, Split, Transcript
from gb300lane.workloads.store import Workload, find_workload, load_workload, select, split_workload, workload_names

__all__ = [
    "BUILTIN",
    "BUILTIN_CLASSES",
    "MIXED",
    "Manifest",
    "Split",
    "Transcript",
    "Workload",
    "find_workload",
    "load_workload",
    "select",
    "split_workload",
    "workload_names",
]
