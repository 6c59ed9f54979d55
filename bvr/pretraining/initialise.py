"""The no-pretraining control's starting point: the configured encoder, randomly initialised, never trained."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from bvr.cache import CACHE_VERSION, build_once, cache_dir
from bvr.config import Config
from bvr.model import count_parameters
from bvr.pretraining.export import build_model, export_model
from bvr.pretraining.prepare import prepare_corpus, prepare_tokenizer
from bvr.pretraining.run import PretrainResult
from bvr.tokenization import load_tokenizer, vocab_info


def initialise(cfg: Config, *, progress: bool = True) -> PretrainResult:
    """The control's encoder, written like a finished run (``model/`` with the tokenizer and ``bvr.yaml``) under
    ``output_dir/runs/init-NAME-HASH``, so fine-tuning reads it as any checkpoint; with ``from_scratch`` it takes
    only the shape and the tokenizer and draws new weights per seed. Only the corpus and tokenizer stages are
    prepared. The weights depend on ``training.seed`` alone, so the folder's bytes (and the fine-tuning cache
    keyed on them) are the same each time.
    """
    corpus_dir = prepare_corpus(cfg, progress=progress)
    tokenizer_dir = prepare_tokenizer(cfg, corpus_dir, progress=progress)
    runs = Path(cfg.output_dir) / "runs"
    parts = {"version": CACHE_VERSION, "tokenizer": tokenizer_dir.name, "model": dataclasses.asdict(cfg.model),
             "sentence_head": cfg.data.sentence_objective != "none", "seed": cfg.training.seed}
    run_dir = cache_dir(runs, f"init-{cfg.name}", parts)

    def build(tmp: Path) -> None:
        model = build_model(cfg, vocab_info(*load_tokenizer(tokenizer_dir)))
        export_model(model, tokenizer_dir, cfg, tmp / "model")
        params = {f"params_{k}": float(v) for k, v in count_parameters(model).items()}
        (tmp / "metrics.json").write_text(json.dumps({**params, "steps": 0.0, "tokens_seen": 0.0}, indent=2))

    run_dir, built = build_once(run_dir, build, parts)
    return PretrainResult(run_dir, not built, json.loads((run_dir / "metrics.json").read_text()))
