#!/usr/bin/env python3
"""Context tokens per image, as transformers' own processors make them, for the multimodal
wrappers of testdata/arch: writes testdata/golden/image_tokens.json, which
tests/test_images.cpp holds nunchaku's ModelSpec::image_tokens to.

Fixed-count families (gemma3, llava) take their count from config.json. Where the count
follows the image's size (mistral3 / Pixtral, Qwen2-VL, Llama 4), an image far larger than
the processor's limit is put through the family's image processor and its tokens counted by
the processor's own rule, so the figure is the largest one image can take.

  python3 scripts/make_image_tokens_golden.py      (transformers 5, torch, torchvision, pillow)
"""
import json
import os

import numpy as np
import transformers

ROOT = os.path.join(os.path.dirname(__file__), "..")
BIG = np.zeros((6000, 6000, 3), dtype=np.uint8)


def config(case):
    return json.load(open(os.path.join(ROOT, "testdata", "arch", case, "config.json")))


def pixtral(case):
    from transformers.models.pixtral.image_processing_pixtral import PixtralImageProcessor
    c = config(case)
    v = c["vision_config"]
    tile = v["patch_size"] * c.get("spatial_merge_size", 1)
    p = PixtralImageProcessor(size={"longest_edge": v["image_size"]}, patch_size=v["patch_size"])
    out = p(images=[BIG], return_tensors="np")
    h, w = out["image_sizes"][0]
    # processing_pixtral.py: rows of [IMG] x (w / tile), each closed by [IMG_BREAK] ([IMG_END] last)
    rows, cols = int(h) // tile, int(w) // tile
    return rows * (cols + 1)


def qwen2_vl(case):
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    v = config(case)["vision_config"]
    # max_pixels of the published Qwen/Qwen2-VL-7B-Instruct preprocessor_config.json
    p = Qwen2VLImageProcessor(max_pixels=12845056, patch_size=v["patch_size"], merge_size=v["spatial_merge_size"])
    out = p(images=[BIG], return_tensors="np")
    return int(np.prod(out["image_grid_thw"][0])) // v["spatial_merge_size"] ** 2  # processing_qwen2_vl.py


def llama4(case):
    from transformers.models.llama4.image_processing_llama4 import Llama4ImageProcessor
    from transformers.models.llama4.processing_llama4 import Llama4Processor
    v = config(case)["vision_config"]
    p = Llama4ImageProcessor(size={"height": v["image_size"], "width": v["image_size"]})
    out = p(images=[BIG], return_tensors="pt")
    ratio = tuple(int(x) for x in out["aspect_ratios"][0])
    per_tile = int((v["image_size"] // v["patch_size"]) ** 2 * v["pixel_shuffle_ratio"] ** 2)
    proc = Llama4Processor.__new__(Llama4Processor)  # the prompt builder only: no tokenizer needed
    for k, tok in (("boi_token", "<|image_start|>"), ("eoi_token", "<|image_end|>"), ("img_patch_token", "<|patch|>"),
                   ("tile_token", "<|tile_x_separator|>"), ("tile_global_token", "<|tile_y_separator|>"),
                   ("image_token", "<|image|>"), ("start_of_img_token", "<|image_start|>"),
                   ("end_of_img_token", "<|image_end|>")):
        setattr(proc, k, tok)
    text = proc._prompt_split_image(ratio, per_tile)
    return sum(text.count(t) for t in ("<|image_start|>", "<|image_end|>", "<|patch|>", "<|tile_x_separator|>",
                                       "<|tile_y_separator|>", "<|image|>"))


cases = {
    "gemma3-12b": ("fixed", config("gemma3-12b")["mm_tokens_per_image"]),
    "llava-1.5-7b": ("fixed", config("llava-1.5-7b")["image_seq_length"]),
    "mistral3-24b": ("at_most", pixtral("mistral3-24b")),
    "qwen2-vl-7b": ("at_most", qwen2_vl("qwen2-vl-7b")),
    "qwen2.5-vl-7b": ("at_most", qwen2_vl("qwen2.5-vl-7b")),
    "llama4-scout": ("at_most", llama4("llama4-scout")),
}
doc = {"transformers": transformers.__version__,
       "cases": {k: {"kind": kind, "image_tokens": n} for k, (kind, n) in cases.items()}}
path = os.path.join(ROOT, "testdata", "golden", "image_tokens.json")
with open(path, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
print(json.dumps(doc, indent=1))
