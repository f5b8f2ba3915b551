#!/usr/bin/env bash
# Decode and prompt speed of the engine's other dense families against a llama of the same
# shape and weight type (issue 35: a Gemma 2 / Phi-3 shape within 10 % of the llama shape).
# transformers writes random-weight models of one shape (hidden 1024, 8 layers, 16 heads of
# 64 with 4 KV heads, FFN 4096, vocab 32000, tied head, bf16 by default) as LlamaForCausalLM,
# Gemma2ForCausalLM and Phi3ForCausalLM; `nunchaku bench` runs each, the families taking
# turns for --rounds rounds (a shared 2-core VM moves single runs by 20 %): each figure is
# the best of its rounds, and each ratio the median of the rounds' own ratios (a family's run
# against the llama run just before it).
#
#   scripts/bench_families.sh [--build DIR] [--threads N] [--rounds N] [--dtype bf16|f32]
#                             [--families "gemma2 phi3 gemma"]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=build THREADS=2 ROUNDS=3 DTYPE=bf16 FAMILIES="gemma2 phi3"
while (($#)); do
  case "$1" in
    --build) BUILD=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --dtype) DTYPE=$2; shift 2 ;;
    --families) FAMILIES=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
BIN=$BUILD/nunchaku
[[ -x $BIN ]] || { echo "no $BIN: ./scripts/build.sh first" >&2; exit 2; }
PY=${PYTHON:-python3}
if ! "$PY" -c 'import torch, transformers, safetensors' 2>/dev/null; then
  "$PY" -m pip install --quiet torch transformers safetensors
fi
DIR=${BENCH_DIR:-/tmp/nunchaku-bench-families}
mkdir -p "$DIR"

"$PY" - "$DIR" "$DTYPE" llama $FAMILIES <<'EOF'
import os, sys, torch, transformers as T
out, dtype, fams = sys.argv[1], sys.argv[2], sys.argv[3:]
shape = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=8, num_attention_heads=16,
             num_key_value_heads=4, vocab_size=32000, max_position_embeddings=4096, tie_word_embeddings=True)
cls = {"llama": (T.LlamaConfig, T.LlamaForCausalLM, {}),
       "gemma": (T.GemmaConfig, T.GemmaForCausalLM, dict(head_dim=64)),
       "gemma2": (T.Gemma2Config, T.Gemma2ForCausalLM, dict(head_dim=64, query_pre_attn_scalar=64, sliding_window=4096)),
       "phi3": (T.Phi3Config, T.Phi3ForCausalLM, dict(pad_token_id=0, bos_token_id=1, eos_token_id=2))}
for f in fams:
    path = os.path.join(out, f"{f}-{dtype}")
    if os.path.exists(os.path.join(path, "config.json")):
        continue
    torch.manual_seed(0)
    conf, model, extra = cls[f]
    m = model(conf(**shape, **extra)).to(torch.bfloat16 if dtype == "bf16" else torch.float32)
    m.save_pretrained(path)
    print(f"{f}: {sum(p.numel() for p in m.parameters()) / 1e6:.1f}M parameters -> {path}", file=sys.stderr)
EOF

# One bench run: "pp tg" tok/s (prompt 64 tokens, 64 generated, batch 1, one repetition after warm-up).
one() {
  "$BIN" bench "$DIR/$1-$DTYPE" -p 64 -n 64 -b 1 -t "$THREADS" -r 1 -o jsonl 2>/dev/null |
    "$PY" -c 'import json,sys
rows={json.loads(l)["test"]: json.loads(l)["mean_tokens_per_s"] for l in sys.stdin}
print(rows["pp64"], rows["tg64"])'
}

RESULTS=$DIR/results.txt
: > "$RESULTS"
for ((r = 1; r <= ROUNDS; r++)); do
  for f in llama $FAMILIES; do echo "$r $f $(one "$f")" >> "$RESULTS"; done
done

"$PY" - "$RESULTS" "$DTYPE" "$THREADS" "$ROUNDS" <<'EOF2'
import statistics, sys
path, dtype, threads, rounds = sys.argv[1:5]
runs = [l.split() for l in open(path) if l.strip()]
by = {}
for r, f, pp, tg in runs:
    by.setdefault(f, {})[int(r)] = (float(pp), float(tg))
print()
print(f"| family ({dtype}, {threads} threads, best of {rounds}) | prompt tok/s | decode tok/s | prompt vs llama | decode vs llama |")
print("|---|---:|---:|---:|---:|")
for f, rs in by.items():
    best_pp, best_tg = max(v[0] for v in rs.values()), max(v[1] for v in rs.values())
    if f == "llama":
        print(f"| llama | {best_pp:.1f} | {best_tg:.1f} | 1 | 1 |")
        continue
    rp = statistics.median(rs[r][0] / by["llama"][r][0] for r in rs)
    rt = statistics.median(rs[r][1] / by["llama"][r][1] for r in rs)
    print(f"| {f} | {best_pp:.1f} | {best_tg:.1f} | {rp:.2f}x | {rt:.2f}x |")
EOF2
