#!/usr/bin/env python3
"""Golden logits from Hugging Face transformers for strata's fidelity tests.

strata's CPU engine is checked against an outside implementation: this
script loads the Hugging Face directory that `strata model synth --hf DIR`
wrote (the same random weights as the GGUF), feeds a fixed prompt given as
token ids, and records the logits of 32 greedy steps. It runs on the GPU
machine, which has torch and transformers but no network, so nothing is
downloaded: the config and weights come from DIR alone.

Output: OUT.json (prompt ids, greedy tokens, shapes, library versions) and
OUT.f32 (steps x vocab little-endian float32 logits, step-major).
"""
import argparse
import json
import sys

import numpy as np
import torch
import transformers
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hf", required=True, help="Hugging Face model directory")
    ap.add_argument("--prompt-ids", required=True, help="comma-separated token ids")
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--out", required=True, help="output path without extension")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--meta", default="{}", help="extra JSON merged into OUT.json")
    a = ap.parse_args()

    # Full fp32: no TF32 shortcuts in matmuls or convolutions.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    # Eager attention: it is the implementation that applies Gemma 2's
    # attention-logit soft-capping and sliding window exactly as specified.
    model = AutoModelForCausalLM.from_pretrained(
        a.hf, dtype=torch.float32, attn_implementation="eager")
    model.to(a.device).eval()

    ids = [int(x) for x in a.prompt_ids.split(",") if x.strip()]
    tokens, rows = [], []
    with torch.no_grad():
        inp = torch.tensor([ids], device=a.device)
        out = model(input_ids=inp, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1].float()
        for step in range(a.steps):
            rows.append(logits.cpu().numpy().astype("<f4"))
            nxt = int(torch.argmax(logits).item())
            tokens.append(nxt)
            if step == a.steps - 1:
                break
            out = model(input_ids=torch.tensor([[nxt]], device=a.device),
                        past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits = out.logits[0, -1].float()

    arr = np.stack(rows)
    arr.tofile(a.out + ".f32")
    meta = {
        "prompt_ids": ids,
        "tokens": tokens,
        "steps": a.steps,
        "vocab": int(arr.shape[1]),
        "model_type": model.config.model_type,
        "device": a.device,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    meta.update(json.loads(a.meta))
    with open(a.out + ".json", "w") as f:
        json.dump(meta, f, indent=1)
    print(f"{a.out}: {a.steps} steps, vocab {arr.shape[1]}, tokens {tokens}", file=sys.stderr)


if __name__ == "__main__":
    main()
