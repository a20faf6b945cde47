#!/usr/bin/env python3
"""Build the real lane's models from the package's own text: a Llama-shaped target and a one-layer draft.

Run by the real lane's interpreter (it needs torch, transformers and
tokenizers, which the project's own environment does not carry):

    <real-lane>/venv/bin/python scripts/real_lane_model.py --out <real-lane>/models

Nothing is downloaded. The text is what the package ships: the engine's
corpora (`gb300lane/engine/corpora/*.txt`) and the bench transcripts
(`gb300lane/bench/transcripts/*.jsonl`), so the prompts the bench sends are in
the training distribution. The steps:

1. a byte-level BPE tokenizer (`tokenizers`) with a chat template;
2. the target, `LlamaForCausalLM` with head_dim 64 (vLLM's CPU attention
   refuses smaller heads), trained for a fixed number of steps;
3. the draft, one layer of the same shape, distilled from the target (the
   target's next-token distribution at temperature 1.0 plus the data's own
   token), so its acceptance looks like a served lane's draft and differs by
   traffic class.

Everything is seeded, the thread count is fixed and the batches are drawn
from one numpy generator, so a rebuild on the same torch gives the same
bytes. `<out>/manifest.json` records the build key (a sha256 over the inputs:
this file, the text, the shapes, the steps, torch's version) and the sha256 of
every file written; a build whose key matches the manifest is skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPORA = ROOT / "gb300lane" / "engine" / "corpora"
TRANSCRIPTS = ROOT / "gb300lane" / "bench" / "transcripts"
CLASSES = ("prose", "structured", "code", "shell_ops", "tool_json")
EOS = "<|endoftext|>"
SPECIALS = [EOS, "<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<tool_call>", "</tool_call>"]
# Role markers, then the content; tools ride in the system turn as JSON so a chat request with `tools` renders.
CHAT_TEMPLATE = (
    "{% if tools %}<|system|>\n{{ tools | tojson }}\n{% endif %}"
    "{% for m in messages %}<|{{ m['role'] }}|>\n"
    "{% if m['content'] is string %}{{ m['content'] }}{% elif m['content'] %}{{ m['content'] | tojson }}{% endif %}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

#: Shapes and schedule. Every number here is part of the build key.
CONFIG = {
    "vocab_size": 2048,
    "seq_len": 128,
    "max_position_embeddings": 1024,
    "target": {
        "hidden_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "num_hidden_layers": 3,
        "intermediate_size": 384,
        "steps": 600,
        "batch": 24,
        "lr": 3e-3,
    },
    "draft": {
        "hidden_size": 128,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "num_hidden_layers": 1,
        "intermediate_size": 256,
        "steps": 400,
        "batch": 24,
        "lr": 3e-3,
        "distill_weight": 0.8,
    },
    "seed": 20261201,
    "threads": 2,
}


def _texts() -> dict[str, str]:
    """Per class: the corpus, then every transcript's prompt (or rendered messages) as documents."""
    out = {}
    for cls in CLASSES:
        parts = [(CORPORA / f"{cls}.txt").read_text(encoding="utf-8")]
        for line in (TRANSCRIPTS / f"{cls}.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if "prompt" in row:
                parts.append(row["prompt"])
            else:
                parts.append("".join(f"<|{m['role']}|>\n{m['content']}\n" for m in row["messages"]) + "<|assistant|>\n")
        out[cls] = f"\n{EOS}\n".join(parts)
    return out


def build_key(texts: dict[str, str], torch_version: str) -> str:
    h = hashlib.sha256()
    h.update(Path(__file__).read_bytes())
    h.update(json.dumps(CONFIG, sort_keys=True).encode())
    h.update(torch_version.encode())
    for cls in CLASSES:
        h.update(cls.encode() + b"\0" + texts[cls].encode() + b"\0")
    return h.hexdigest()


def _train_tokenizer(texts: dict[str, str], out: Path):  # noqa: ANN202 - tokenizers' types
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=CONFIG["vocab_size"], special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )  # fmt: skip
    tok.train_from_iterator([texts[c] for c in CLASSES], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS, bos_token=EOS, unk_token=EOS, pad_token=EOS,
        additional_special_tokens=SPECIALS[1:],
    )  # fmt: skip
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = CONFIG["max_position_embeddings"]
    return fast


def _llama(shape: dict, vocab: int, eos_id: int):  # noqa: ANN001, ANN202
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=vocab, hidden_size=shape["hidden_size"], intermediate_size=shape["intermediate_size"],
        num_hidden_layers=shape["num_hidden_layers"], num_attention_heads=shape["num_attention_heads"],
        num_key_value_heads=shape["num_key_value_heads"], head_dim=shape["hidden_size"] // shape["num_attention_heads"],
        max_position_embeddings=CONFIG["max_position_embeddings"], rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=True, bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id,
        torch_dtype="float32",
    )  # fmt: skip
    return LlamaForCausalLM(cfg)


def _batches(ids, steps: int, batch: int, rng):  # noqa: ANN001, ANN202
    import numpy as np

    n = len(ids) - CONFIG["seq_len"] - 1
    for _ in range(steps):
        starts = rng.integers(0, n, size=batch)
        yield np.stack([ids[s : s + CONFIG["seq_len"] + 1] for s in starts])


def _train(model, ids, shape: dict, rng, *, teacher=None, label: str) -> float:  # noqa: ANN001
    import torch
    import torch.nn.functional as F

    opt = torch.optim.AdamW(model.parameters(), lr=shape["lr"], weight_decay=0.01, betas=(0.9, 0.95))
    steps = shape["steps"]
    warm = max(1, steps // 20)
    model.train()
    loss_v = float("nan")
    t0 = time.time()
    for step, chunk in enumerate(_batches(ids, steps, shape["batch"], rng)):
        lr = shape["lr"] * min(1.0, (step + 1) / warm) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for g in opt.param_groups:
            g["lr"] = lr
        x = torch.from_numpy(chunk[:, :-1]).long()
        y = torch.from_numpy(chunk[:, 1:]).long()
        logits = model(input_ids=x).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        if teacher is not None:
            with torch.no_grad():
                t_logp = F.log_softmax(teacher(input_ids=x).logits, dim=-1)
            kl = F.kl_div(F.log_softmax(logits, dim=-1), t_logp, log_target=True, reduction="batchmean") / x.shape[1]
            w = shape["distill_weight"]
            loss = (1 - w) * loss + w * kl
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_v = float(loss)
        if step % 100 == 0 or step == steps - 1:
            print(f"  {label} step {step + 1}/{steps} loss {loss_v:.3f} ({time.time() - t0:.0f} s)", flush=True)
    model.eval()
    return loss_v


def _digest_dir(path: Path) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*")) if p.is_file()
    }  # fmt: skip


def content_hash(files: dict[str, dict[str, str]]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def build(out: Path, *, force: bool = False) -> dict:
    import numpy as np
    import torch

    texts = _texts()
    key = build_key(texts, torch.__version__)
    manifest_path = out / "manifest.json"
    if manifest_path.is_file() and not force:
        old = json.loads(manifest_path.read_text())
        if old.get("build_key") == key and all((out / d).is_dir() for d in ("cpu-target", "cpu-draft")):
            files = {d: _digest_dir(out / d) for d in ("cpu-target", "cpu-draft")}
            if content_hash(files) == old.get("content_hash"):
                print(f"{out}: up to date (build key {key[:16]}, content {old['content_hash'][:16]})")
                return old
            print(f"{out}: files differ from the manifest; rebuilding")
    t_start = time.time()
    torch.set_num_threads(CONFIG["threads"])
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(CONFIG["seed"])
    rng = np.random.default_rng(CONFIG["seed"])
    tmp = out.with_name(out.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    tok = _train_tokenizer(texts, tmp)
    eos_id = tok.convert_tokens_to_ids(EOS)
    ids = np.concatenate([np.asarray(tok(texts[c] + f"\n{EOS}\n")["input_ids"], dtype=np.int32) for c in CLASSES])
    print(f"tokenizer: {len(tok)} tokens; training text {len(ids):,} tokens", flush=True)

    target = _llama(CONFIG["target"], len(tok), eos_id)
    t_loss = _train(target, ids, CONFIG["target"], rng, label="target")
    draft = _llama(CONFIG["draft"], len(tok), eos_id)
    with torch.no_grad():  # the draft starts from the target's embedding (tied with its head)
        draft.model.embed_tokens.weight.copy_(target.model.embed_tokens.weight)
    for p in target.parameters():
        p.requires_grad_(False)
    d_loss = _train(draft, ids, CONFIG["draft"], rng, teacher=target, label="draft")

    for name, model in (("cpu-target", target), ("cpu-draft", draft)):
        d = tmp / name
        model.save_pretrained(d, safe_serialization=True)
        tok.save_pretrained(d)
    files = {d: _digest_dir(tmp / d) for d in ("cpu-target", "cpu-draft")}
    manifest = {
        "schema_version": 1,
        "build_key": key,
        "content_hash": content_hash(files),
        "files": files,
        "config": CONFIG,
        "torch": torch.__version__,
        "final_loss": {"target": round(t_loss, 4), "draft": round(d_loss, 4)},
        "build_seconds": round(time.time() - t_start, 1),
        "generator": "scripts/real_lane_model.py",
    }
    (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)
    print(f"{out}: built in {manifest['build_seconds']} s, content {manifest['content_hash'][:16]}")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="models directory (the recipes mount it at /models)")
    parser.add_argument("--force", action="store_true", help="rebuild even when the manifest's build key matches")
    parser.add_argument("--print-key", action="store_true", help="print the build key and exit")
    args = parser.parse_args(argv)
    if args.print_key:
        import torch

        print(build_key(_texts(), torch.__version__))
        return 0
    build(args.out, force=args.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
