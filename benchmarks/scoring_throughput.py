"""Forward-only scoring: bvr's batched pseudo-log-likelihood against the naive loop with transformers, in one run.

Pseudo-log-likelihood (Salazar et al. 2020) masks each token of a sentence in turn and sums the log-probability of
the true token; BLiMP scores 134,000 sentences that way. The naive loop a user would write runs one masked copy per
forward pass of ``BertForMaskedLM`` (under ``torch.inference_mode``, the full vocabulary at every position).
:func:`bvr.evaluation.blimp.pll_scores` batches every masked copy of equally long sentences (no padding) and runs
the last layer and the vocabulary projection at the masked position only.

Both sides score the same sentences with the same weights (the bvr model's, copied into transformers) and must
agree to 1e-3 nats per sentence. The sentences come from BLiMP (``--data-dir``, holding ``blimp/data/*.jsonl``),
a fixed sample across paradigms; the tokenizer is a WordPiece vocabulary trained on those paradigms' sentences. The
work is cut into rounds that alternate between the two sides, so background load hits both alike; tokens/s counts
the tokens of every masked copy.

Target: at least 3x the naive loop's tokens/s.

    python benchmarks/scoring_throughput.py --data-dir DATA [--sentences 240] [--rounds 4] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from bvr.evaluation.blimp import load_blimp, pll_scores
from bvr.memory import keep_freed_memory
from bvr.model import EncoderConfig, PretrainingModel
from bvr.model.hf import to_hf_state_dict
from bvr.model.hf_config import hf_config_dict
from bvr.tokenization import train_tokenizer, vocab_info

LAYERS, HIDDEN, HEADS, FFN = 4, 256, 4, 1024
VOCAB = 8_000


def sentences_and_tokenizer(data_dir: Path, count: int, seed: int = 0):
    """``count`` BLiMP sentences (good and bad of pairs across all paradigms) and a tokenizer trained on BLiMP."""
    pairs = load_blimp(data_dir / "blimp", per_paradigm=20, seed=seed)
    texts = [s for pair in pairs for s in (pair.good, pair.bad)]
    tokenizer = train_tokenizer("bert", texts, vocab_size=VOCAB, show_progress=False)
    random.Random(seed).shuffle(texts)
    return texts[:count], tokenizer


def naive_pll(model, tokenizer, mask_id: int, sentences: list[str]) -> np.ndarray:
    """One masked copy per forward pass of transformers' BertForMaskedLM."""
    out = np.zeros(len(sentences))
    with torch.inference_mode():
        for i, encoding in enumerate(tokenizer.encode_batch(sentences)):
            ids = torch.tensor([encoding.ids])
            for position, special in enumerate(encoding.special_tokens_mask):
                if special:
                    continue
                masked = ids.clone()
                masked[0, position] = mask_id
                logits = model(input_ids=masked).logits[0, position]
                out[i] += float(logits.log_softmax(-1)[ids[0, position]])
    return out


def copy_tokens(tokenizer, sentences: list[str]) -> int:
    """Tokens of all masked copies: a sentence of n tokens, s of them special, makes n - s copies of length n."""
    return sum(len(e.ids) * (len(e.ids) - sum(e.special_tokens_mask)) for e in tokenizer.encode_batch(sentences))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("BVR_DATA_DIR", "data")),
                        help="data folder holding blimp/ [default: $BVR_DATA_DIR]")
    parser.add_argument("--sentences", type=int, default=240, help="sentences scored by each side in all")
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds the sentences are cut into")
    parser.add_argument("--threads", type=int, default=None, help="torch threads [default: all cores]")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    parser.add_argument("--keep-freed-memory", action="store_true",
                        help="raise glibc's malloc thresholds as bvr's CLI does (bvr.memory), for both sides; off by "
                             "default, as a peer run by itself would have glibc's defaults "
                             "(benchmarks/freed_memory.py measures the setting alone)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    heap = args.keep_freed_memory and keep_freed_memory()  # process-wide: both sides
    print("heap: freed memory kept between steps (bvr.memory)" if heap else "heap: the C library's defaults")
    torch.manual_seed(0)

    sentences, tokenizer = sentences_and_tokenizer(args.data_dir, args.sentences)
    vocab = vocab_info(tokenizer, "bert")
    config = EncoderConfig(family="bert", vocab_size=vocab.vocab_size, hidden_size=HIDDEN, num_layers=LAYERS,
                           num_heads=HEADS, intermediate_size=FFN, pad_token_id=vocab.pad_id)
    ours = PretrainingModel(config).eval()

    from transformers import BertConfig, BertForMaskedLM

    fields = {k: v for k, v in hf_config_dict(config, False).items() if k != "architectures"}
    theirs = BertForMaskedLM(BertConfig(**fields)).eval()
    theirs.load_state_dict(to_hf_state_dict(ours.state_dict(), config), strict=False)  # decoder tied on load
    theirs.tie_weights()

    chunks = [sentences[i::args.rounds] for i in range(args.rounds)]
    pll_scores(ours, tokenizer, "bert", chunks[0][:8])  # warm-up
    naive_pll(theirs, tokenizer, vocab.mask_id, chunks[0][:2])
    times: dict[str, list[float]] = {"bvr": [], "transformers": []}
    scores: dict[str, list[np.ndarray]] = {"bvr": [], "transformers": []}
    for chunk in chunks:
        for name in ("bvr", "transformers"):
            start = time.perf_counter()
            if name == "bvr":
                result = pll_scores(ours, tokenizer, "bert", chunk)
            else:
                result = naive_pll(theirs, tokenizer, vocab.mask_id, chunk)
            times[name].append(time.perf_counter() - start)
            scores[name].append(result)
    gap = float(np.max(np.abs(np.concatenate(scores["bvr"]) - np.concatenate(scores["transformers"]))))
    if gap > 1e-3:
        raise SystemExit(f"the two sides disagree: largest PLL difference {gap:.2e} nats")

    tokens = [copy_tokens(tokenizer, chunk) for chunk in chunks]
    rate = {name: sum(tokens) / sum(t) for name, t in times.items()}
    per_round = {name: [n / t for n, t in zip(tokens, times[name], strict=True)] for name in times}
    figures = {
        "threads": torch.get_num_threads(),
        "sentences": len(sentences),
        "copy_tokens": sum(tokens),
        "bvr_tokens_per_s": rate["bvr"],
        "transformers_tokens_per_s": rate["transformers"],
        "speedup": rate["bvr"] / rate["transformers"],
        "speedup_per_round": [a / b for a, b in zip(per_round["bvr"], per_round["transformers"], strict=True)],
        "largest_difference_nats": gap,
    }
    print(f"config: {LAYERS} layers, hidden {HIDDEN}, {HEADS} heads, FFN {FFN}, vocab {vocab.vocab_size:,}, fp32, "
          f"{figures['threads']} threads; {len(sentences)} BLiMP sentences, {sum(tokens):,} tokens of masked copies, "
          f"{args.rounds} alternating rounds")
    print(f"{'scorer':<30}{'seconds':>9}{'tokens/s':>12}")
    labels = {"bvr": "bvr pll_scores (batched)", "transformers": "transformers, one copy/forward"}
    for name in times:
        print(f"{labels[name]:<30}{sum(times[name]):>9.2f}{rate[name]:>12,.0f}")
    spread = figures["speedup_per_round"]
    print(f"speed-up: {figures['speedup']:.2f}x the naive loop (target >= 3x; rounds {min(spread):.2f}-"
          f"{max(spread):.2f}x, median {statistics.median(spread):.2f}x); scores agree to {gap:.1e} nats")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
