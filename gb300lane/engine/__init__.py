"""The embedded lane engine: corpora, tokenizer, target, DSpark drafter, scheduler, HTTP server, sidecar.

`python -m gb300lane.engine serve ...` (or `gb300lane engine serve ...`)
starts a vLLM-compatible server over a small model built from the shipped
corpora; it drafts with a DSpark-shaped drafter and verifies through
`gb300lane.spec`, so acceptance, tokens per step and the k=9 cliff are
computed, never looked up.
"""

from gb300lane.engine.args import EngineArgs, parse_serve_args
from gb300lane.engine.config import SpecConfig, compile_hash, parse_spec_config
from gb300lane.engine.core import EngineCore, Sequence, StepTimeModel
from gb300lane.engine.model import CLASSES, DSPARK_BLOCK_SIZE, BuiltinModel, corpus_texts, load_model
from gb300lane.engine.sampling import SamplingParams

__all__ = [
    "BuiltinModel",
    "CLASSES",
    "DSPARK_BLOCK_SIZE",
    "EngineArgs",
    "EngineCore",
    "SamplingParams",
    "Sequence",
    "SpecConfig",
    "StepTimeModel",
    "compile_hash",
    "corpus_texts",
    "load_model",
    "parse_serve_args",
    "parse_spec_config",
]
