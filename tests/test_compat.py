"""The earlier cache keys bvr.compat computes are the names earlier versions gave their folders: pinned here as
that code computed them, for settings that exercise each of their special cases (a key added since at its default
or not, NSP/none/SOP, the reference validation, a tokenizer given by file, local files and a hub id)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bvr import compat
from bvr.ablation.declare import Evaluations
from bvr.config import load_config
from bvr.config.finetune import FinetuneConfig
from bvr.evaluation.run import _settings
from bvr.pretraining.data import validation_differs

ROOT = Path("/r")
EARLIER = [
    ([],
     {"tokenizer": "tokenizer-bert-c83ef9967e84", "tokenizer_path": "tokenizer-bert-c7ac2c05e8a1",
      "tokenized": "tokenized-001ea1738ce7", "data": "data-segment-pair-0b925a532b5d",
      "pretrain": "pretrain-default-ae80a00ab72a", "init": "init-default-45b226be066e"}),
    (['tokenizer.family=roberta', 'data.sentence_objective=sop', 'model.norm=pre', 'training.dropout=false'],
     {"tokenizer": "tokenizer-roberta-0ed2e909d0dc", "tokenizer_path": "tokenizer-roberta-a8994d401d49",
      "tokenized": "tokenized-a73cc6496b9a", "data": "data-segment-pair-4503c273857f",
      "pretrain": "pretrain-default-c6d1820938f3", "init": "init-default-103e93368d60"}),
    (['data.input_format=full-sentences', 'data.sentence_objective=none', 'masking.split=[1.0,0.0,0.0]',
      'training.tokens_per_batch=4096'],
     {"tokenizer": "tokenizer-bert-c83ef9967e84", "tokenizer_path": "tokenizer-bert-c7ac2c05e8a1",
      "tokenized": "tokenized-001ea1738ce7", "data": "data-full-sentences-66361ccfebe8",
      "pretrain": "pretrain-default-419b68c0ef85", "init": "init-default-2406608e4ad9"}),
]


@pytest.mark.parametrize(("overrides", "names"), EARLIER, ids=["default", "roberta-sop-pre", "full-sentences-none"])
def test_the_earlier_names_of_each_stage(overrides, names):
    cfg = load_config(None, overrides=overrides)
    assert compat.earlier_tokenizer(ROOT, cfg.tokenizer, "corpus-x", None).name == names["tokenizer"]
    assert compat.earlier_tokenizer(ROOT, cfg.tokenizer, "corpus-x", "beef").name == names["tokenizer_path"]
    assert compat.earlier_tokenized(ROOT, cfg.tokenizer.family, "corpus-x", "tokenizer-y").name == names["tokenized"]
    assert compat.earlier_data(ROOT, cfg.data, "tokenized-z").name == names["data"]
    earlier = compat.earlier_pretrain(ROOT, cfg, "data-w", "tokenizer-y", validation_differs(cfg))
    assert earlier.name == names["pretrain"]
    assert compat.earlier_init(ROOT, cfg, "tokenizer-y").name == names["init"]


def test_the_earlier_names_of_a_corpus():
    corpus = dataclasses.asdict(load_config(None).corpus)
    local = {"source": "plain", "path": "/data/wiki.txt", "hf_config": None}
    assert [p.name for p in compat.earlier_corpus(ROOT, corpus, local, "c0ffee")] == [
        "corpus-633a328e49d7", "corpus-c670ca383025"]
    hub = {"source": "hf", "path": "wikitext", "hf_config": "wikitext-2-raw-v1"}
    assert [p.name for p in compat.earlier_corpus(ROOT, corpus, hub, None)] == ["corpus-20e915789a46"]


@pytest.mark.parametrize(("logged", "objective"), [
    ({"sentence_objective": "sop", "nsp": "True"}, "sop"), ({"nsp": "True"}, "nsp"), ({"nsp": "false"}, "none"),
    ({"nsp": False}, "none"), ({}, None)])
def test_a_sentence_objective_logged_as_nsp_reads_by_its_name(logged, objective):
    assert compat.sentence_objective_of(logged) == objective


@pytest.mark.parametrize(("overrides", "names"), [
    ({}, ["rte-seed0-b1834fd148e6", "rte-seed0-56f4c084dcba"]),
    ({"null_threshold": -1.5}, ["rte-seed0-82ed9e73f8ee", "rte-seed0-f7b9cffc38d9"])])
def test_the_earlier_names_of_a_fine_tuning_seed(overrides, names):
    cfg = dataclasses.replace(FinetuneConfig(), **overrides)
    key = compat.SeedKey("model-identity", "rte", False, "d4t4")
    hashed = cfg.grid()[0].config.hashed()  # the one point fine-tuning hashes (no selection keys)
    assert [p.name for p in compat.earlier_seed_dirs(ROOT, key, hashed, 0, Path("/data"))] == names


@pytest.mark.parametrize(("kind", "task", "names"), [
    ("blimp", None, ["blimp-8c4276e20db0.json", "blimp-6e726c6f04a7.json", "blimp-85f9f46fdaa7.json"]),
    ("probe", "sst2", ["probe-sst2-d835e0ad7fcc.json", "probe-sst2-af961b250571.json",
                       "probe-sst2-cb9af7b956da.json"])])
def test_the_earlier_names_of_an_evaluation_result(kind, task, names):
    name, settings = f"{kind}-{task}" if task else kind, _settings(kind, task, Evaluations())
    content = ("model-id", "data-fp")
    assert compat.earlier_result_names(name, settings, Path("/data"), content) == names[:2]
    assert compat.earlier_result_names(name, settings, None, content)[0] == names[2]
