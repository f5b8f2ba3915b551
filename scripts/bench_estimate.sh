#!/usr/bin/env bash
# Times `nunchaku estimate` on a sparse Llama-2-70B-shaped checkpoint (real config.json,
# 15 safetensors shards whose data regions are file holes, made in /tmp) against
# accelerate's estimator (`accelerate estimate-memory`'s gather_data on the same
# config.json), and prints both numbers and the speed ratio.
#   scripts/bench_estimate.sh [path/to/nunchaku]     (default: build/nunchaku)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/nunchaku}
RUNS=${RUNS:-5}
DIR=$(mktemp -d /tmp/nunchaku-bench-70b.XXXXXX)
trap 'rm -rf "$DIR"' EXIT

python3 - "$DIR" <<'EOF'
import json, os, struct, sys
d = sys.argv[1]
cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
       "intermediate_size": 28672, "num_attention_heads": 64, "num_key_value_heads": 8,
       "num_hidden_layers": 80, "vocab_size": 32000, "max_position_embeddings": 4096,
       "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "tie_word_embeddings": False,
       "torch_dtype": "float16"}
json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
h, i, v, L, kv = 8192, 28672, 32000, 80, 8 * 128
tensors = [("model.embed_tokens.weight", [v, h])]
for l in range(L):
    p = f"model.layers.{l}."
    tensors += [(p + "input_layernorm.weight", [h]), (p + "self_attn.q_proj.weight", [h, h]),
                (p + "self_attn.k_proj.weight", [kv, h]), (p + "self_attn.v_proj.weight", [kv, h]),
                (p + "self_attn.o_proj.weight", [h, h]), (p + "mlp.gate_proj.weight", [i, h]),
                (p + "mlp.up_proj.weight", [i, h]), (p + "mlp.down_proj.weight", [h, i]),
                (p + "post_attention_layernorm.weight", [h])]
tensors += [("model.norm.weight", [h]), ("lm_head.weight", [v, h])]
shards, per = 15, -(-len(tensors) // 15)
weight_map, total = {}, 0
for s in range(shards):
    name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
    header, off = {}, 0
    for t, shape in tensors[s * per:(s + 1) * per]:
        n = 2
        for x in shape: n *= x
        header[t] = {"dtype": "F16", "shape": shape, "data_offsets": [off, off + n]}
        weight_map[t] = name
        off += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(d, name), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(8 + len(text) + off)
    total += off
json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
          open(os.path.join(d, "model.safetensors.index.json"), "w"))
EOF

echo "sparse 70B checkpoint: $DIR ($(du -sh --apparent-size "$DIR" | cut -f1) apparent, $(du -sh "$DIR" | cut -f1) on disk)"
ns() { date +%s%N; }
t0=$(ns)
for _ in $(seq "$RUNS"); do "$BIN" estimate "$DIR" --json > "$DIR/ours.json" || true; done
t1=$(ns)
ours_ms=$(( (t1 - t0) / RUNS / 1000000 ))
python3 - "$DIR" "$RUNS" "$ours_ms" <<'EOF' 2>/dev/null
import argparse, json, os, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
d, runs, ours_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
from make_golden_estimate import LlamaForCausalLM
import accelerate.commands.estimate as est
from accelerate import init_empty_weights
cfg = json.load(open(os.path.join(d, "config.json")))
t0 = time.perf_counter()
for _ in range(runs):
    # what create_empty_model does with transformers: build the model on the meta device
    with init_empty_weights():
        model = LlamaForCausalLM(cfg)
    est.create_empty_model = lambda *a, **k: model
    rows = est.gather_data(argparse.Namespace(model_name=d, library_name="transformers",
                                              trust_remote_code=False, dtypes=["float16"]))
acc_ms = (time.perf_counter() - t0) / runs * 1000
ours = json.load(open(os.path.join(d, "ours.json")))
print(f"nunchaku estimate : {ours_ms:8.1f} ms/run  weights {ours['component_bytes']['weights']:,} B, "
      f"per-GPU total {ours['total_bytes']:,} B (KV, activations, overheads included)")
print(f"accelerate        : {acc_ms:8.1f} ms/run  weights {int(rows[0][2]):,} B (fp16, weights only; "
      f"import time excluded)")
print(f"ratio accelerate/nunchaku time: {acc_ms / max(ours_ms, 0.001):.1f}x; "
      f"bytes ratio nunchaku total/accelerate weights: {ours['total_bytes'] / rows[0][2]:.3f}")
EOF

# plan: `nunchaku plan --compat accelerate` against accelerate's infer_auto_device_map on the
# same model tree and the same max_memory; the two maps must also be equal.
t0=$(ns)
for _ in $(seq "$RUNS"); do
  "$BIN" plan "$DIR" --compat accelerate --vram 24G,24G --cpu-ram 64G --disk --format accelerate > "$DIR/ours_map.json" 2>/dev/null || true
done
t1=$(ns)
plan_ms=$(( (t1 - t0) / RUNS / 1000000 ))
t0=$(ns)
for _ in $(seq "$RUNS"); do "$BIN" plan "$DIR" --vram 24G,24G --cpu-ram 64G --disk --format json > /dev/null 2>&1 || true; done
t1=$(ns)
balanced_ms=$(( (t1 - t0) / RUNS / 1000000 ))
python3 - "$DIR" "$RUNS" "$plan_ms" "$balanced_ms" <<'EOF' 2>/dev/null
import json, os, sys, time
sys.path.insert(0, os.path.join(os.getcwd(), "scripts"))
d, runs, plan_ms, balanced_ms = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
from make_golden_estimate import LlamaForCausalLM
from accelerate import init_empty_weights
from accelerate.utils import infer_auto_device_map
import torch
cfg = json.load(open(os.path.join(d, "config.json")))
mm = {0: 24 * 2**30, 1: 24 * 2**30, "cpu": 64 * 2**30}
t0 = time.perf_counter()
for _ in range(runs):
    with init_empty_weights():
        model = LlamaForCausalLM(cfg)
    dm = infer_auto_device_map(model, max_memory=mm, no_split_module_classes=["DecoderLayer"], dtype=torch.float16)
acc_ms = (time.perf_counter() - t0) / runs * 1000
ours = json.load(open(os.path.join(d, "ours_map.json")))
same = {k: str(v) for k, v in ours.items()} == {k: str(v) for k, v in dm.items()}
print(f"nunchaku plan --compat accelerate: {plan_ms:8.1f} ms/run (whole process); balanced plan {balanced_ms} ms/run")
print(f"accelerate infer_auto_device_map : {acc_ms:8.1f} ms/run (meta model build + map; import time excluded)")
print(f"ratio accelerate/nunchaku time: {acc_ms / max(plan_ms, 0.001):.1f}x; maps identical: {same}")
EOF
