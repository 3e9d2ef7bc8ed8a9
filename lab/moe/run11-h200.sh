#!/usr/bin/env bash
# Device call (not yet run): the CPU backend's reads ahead of storage
# experts on the H200 host (16 cores), `strata bench moe` on synthetic
# Qwen3-30B-A3B Q4_K_M with its pool in /dev/shm (tmpfs refuses O_DIRECT,
# so the reads are buffered copies at memory speed, not an SSD's), in an
# 8 GiB and a 4 GiB host budget, batch 1 and 8, reads ahead and none in
# alternating order (--rounds 2), own routing and Zipf 1. On the build
# machine's virtio disk (storage-bound) the comparison came out within its
# noise; here compute is the larger share, where reading ahead should pay.
. "$(dirname "$0")/../hybrid/lib.sh"
for z in 0 1; do
	timeout 280 "$B/strata" bench moe --shape 30b-a3b --budgets 8GiB,4GiB --batch 1,8 --rounds 2 --tokens 16 --zipf $z --dir "$S/moe" >"$L/bench-moe-cpu-zipf$z.txt" 2>&1
	echo "== zipf $z rc=$?"; grep -E "^[0-9.]+ GiB" "$L/bench-moe-cpu-zipf$z.txt"
done
