#!/usr/bin/env bash
# Regenerates strata's golden logits. Run on the GPU machine (torch +
# transformers, no network) from the repository root, with a strata binary
# cross-built here: CGO_ENABLED=0 go build -o bin/strata ./tools/strata
#   STRATA=bin/strata DEST=engine/testdata tools/reference/gen.sh
# ARCHS (default: every architecture's tiny shape, and qwen3moe's
# tiny-128) picks which goldens to make: ARCH for its tiny shape, or
# ARCH:SHAPE; each is written as golden-ARCH-SHAPE. A PROMPT
# of your own must tokenize to more than 32 tokens for phi3: transformers
# switches LongRoPE's factors at its original context (32 in the tiny
# shape), strata uses the long ones from the first position.
# For each it synthesizes the f32 model and its HF twin (seed 1),
# tokenizes the fixed prompt with strata's tokenizer and asks transformers
# for 32 greedy steps of logits.
set -euo pipefail
STRATA=${STRATA:-bin/strata}
DEST=${DEST:-engine/testdata}
PROMPT=${PROMPT:-"The quick brown fox jumps over the lazy dog. Storage feeds the GPU"}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$DEST"
for entry in ${ARCHS:-llama gemma2 gemma3 mistral phi3 qwen2 qwen3 mixtral qwen3moe qwen3moe:tiny-128}; do
  arch=${entry%%:*} shape=tiny
  [ "$entry" = "$arch" ] || shape=${entry#*:}
  m="$work/$arch-$shape"
  "$STRATA" model synth -q --arch "$arch" --shape "$shape" --type f32 --seed 1 \
    -o "$m.gguf" --hf "$m-hf"
  ids=$(printf '%s' "$PROMPT" | "$STRATA" model tokenize --model "$m.gguf" --bos | tr ' ' ',')
  sum=$(sha256sum "$m.gguf" | cut -d' ' -f1)
  python3 "$(dirname "$0")/golden.py" --hf "$m-hf" --prompt-ids "$ids" --steps 32 \
    --out "$DEST/golden-$arch-$shape" \
    --meta "{\"arch\":\"$arch\",\"shape\":\"$shape\",\"type\":\"f32\",\"seed\":1,\"gguf_sha256\":\"$sum\",\"prompt\":\"$PROMPT\"}"
done
