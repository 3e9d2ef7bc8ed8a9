#!/usr/bin/env bash
# Regenerates strata's golden logits. Run on the GPU machine (torch +
# transformers, no network) from the repository root, with a strata binary
# cross-built here: CGO_ENABLED=0 go build -o bin/strata ./tools/strata
#   STRATA=bin/strata DEST=engine/testdata tools/reference/gen.sh
# ARCHS (default: every architecture) picks which goldens to make. A PROMPT
# of your own must tokenize to more than 32 tokens for phi3: transformers
# switches LongRoPE's factors at its original context (32 in the tiny
# shape), strata uses the long ones from the first position.
# For each tiny architecture it synthesizes the f32 model and its HF twin
# (seed 1), tokenizes the fixed prompt with strata's tokenizer and asks
# transformers for 32 greedy steps of logits.
set -euo pipefail
STRATA=${STRATA:-bin/strata}
DEST=${DEST:-engine/testdata}
PROMPT=${PROMPT:-"The quick brown fox jumps over the lazy dog. Storage feeds the GPU"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$DEST"
for arch in ${ARCHS:-llama gemma2 gemma3 mistral phi3 qwen2 qwen3 mixtral qwen3moe}; do
  "$STRATA" model synth -q --arch "$arch" --shape tiny --type f32 --seed 1 \
    -o "$work/$arch.gguf" --hf "$work/$arch-hf"
  ids=$(printf '%s' "$PROMPT" | "$STRATA" model tokenize --model "$work/$arch.gguf" --bos | tr ' ' ',')
  sum=$(sha256sum "$work/$arch.gguf" | cut -d' ' -f1)
  python3 "$(dirname "$0")/golden.py" --hf "$work/$arch-hf" --prompt-ids "$ids" --steps 32 \
    --out "$DEST/golden-$arch-tiny" \
    --meta "{\"arch\":\"$arch\",\"shape\":\"tiny\",\"type\":\"f32\",\"seed\":1,\"gguf_sha256\":\"$sum\",\"prompt\":\"$PROMPT\"}"
done
