"""llama.cpp's side of scripts/bench_run.sh: prompt and decode tok/s at the given batch sizes.

    python bench_llamacpp.py MODEL.gguf THREADS PROMPT DECODE "BATCHES"

Uses llama-cpp-python's low-level API (one context with B sequences for batch B), the
same prompts as the [.engine-bench] test case (sequence b, position i: token
(i*7919 + b*104729 + 3) % vocab), and the same measurement: the best of 3 prefills
after a warm-up, then DECODE steps of one token per sequence. Prints one JSON line.
llama.cpp keeps its default KV cache type (f16) and micro-batch (512).
"""
import json
import sys
import time

import llama_cpp as L


def main():
    path, threads, P, D = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    batches = [int(b) for b in sys.argv[5].split()]
    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    if not model:
        sys.exit(f"llama.cpp could not load {path}")
    vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    out = {}
    for nseq in batches:
        cp = L.llama_context_default_params()
        cp.n_ctx = (P + D + 8) * nseq
        cp.n_batch = P * nseq
        cp.n_seq_max = nseq
        cp.n_threads = threads
        cp.n_threads_batch = threads
        cp.no_perf = True
        ctx = L.llama_init_from_model(model, cp)
        if not ctx:
            sys.exit("llama.cpp could not create a context")
        mem = L.llama_get_memory(ctx)
        batch = L.llama_batch_init(P * nseq, 0, nseq)

        def fill(tokens):  # tokens: [(seq, pos, id, want_logits)]
            batch.n_tokens = len(tokens)
            for i, (s, p, t, lg) in enumerate(tokens):
                batch.token[i] = t
                batch.pos[i] = p
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = s
                batch.logits[i] = 1 if lg else 0

        prompt = [(s, i, (i * 7919 + s * 104729 + 3) % vocab, i == P - 1) for s in range(nseq) for i in range(P)]

        def prefill():
            L.llama_memory_clear(mem, True)
            fill(prompt)
            if L.llama_decode(ctx, batch) != 0:
                sys.exit("llama_decode failed on the prompt")

        prefill()  # warm-up
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            prefill()
            best = min(best, time.perf_counter() - t0)
        t0 = time.perf_counter()
        for step in range(D):
            fill([(s, P + step, (step * 31 + s * 7 + 5) % vocab, True) for s in range(nseq)])
            if L.llama_decode(ctx, batch) != 0:
                sys.exit("llama_decode failed on a decode step")
        decode = time.perf_counter() - t0
        out[f"b{nseq}"] = {"prompt_tok_s": P * nseq / best, "decode_tok_s": D * nseq / decode}
        L.llama_batch_free(batch)
        L.llama_free(ctx)
    L.llama_model_free(model)
    # The instructions this llama.cpp was built with ("AVX2 = 1 | AVX512 = 0 | ..."), so a
    # row says which build it measured.
    out["system_info"] = L.llama_print_system_info().decode(errors="replace").strip()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
