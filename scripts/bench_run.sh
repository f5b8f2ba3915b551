#!/usr/bin/env bash
# Engine throughput: prompt and decode tok/s at batch 1 and 8 on a ~0.1B random-weight
# llama (f32 and bf16 safetensors, and a Q8_0 GGUF of the same weights), the DRAM read bandwidth measured in the same run, and
# decode tok/s as a fraction of the bandwidth bound (tok/s x bytes of weights per step /
# bandwidth; batch 8 reads the weights once per step for 8 tokens).
#
#   scripts/bench_run.sh [--threads N] [--llama-cpp] [--build DIR] [--rounds N]
#
# --rounds N (default 3): every engine and dtype is measured N times, the engines taking
# turns, and each figure is the best of its N; a shared 2-core VM moves single runs by 20%.
#
# --llama-cpp also runs llama.cpp (llama-cpp-python, built from source by pip into
# $BENCH_DIR/venv; that build can take >10 min on 2 cores) on GGUF copies of the same
# weights (written with gguf-py, convert_hf_to_gguf layout) with the same thread count,
# and prints nunchaku/llama.cpp ratios at batch 1 and 8 (scripts/bench_llamacpp.py drives
# llama.cpp's C API through llama-cpp-python: 8 sequences in one context for batch 8).
# Models and the venv are cached in $BENCH_DIR (default /tmp/nunchaku-bench).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=$(nproc)
LLAMA_CPP=0
BUILD=build-eng
ROUNDS=3
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) THREADS=$2; shift 2 ;;
    --llama-cpp) LLAMA_CPP=1; shift ;;
    --build) BUILD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-/tmp/fxenv/bin/python}
DIR=${BENCH_DIR:-/tmp/nunchaku-bench}
PROMPT=${BENCH_PROMPT:-128}
DECODE=${BENCH_DECODE:-32}
mkdir -p "$DIR"

if [[ ! -f "$DIR/f32/model.safetensors" || ! -f "$DIR/bf16/model.safetensors" ]]; then
  echo "== writing the random-weight bench model to $DIR" >&2
  HF_HUB_OFFLINE=1 "$PY" - "$DIR" <<'PY'
import sys, torch
from transformers import LlamaConfig, LlamaForCausalLM
out = sys.argv[1]
torch.manual_seed(0)
cfg = LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                  num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, tie_word_embeddings=False)
m = LlamaForCausalLM(cfg).float()
print(f"{sum(p.numel() for p in m.parameters())/1e6:.1f}M parameters", file=sys.stderr)
m.save_pretrained(f"{out}/f32", safe_serialization=True)
m.to(torch.bfloat16).save_pretrained(f"{out}/bf16", safe_serialization=True)
PY
fi

if [[ ! -f "$DIR/q8_0.gguf" ]]; then
  echo "== writing the Q8_0 GGUF copy (gguf-py, convert_hf_to_gguf layout)" >&2
  HF_HUB_OFFLINE=1 "$PY" - "$DIR" <<'PY'
import sys
sys.path.insert(0, "scripts")
import torch
from gguf import GGMLQuantizationType as QT
from transformers import LlamaForCausalLM
from make_engine_goldens import write_gguf
m = LlamaForCausalLM.from_pretrained(f"{sys.argv[1]}/f32", dtype=torch.float32)
write_gguf(m, m.config, f"{sys.argv[1]}/q8_0.gguf", QT.Q8_0)
PY
fi

if [[ ! -x "$BUILD/nunchaku_tests" ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DNUNCHAKU_CUDA=OFF -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$BUILD" --target nunchaku_tests -j2 >/dev/null

RESULTS="$DIR/results.jsonl"
: > "$RESULTS"
run_ours() {  # run_ours DTYPE
  local dt=$1 model="$DIR/$1"
  [[ $dt == q8_0 ]] && model="$DIR/q8_0.gguf"
  echo "== nunchaku $dt, $THREADS threads" >&2
  NUNCHAKU_BENCH_MODEL="$model" NUNCHAKU_BENCH_THREADS=$THREADS NUNCHAKU_BENCH_PROMPT=$PROMPT \
    NUNCHAKU_BENCH_DECODE=$DECODE "$BUILD/nunchaku_tests" "[.engine-bench]" | sed -n 's/^BENCH //p' |
    python3 -c "import json,sys; d=json.load(sys.stdin); d['dtype']='$dt'; d['engine']='nunchaku'; print(json.dumps(d))" >> "$RESULTS"
}

if [[ $LLAMA_CPP == 1 ]]; then
  if [[ ! -x "$DIR/venv/bin/python" ]]; then
    python3 -m venv --system-site-packages "$DIR/venv"
  fi
  if ! "$DIR/venv/bin/python" -c "import llama_cpp" 2>/dev/null; then
    echo "== pip install llama-cpp-python (builds llama.cpp from source; slow)" >&2
    CMAKE_ARGS="-DGGML_NATIVE=ON" "$DIR/venv/bin/pip" install llama-cpp-python >&2
  fi
  for dt in f32 bf16 q8_0; do
    gg="$DIR/llamacpp-$dt.gguf"  # same weights, plus a placeholder vocabulary llama.cpp insists on
    if [[ ! -f "$gg" ]]; then
      HF_HUB_OFFLINE=1 "$PY" - "$DIR" "$dt" <<'PY'
import sys
sys.path.insert(0, "scripts")
import torch
from gguf import GGMLQuantizationType as QT
from transformers import LlamaForCausalLM
from make_engine_goldens import write_gguf
d, dt = sys.argv[1], sys.argv[2]
m = LlamaForCausalLM.from_pretrained(f"{d}/{'f32' if dt == 'q8_0' else dt}", dtype=torch.float32)
write_gguf(m, m.config, f"{d}/llamacpp-{dt}.gguf", {"f32": QT.F32, "bf16": QT.BF16, "q8_0": QT.Q8_0}[dt],
           dummy_vocab=True)
PY
    fi
  done
fi

run_llama() {  # run_llama DTYPE
  echo "== llama.cpp $1, $THREADS threads" >&2
  "$DIR/venv/bin/python" scripts/bench_llamacpp.py "$DIR/llamacpp-$1.gguf" "$THREADS" "$PROMPT" "$DECODE" "$1" \
    >> "$RESULTS" 2> "$DIR/llamacpp-$1.log" || { echo "llama.cpp failed: see $DIR/llamacpp-$1.log" >&2; exit 1; }
}

for round in $(seq "$ROUNDS"); do
  for dt in f32 bf16 q8_0; do
    run_ours "$dt"
    if [[ $LLAMA_CPP == 1 ]]; then run_llama "$dt"; fi
  done
done

python3 - "$RESULTS" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def best(engine):  # per dtype: every figure the best over the rounds
    out = {}
    for r in rows:
        if r["engine"] != engine:
            continue
        o = out.setdefault(r["dtype"], json.loads(json.dumps(r)))
        for k, v in r.items():
            if isinstance(v, dict):
                for m, x in v.items():
                    o[k][m] = max(o[k][m], x)
            elif k == "dram_read_bytes_s":
                o[k] = max(o[k], v)
    return out
ours, ref = best("nunchaku"), best("llama.cpp")
for dt, r in ours.items():
    bw = r["dram_read_bytes_s"]
    wb = r["weight_bytes"]
    print(f"{dt}: {r['describe']}")
    print(f"  DRAM read bandwidth {bw/1e9:.1f} GB/s ({r['threads']} threads); weights read per step {wb/1e6:.0f} MB"
          f" -> decode bound {bw/wb:.1f} steps/s")
    for b in ("b1", "b8"):
        n = 1 if b == "b1" else 8
        dec, pre = r[b]["decode_tok_s"], r[b]["prompt_tok_s"]
        frac = (dec / n) * wb / bw
        line = f"  batch {n}: prompt {pre:8.1f} tok/s   decode {dec:8.1f} tok/s   ({frac:.0%} of the bandwidth bound per step)"
        if dt in ref and b in ref[dt]:
            lr = ref[dt][b]
            line += f"   vs llama.cpp: prompt {pre/lr['prompt_tok_s']:.2f}x, decode {dec/lr['decode_tok_s']:.2f}x"
        print(line)
PY
