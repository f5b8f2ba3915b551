#!/usr/bin/env bash
# Measured peaks side by side with `nunchaku estimate`'s predictions, error % per case.
#
#   scripts/bench_estimate_accuracy.sh [build/nunchaku]        (NO_TORCH=1: nunchaku cases only;
#                                                               ONLY=cuda: the CUDA cases only, for gpu-check.sh;
#                                                               ONLY=llama: no sliding-window models)
#
# Model: a random-weight Llama made here with transformers (hidden 768, 8 layers, fp32,
# ~56M parameters, the run fixture's tokenizer), in a temp dir.
# - PyTorch on the CPU, a fresh process per case: VmHWM minus the RSS right after import
#   (/proc/self/clear_refs resets the high-water mark): two AdamW training steps (the
#   steady state: the second runs with the optimizer states) with and without gradient
#   checkpointing, `generate` at batch 1 and 8 with eager and SDPA
#   attention. Prediction: estimate --device cpu --runtime transformers, its process terms
#   (python_runtime, torch_loader, torch_exit) at 0: the case has no loader or exit. Each case runs
#   REPS times (default 3, each a fresh process) with glibc's defaults (torch-cpu), and
#   MMAP_REPS times (default 1) with MALLOC_MMAP_THRESHOLD_=65536 (torch-cpu-mmap64k: a fixed threshold, so
#   every freed block of 64 KiB or more goes back to the kernel; predicted with
#   --overhead glibc_heap=0): the gap between the two
#   is what glibc keeps of freed memory. The table shows the median and the spread
#   (min..max of the fresh processes, as errors against the same prediction).
# - nunchaku `run` (max RSS of the process from /usr/bin/time) at several batch/context
#   settings, the defaults included, every sequence run until its context is full.
#   Prediction: estimate --device cpu (the nunchaku runtime). Sliding-window families too:
#   a Gemma-2-shaped (8 layers, every other one sliding) and a Gemma-3-shaped (12 layers,
#   5 of 6 sliding) model, hidden 256, 4 KV heads of 64, window 256, at contexts of 2048
#   and 4096 where a sliding layer's ring (window + max_tokens - 1 positions) is a small
#   part of a full layer's cache, so charging a sliding layer the full context would miss
#   by far more than 5%.
# - With a CUDA device: the PyTorch cases on it, torch.cuda.max_memory_allocated/reserved
#   against the prediction without the CUDA context (which torch does not count).
# Targets: |error| <= 5% for nunchaku runs, <= 10% for PyTorch CPU cases.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/nunchaku}")
[[ -x "$BIN" ]] || { echo "no $BIN: build first (scripts/build.sh)" >&2; exit 2; }
if [[ -z "${NO_TORCH:-}" ]] && ! python3 -c 'import torch, transformers, safetensors' 2>/dev/null; then
  python3 -m pip install --quiet torch transformers safetensors
fi
WORK=$(mktemp -d /tmp/nunchaku-accuracy.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
MODEL=$WORK/model
THREADS=${THREADS:-2}

# --- the model --------------------------------------------------------------------------
make_model() {  # make_model DIR FAMILY: llama (the torch cases' model), gemma2, gemma3 (sliding windows)
python3 - "$1" "$2" <<'EOF'
import json, shutil, sys
from pathlib import Path
import torch
from transformers import AutoConfig, AutoModelForCausalLM
out, family = Path(sys.argv[1]), sys.argv[2]
out.mkdir(parents=True)
fixture = Path("testdata/run/llama-spm")
common = dict(vocab_size=956, bos_token_id=1, eos_token_id=2, pad_token_id=0)
if family == "llama":
    cfg = AutoConfig.for_model("llama", hidden_size=768, intermediate_size=2048, num_attention_heads=12,
                               num_key_value_heads=12, num_hidden_layers=8, max_position_embeddings=1024,
                               tie_word_embeddings=False, **common)
else:  # hidden 256, 4 KV heads of 64 (2 KiB of fp32 K and V per position and layer), window 256
    layers = {"gemma2": 8, "gemma3": 12}[family]
    cfg = AutoConfig.for_model(family if family == "gemma2" else "gemma3_text", hidden_size=256, intermediate_size=1024,
                               num_attention_heads=4, num_key_value_heads=4, head_dim=64, num_hidden_layers=layers,
                               sliding_window=256, query_pre_attn_scalar=64, max_position_embeddings=4096, **common)
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(cfg).float()
with torch.no_grad():  # EOS logit 0: greedy decoding runs until the context is full
    (model.get_input_embeddings() if cfg.tie_word_embeddings else model.lm_head).weight[2].zero_()
model.save_pretrained(out, safe_serialization=True)
for f in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
    shutil.copy(fixture / f, out / f)
print(f"{family} model: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters", file=sys.stderr)
EOF
}
make_model "$MODEL" llama

predict() {  # predict ARGS...: per-device total in bytes (of $RUN_MODEL, default $MODEL)
  "$BIN" estimate "${RUN_MODEL:-$MODEL}" --device cpu --json "$@" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["total_bytes"])'
}
REPS=${REPS:-3} MMAP_REPS=${MMAP_REPS:-1}  # fresh processes per torch case: default malloc, fixed mmap threshold
ROWS=$WORK/rows.tsv
: > "$ROWS"
row() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$ROWS"; }  # group, case, measured (comma-separated reps), predicted

# --- PyTorch on the CPU -------------------------------------------------------------------
cat > "$WORK/case.py" <<'EOF'
import gc, json, sys
from pathlib import Path
import torch
from transformers import LlamaConfig, LlamaForCausalLM

def kib(field):
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(field)

model_dir, case, device = sys.argv[1], sys.argv[2], sys.argv[3]
torch.set_num_threads(int(sys.argv[4]))
torch.manual_seed(0)
gc.collect()
Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
base = kib("VmRSS")
if device == "cuda":
    torch.cuda.init()
kind, *args = case.split(":")
attn = args[-1]
if kind == "runtime":  # the runtime's own fixed cost: first ops, backward, an optimizer step
    lin = torch.nn.Linear(256, 256).to(device)
    x = torch.randn(16, 256, device=device, requires_grad=True)
    lin(x).sum().backward()
    torch.optim.AdamW(lin.parameters()).step()
else:  # the model is built from its config (random weights): no loader in the measurement
    config = LlamaConfig.from_pretrained(model_dir)
    config._attn_implementation = attn
    model = LlamaForCausalLM(config).float().to(device)
if kind == "runtime":
    pass
elif kind == "train":
    batch, seq, ckpt = int(args[0]), int(args[1]), args[2] == "ckpt"
    if ckpt:
        model.gradient_checkpointing_enable()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(3, 956, (batch, seq), device=device)
    for _ in range(2):  # the second step runs with the optimizer states already there
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
else:  # generate
    batch, prompt, new = int(args[0]), int(args[1]), int(args[2])
    model.eval()
    ids = torch.randint(3, 956, (batch, prompt), device=device)
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new, do_sample=False,
                       eos_token_id=None, pad_token_id=0)
out = {"cpu": kib("VmHWM") - base}
if device == "cuda":
    out["allocated"] = torch.cuda.max_memory_allocated()
    out["reserved"] = torch.cuda.max_memory_reserved()
print(json.dumps(out))
EOF

ONLY=${ONLY:-}
if [[ -z "${NO_TORCH:-}" && "$ONLY" != cuda ]]; then
  # What torch itself takes beyond import for its first ops (a 256x256 linear, backward, an
  # AdamW step): the CPU runtime's fixed cost (estimate's cpu_runtime default comes from it).
  rt=$(python3 "$WORK/case.py" "$MODEL" "runtime:sdpa" cpu "$THREADS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cpu"])')
  for c in "train:4:256:none:sdpa" "train:4:256:ckpt:sdpa" \
           "generate:1:256:64:eager" "generate:1:256:64:sdpa" "generate:8:256:64:eager" "generate:8:256:64:sdpa"; do
    IFS=: read -r kind a b cflag attn <<< "$c"
    m=() mf=()
    for _ in $(seq 1 "$REPS"); do  # fresh processes: glibc's heap differs from run to run
      m+=("$(python3 "$WORK/case.py" "$MODEL" "$c" cpu "$THREADS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["cpu"])')")
    done
    for _ in $(seq 1 "$MMAP_REPS"); do
      mf+=("$(MALLOC_MMAP_THRESHOLD_=65536 python3 "$WORK/case.py" "$MODEL" "$c" cpu "$THREADS" |
              python3 -c 'import json,sys; print(json.load(sys.stdin)["cpu"])')")
    done
    m=$(IFS=,; echo "${m[*]}") mf=$(IFS=,; echo "${mf[*]}")
    # The case measures VmHWM above the RSS after import, of a model built from its config:
    # the process around the workload (the interpreter, from_pretrained's residue, the exit;
    # scripts/measure_torch.py measures those) is not in it.
    workload=(--overhead python_runtime=0 --overhead torch_loader=0 --overhead torch_exit=0)
    if [[ $kind == train ]]; then
      extra=(); [[ $cflag == ckpt ]] && extra=(--grad-checkpointing)
      args=(--runtime transformers --mode train --batch "$a" --context "$b" --attention "$attn" "${extra[@]}" "${workload[@]}")
    else
      args=(--runtime transformers --batch "$a" --context $((b + cflag)) --prefill-chunk "$b" --attention "$attn" "${workload[@]}")
    fi
    row torch-cpu "$c" "$m" "$(predict "${args[@]}")"
    # A fixed mmap threshold returns freed blocks to the kernel: predicted without glibc's heap.
    row torch-cpu-mmap64k "$c" "$mf" "$(predict "${args[@]}" --overhead glibc_heap=0)"
  done
fi
if [[ -z "${NO_TORCH:-}" ]]; then
  if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    for c in "train:4:256:none:sdpa" "generate:8:256:64:sdpa" "generate:8:256:64:eager"; do
      IFS=: read -r kind a b cflag attn <<< "$c"
      j=$(python3 "$WORK/case.py" "$MODEL" "$c" cuda "$THREADS")
      if [[ $kind == train ]]; then
        p=$("$BIN" estimate "$MODEL" --json --runtime transformers --mode train --batch "$a" --context "$b" --overhead cuda_context=0)
      else
        p=$("$BIN" estimate "$MODEL" --json --runtime transformers --batch "$a" --context $((b + cflag)) --prefill-chunk "$b" \
              --attention "$attn" --overhead cuda_context=0)
      fi
      pt=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["total_bytes"])' "$p")
      row torch-cuda-reserved "$c" "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["reserved"])' "$j")" "$pt"
      row torch-cuda-allocated "$c" "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["allocated"])' "$j")" "$pt"
    done
  fi
fi

# --- nunchaku run -------------------------------------------------------------------------
# A prompt of about TOKENS tokens (about two tokens per word of this text).
prompt() { python3 -c "
import random, sys
random.seed(int(sys.argv[2]))
words = 'the cat sat on a mat and then it ran to the big red house where a dog was'.split()
print(' '.join(random.choice(words) for _ in range(int(sys.argv[1]) // 2)))" "$1" "$2"; }
run_case() {  # run_case LABEL BATCH CONTEXT(0 = default) [run options]; the model: $RUN_MODEL, default $MODEL
  local label=$1 batch=$2 ctx=$3; shift 3
  local n=$((ctx > 0 ? ctx : 1024))
  : > "$WORK/prompts.txt"
  for i in $(seq 1 "$batch"); do prompt $((n / 2)) "$i" >> "$WORK/prompts.txt"; done
  local copt=(); [[ $ctx -gt 0 ]] && copt=(--context "$ctx")
  /usr/bin/time -f '%M' -o "$WORK/rss" "$BIN" run "${RUN_MODEL:-$MODEL}" --raw -q --threads "$THREADS" --max-tokens 100000 \
    "${copt[@]}" "$@" -i "$WORK/prompts.txt" -o "$WORK/out.jsonl"
  python3 - "$WORK/out.jsonl" "$n" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    u = r.get("usage", {})
    if r.get("finish_reason") != "length" or u.get("total_tokens", 0) < int(sys.argv[2]) - 1:
        print(f"warning: a sequence stopped before its context was full: {r.get('finish_reason')} {u}", file=sys.stderr)
EOF
  local measured=$(( $(cat "$WORK/rss") * 1024 ))
  row nunchaku-run "$label" "$measured" "$(predict --batch "$batch" "${copt[@]}" --threads "$THREADS")"
}
if [[ "$ONLY" != cuda ]]; then
  run_case "defaults: 8 requests, --batch-size 8, context 1024" 8 0 --batch-size 8  # run's default batch is auto since session 24
  run_case "batch 1, context 1024" 1 1024 --batch-size 1
  run_case "batch 1, context 512" 1 512 --batch-size 1
  run_case "batch 4, context 256" 4 256 --batch-size 4
  run_case "batch 8, context 512" 8 512 --batch-size 8
  if [[ "$ONLY" != llama ]]; then
    for fam in gemma2 gemma3; do
      RUN_MODEL=$WORK/$fam
      make_model "$RUN_MODEL" "$fam"
      run_case "$fam: batch 1, context 4096" 1 4096 --batch-size 1
      run_case "$fam: batch 4, context 2048" 4 2048 --batch-size 4
    done
    unset RUN_MODEL
  fi
fi

# --- the table ----------------------------------------------------------------------------
echo
[[ -n "${rt:-}" ]] && echo "PyTorch CPU runtime (first ops over import, threads $THREADS): $(( rt / 1048576 )) MiB"
python3 - "$ROWS" <<'EOF'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
print(f"| {'group':<20} | {'case':<52} | {'measured':>10} | {'predicted':>10} | {'error':>7} | {'spread (n)':>22} |")
print(f"|{'-'*22}|{'-'*54}|{'-'*12}|{'-'*12}|{'-'*9}|{'-'*24}|")
worst = {}
for g, c, ms, p in rows:
    reps, p = [int(x) for x in ms.split(",")], int(p)
    m = statistics.median(reps)  # the error of the median; the spread: each fresh process's error
    err = (p - m) / m * 100
    errs = [(p - x) / x * 100 for x in reps]
    worst[g] = max(worst.get(g, 0), abs(err))
    spread = f"{min(errs):+.1f}%..{max(errs):+.1f}% ({len(reps)})" if len(reps) > 1 else ""
    print(f"| {g:<20} | {c:<52} | {m/2**20:>7.1f} MiB | {p/2**20:>7.1f} MiB | {err:>+6.1f}% | {spread:>22} |")
target = {"nunchaku-run": 5, "torch-cpu": 10, "torch-cpu-mmap64k": 10}
for g, w in worst.items():
    t = target.get(g)
    print(f"{g}: worst |error| {w:.1f}%" + (f" (target {t}%: {'met' if w <= t else 'NOT met'})" if t else ""))
EOF
