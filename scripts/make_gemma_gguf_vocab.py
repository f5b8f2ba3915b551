#!/usr/bin/env python3
"""Writes testdata/gguf-vocab/gemma-spm/: a Gemma-3-shaped GGUF vocabulary made by llama.cpp's
own converter, and the ids llama.cpp gives for it.

Gemma's real vocabulary is a SentencePiece BPE model (tokenizer.model) with byte fallback and
no dummy prefix; llama.cpp's convert_hf_to_gguf reads it from that file (tokenizer.ggml.model
"llama", scores, token types, add_space_prefix false). Here such a model is TRAINED with the
`sentencepiece` library on the corpus of make_tokenizer_fixtures.py (<pad> <eos> <bos> <unk> at
0-3 as Gemma has them, <start_of_turn>/<end_of_turn> as user-defined symbols), put beside a
tiny random Gemma3ForCausalLM written by transformers, and converted (--outtype f32).
expected.json: llama-cpp-python's tokenize (vocab_only) of the strings of
make_tokenizer_fixtures.py, without and with BOS and with special-token parsing on and off,
and its detokenize of those ids. (transformers 5.25 does not read this tokenizer.model: without
`protobuf` it takes it for a tiktoken file.)

    LLAMA_CPP=/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp \\
        /work/venv-torch/bin/python scripts/make_gemma_gguf_vocab.py   # torch, transformers 5, sentencepiece, llama-cpp-python
"""
from __future__ import annotations

import io
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import sentencepiece as spm

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "gguf-vocab" / "gemma-spm"
LLAMA_CPP = os.environ.get("LLAMA_CPP", "/work/llamacpp/llama_cpp_python-0.3.36/vendor/llama.cpp")
sys.path.insert(0, str(ROOT / "scripts"))
import make_tokenizer_fixtures as fx  # noqa: E402  (corpus, tricky strings, compact_json)

SPECIALS = ["<start_of_turn>", "<end_of_turn>"]


def train_spm(out_dir: Path) -> None:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(fx.corpus()), model_writer=model, model_type="bpe", vocab_size=700,
        byte_fallback=True, add_dummy_prefix=False, remove_extra_whitespaces=False, split_digits=True,
        normalization_rule_name="identity", character_coverage=1.0, user_defined_symbols=SPECIALS,
        pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>",
        unk_piece="<unk>", allow_whitespace_only_pieces=True, split_by_whitespace=False, num_threads=1,
        minloglevel=2)
    (out_dir / "tokenizer.model").write_bytes(model.getvalue())


def write_model(out_dir: Path, vocab_size: int) -> None:
    import torch
    from transformers import Gemma3TextConfig, Gemma3ForCausalLM
    torch.manual_seed(0)
    cfg = Gemma3TextConfig(vocab_size=vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=8, max_position_embeddings=64,
                           sliding_window=16, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    Gemma3ForCausalLM(cfg).to(torch.float32).save_pretrained(out_dir)
    config = {"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>",
              "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False, "chat_template": fx.GEMMA3_T}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def convert(src: Path, dst: Path) -> None:
    sys.path[:0] = [os.path.join(LLAMA_CPP, "gguf-py"), LLAMA_CPP]
    import convert_hf_to_gguf as c
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf", str(src), "--outfile", str(dst), "--outtype", "f32"]
    try:
        c.main()
    finally:
        sys.argv = argv


def main() -> None:
    import llama_cpp
    import transformers
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "gemma3-spm"
        src.mkdir()
        train_spm(src)
        sp = spm.SentencePieceProcessor(model_file=str(src / "tokenizer.model"))
        write_model(src, sp.get_piece_size())
        if OUT.exists():
            shutil.rmtree(OUT)
        OUT.mkdir(parents=True)
        gguf_path = OUT / "model.gguf"
        convert(src, gguf_path)
    llm = llama_cpp.Llama(model_path=str(gguf_path), vocab_only=True, verbose=False)
    cases = []
    for text in fx.tricky_strings(["<bos>", "<start_of_turn>", "<end_of_turn>", "<eos>"]):
        b = text.encode()
        ids = llm.tokenize(b, add_bos=False, special=True)
        cases.append({
            "text": text,
            "ids": ids,
            "ids_add_special": llm.tokenize(b, add_bos=True, special=True),
            "ids_no_parse_special": llm.tokenize(b, add_bos=False, special=False),
            "decoded": llm.detokenize(ids, special=True).decode("utf-8", errors="replace"),
        })
    expected = {
        "generator": f"scripts/make_gemma_gguf_vocab.py (sentencepiece {spm.__version__}, llama-cpp-python "
                     f"{llama_cpp.__version__}, transformers {transformers.__version__} for the model)",
        "vocab_size": llm.n_vocab(),
        "cases": cases,
    }
    (OUT / "expected.json").write_text(fx.compact_json(expected))
    print(f"gguf-vocab/gemma-spm: vocab {expected['vocab_size']}, {len(cases)} strings")


if __name__ == "__main__":
    main()
