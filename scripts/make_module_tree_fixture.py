"""testdata/models/module-tree: accelerate's own infer_auto_device_map test model (linear1,
batchnorm, linear2: nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 5)) saved as a
PyTorch state dict (pytorch_model.bin keeps the modules' definition order; safetensors
would sort them), with no config.json, and expected.json holding what accelerate says of
it: the device map for max_memory {0: 200, 1: 200} and the module sizes
(compute_module_sizes, as stored and as bf16).

    python scripts/make_module_tree_fixture.py   (needs torch and accelerate)
"""
import json
import os

import torch
import torch.nn as nn
from accelerate import infer_auto_device_map
from accelerate.utils import compute_module_sizes

OUT = os.path.join(os.path.dirname(__file__), "..", "testdata", "models", "module-tree")


class ModelForTest(nn.Module):  # as accelerate's tests/test_modeling_utils.py defines it
    def __init__(self):
        super().__init__()
        self.linear1 = nn.Linear(3, 4)
        self.batchnorm = nn.BatchNorm1d(4)
        self.linear2 = nn.Linear(4, 5)


def main():
    torch.manual_seed(0)
    model = ModelForTest()
    os.makedirs(OUT, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(OUT, "pytorch_model.bin"))
    sizes = compute_module_sizes(model)
    bf16 = compute_module_sizes(model, dtype=torch.bfloat16)
    expected = {
        "accelerate_map_200_200": dict(infer_auto_device_map(model, max_memory={0: 200, 1: 200})),
        "module_bytes": {k: sizes[k] for k in ("linear1", "batchnorm", "linear2", "")},
        "module_bytes_bf16": {k: bf16[k] for k in ("linear1", "batchnorm", "linear2", "")},
    }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
