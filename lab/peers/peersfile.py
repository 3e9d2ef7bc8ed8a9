"""peersfile.py [--dense] GPU [--batched ARCH:NCMOE:FILE]... TABLE...: a strata peers
file (docs/peers-h200.json's format) from llama-bench's markdown tables
(run3-h200.sh, run5-h200.sh) and llama-batched-bench's (run5-h200.sh):
each case's figure, the mean over the tables that hold it. Cases by model
and n_cpu_moe: qwen3moe 29 -> 8 GiB, 40 -> 4 GiB; mixtral 19 -> 12 GiB.
llama-bench's tg512 becomes moe_<case>_decode_512 (the served row's peer),
the short decode (tg32, Mixtral tg16) moe_<case>_decode. A batched table
prints neither model nor n_cpu_moe, so each is named ARCH:NCMOE:FILE; its
rows of 8 sequences of 128 tokens become moe_<case>_decode_b8_128 (S_TG,
the aggregate decode: the served batch's peer), its other rows are left
out (strata's peers file knows no other name). With --dense the tables are
llama-bench's on the Llama 8b and 70b files (run6-h200.sh): 8B at -ngl 17
becomes half_decode, 70B at -ngl 40 70b_half_decode (issue 20's peers)."""
import json
import sys

CASES = {("qwen3moe", "29"): ("qwen3moe_30b_a3b_8gib", "qwen3moe 30b-a3b Q4_K_M, --n-cpu-moe 29"),
         ("qwen3moe", "40"): ("qwen3moe_30b_a3b_4gib", "qwen3moe 30b-a3b Q4_K_M, --n-cpu-moe 40"),
         ("llama", "19"): ("mixtral_8x7b_12gib", "mixtral 8x7b Q4_K_M, --n-cpu-moe 19"),
         ("mixtral", "19"): ("mixtral_8x7b_12gib", "mixtral 8x7b Q4_K_M, --n-cpu-moe 19")}
BATCH, TOKENS = 8, 128


def rows(path):
    with open(path) as f:
        lines = [l for l in f if l.startswith("|")]
    if len(lines) < 3:
        raise SystemExit(f"{path}: no table")
    head = [c.strip() for c in lines[0].strip("|\n").split("|")]
    for l in lines[2:]:
        cells = dict(zip(head, (c.strip() for c in l.strip("|\n").split("|"))))
        yield cells


DENSE = {("8B", "17"): ("half_decode", "8b Q4_K_M, 16 of 32 layers (and the output) on the GPU (-ngl 17), the rest on 16 CPU threads"),
         ("70B", "40"): ("70b_half_decode", "70b Q4_K_M, 40 of 80 layers on the GPU (-ngl 40), the rest on 16 CPU threads")}


def add(figures, key, setup, test, v):
    """Puts the mean of a case's rates v (tok/s) into figures under key."""
    if key in figures:
        raise SystemExit(f"two tests for {key}")
    figures[key] = {"system": "llama.cpp", "setup": f"{setup}, {test}, mean of {len(v)} runs ({', '.join(f'{x:.2f}' for x in v)})",
                    "value": round(sum(v) / len(v), 2), "unit": "tok/s"}


def dense(gpu, tables):
    seen = {}
    for t in tables:
        for r in rows(t):
            size = r["model"].split()[1]
            case = DENSE.get((size, r["ngl"]))
            if case is None:
                raise SystemExit(f"{t}: no case for {r['model']} ngl {r['ngl']}")
            seen.setdefault((case, r["test"]), []).append(float(r["t/s"].split("±")[0]))
    figures = {}
    for ((key, setup), test), v in sorted(seen.items()):
        add(figures, key, setup, test, v)
    src = ("llama.cpp c2b1518fd (upstream, 2026-06-08; CUDA sm_90, static, GGML_NATIVE, GGML_CUDA_FA=OFF) built and "
           f"run on the lent host ({gpu}, 16 CPU threads) by strata's device call lab/peers/run6-h200.sh, not by `strata bench`: "
           "llama-bench -ngl N -p 0 -t 16 -fa 0 (-r 2 -n 128 for the 8b, -r 1 -n 32 for the 70b) on the synthetic Llama-3.1 8b and 70b "
           "Q4_K_M files `strata model synth` writes (seed 1) in /dev/shm")
    json.dump({"source": src, "figures": figures}, sys.stdout, indent=2)
    print()


def main():
    args = sys.argv[1:]
    if args and args[0] == "--dense":
        dense(args[1], args[2:])
        return
    gpu, tables, batched = args[0], [], []
    i = 1
    while i < len(args):
        if args[i] == "--batched":
            arch, ncmoe, path = args[i + 1].split(":", 2)
            batched.append((arch, ncmoe, path))
            i += 2
        else:
            tables.append(args[i])
            i += 1
    seen = {}
    for t in tables:
        for r in rows(t):
            arch = r["model"].split()[0]
            case = CASES.get((arch, r["n_cpu_moe"]))
            if case is None:
                raise SystemExit(f"{t}: no case for {arch} n_cpu_moe {r['n_cpu_moe']}")
            test = r["test"]
            tps = float(r["t/s"].split("±")[0])
            key = "_512" if test == "tg512" else ""
            seen.setdefault((case, key, test), []).append(tps)
    for arch, ncmoe, path in batched:
        case = CASES.get((arch, ncmoe))
        if case is None:
            raise SystemExit(f"{path}: no case for {arch} n_cpu_moe {ncmoe}")
        for r in rows(path):
            if int(r["B"]) == BATCH and int(r["TG"]) == TOKENS:
                test = f"llama-batched-bench -npl {BATCH} -ntg {TOKENS} -npp {r['PP']}, S_TG (aggregate)"
                seen.setdefault((case, f"_b{BATCH}_{TOKENS}", test), []).append(float(r["S_TG t/s"]))
    figures = {}
    for ((name, setup), key, test), v in sorted(seen.items()):
        add(figures, f"moe_{name}_decode{key}", setup, test, v)
    src = ("llama.cpp c2b1518fd (upstream, 2026-06-08; CUDA sm_90, static, GGML_NATIVE, GGML_CUDA_FA=OFF) built and "
           f"run on the lent host ({gpu}, 16 CPU threads) by strata's device calls lab/peers/run3-h200.sh or run5-h200.sh, not by `strata bench`: "
           "llama-bench -ngl 99 -ncmoe N -p 0 -n 32,512 (Mixtral 16,512) -t 16 -fa 0, and llama-batched-bench -ngl 99 -ncmoe N "
           f"-npp 16 -ntg {TOKENS} -npl 1,{BATCH} -t 16 (random tokens), on the synthetic Qwen3-30B-A3B and "
           "Mixtral-8x7B Q4_K_M files `strata model synth` writes (seed 1) in /dev/shm, N as docs/peers-h200.json's")
    json.dump({"source": src, "figures": figures}, sys.stdout, indent=2)
    print()


main()
