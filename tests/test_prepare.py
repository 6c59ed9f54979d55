"""End to end through the cached stages on a generated WikiExtractor corpus: reuse, sharing and outputs."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import datasets
import numpy as np
import pytest
import yaml

from bvr.cache import CACHE_VERSION, DONE, is_done
from bvr.config import load_config
from bvr.corpus import load_corpus
from bvr.errors import BvrError
from bvr.pretraining.collator import PretrainingCollator
from bvr.pretraining.formats import create_instances
from bvr.pretraining.instances import Template
from bvr.pretraining.masking import MaskRule
from bvr.pretraining.prepare import (
    MIN_VALIDATION_DOCUMENTS,
    SentenceBatches,
    _tokenize_batch,
    load_instances,
    prepare,
    prepare_corpus,
    prepare_tokenizer,
)
from bvr.pretraining.show import render_examples
from bvr.tokenization import load_tokenizer, train_tokenizer, vocab_info

WORDS = (
    "the a river city music player team season album film school church war army king queen people born "
    "played released known became north south village station line company island football club league "
    "first second later after during between against under early small large new old great famous"
).split()


def write_wiki_corpus(root: Path, documents: int = 120, seed: int = 0) -> Path:
    """A WikiExtractor folder of generated articles (titles repeated on the first line, as the real dumps)."""
    rng = random.Random(seed)
    folder = root / "corpus" / "wiki" / "AA"
    folder.mkdir(parents=True)
    for part in range(2):
        lines = []
        for d in range(part * documents // 2, (part + 1) * documents // 2):
            title = f"Article {d}"
            lines += [f'<doc id="{d}" url="?curid={d}" title="{title}">', title, ""]
            for _ in range(rng.randint(1, 4)):
                sentences = [
                    " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))).capitalize() + "."
                    for _ in range(rng.randint(1, 6))
                ]
                lines.append(" ".join(sentences))
            lines += ["", "</doc>"]
        (folder / f"wiki_{part:02d}").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    return write_wiki_corpus(tmp_path_factory.mktemp("data"))


def config(data_dir: Path, out: Path, *overrides: str):
    return load_config(
        preset="tiny",
        overrides=["corpus.path=corpus/wiki", "corpus.validation_fraction=0.1", "tokenizer.vocab_size=400",
                   "data.shard_documents=50", *overrides],
        extra={"data_dir": str(data_dir), "output_dir": str(out)},
    )


@pytest.fixture(scope="module")
def bert_prepared(data_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    return out, prepare(config(data_dir, out), progress=False)


def test_every_stage_writes_its_config_and_is_marked_done(bert_prepared):
    _, prepared = bert_prepared
    for folder in (prepared.corpus, prepared.tokenizer, prepared.tokenized, prepared.instances):
        assert (folder / DONE).is_file()
        assert yaml.safe_load((folder / "config.yaml").read_text())
    stats = prepared.stats()
    assert stats["corpus"]["documents"] == 120
    assert stats["corpus"]["train_documents"] + stats["corpus"]["validation_documents"] == 120
    assert stats["tokenizer"]["family"] == "bert" and stats["tokenizer"]["vocab_size"] <= 400
    train = stats["instances"]["train"]
    assert stats["instances"]["sentence_objective"] == "nsp"
    assert train["sequences"] > 0 and train["nsp_label_0"] + train["nsp_label_1"] == train["sequences"]
    assert train["nsp_label_1_share"] == round(train["nsp_label_1"] / train["sequences"], 4)


def test_sequences_fit_and_carry_the_bert_template(bert_prepared):
    _, prepared = bert_prepared
    tokenizer, _ = load_tokenizer(prepared.tokenizer)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    train = load_instances(prepared)["train"]
    for row in train.select(range(min(50, train.num_rows))):
        ids = row["input_ids"]
        assert len(ids) <= 128
        assert ids[0] == cls_id and ids[-1] == sep_id and ids.count(sep_id) == 2
        assert len(row["token_type_ids"]) == len(ids)
        assert row["sentence_label"] in (0, 1)


def test_a_second_run_reuses_every_stage(bert_prepared, data_dir):
    out, prepared = bert_prepared
    stamps = {p: (p / DONE).stat().st_mtime_ns for p in (prepared.corpus, prepared.tokenizer, prepared.instances)}
    again = prepare(config(data_dir, out), progress=False)
    assert again == prepared
    assert {p: (p / DONE).stat().st_mtime_ns for p in stamps} == stamps


def test_the_same_data_under_another_path_reuses_every_stage(bert_prepared, data_dir, tmp_path):
    out, prepared = bert_prepared
    shutil.copytree(data_dir, tmp_path / "moved")  # the same bytes: the stages are keyed by content, not path
    built: set[Path] = set()
    assert prepare(config(tmp_path / "moved", out), progress=False, built=built) == prepared and not built
    text = next((tmp_path / "moved" / "corpus" / "wiki").rglob("wiki_*"))
    text.write_text(text.read_text() + "\n", encoding="utf-8")  # other content: another corpus
    assert prepare_corpus(config(tmp_path / "moved", out), progress=False) != prepared.corpus


def test_a_new_format_reuses_corpus_tokenizer_and_tokens(bert_prepared, data_dir):
    out, prepared = bert_prepared
    full = prepare(config(data_dir, out, "data.input_format=full-sentences", "data.sentence_objective=none"),
                   progress=False)
    assert (full.corpus, full.tokenizer, full.tokenized) == (prepared.corpus, prepared.tokenizer, prepared.tokenized)
    assert full.instances != prepared.instances and full.instances.name.startswith("data-full-sentences-")
    lengths = [len(ids) for ids in load_instances(full)["train"]["input_ids"]]
    assert max(lengths) == 128 and np.mean(lengths) > 100  # packed across documents
    assert set(load_instances(full)["train"]["sentence_label"]) == {-100}


def test_sop_is_prepared_apart_and_reports_its_swaps(bert_prepared, data_dir):
    out, prepared = bert_prepared
    sop = prepare(config(data_dir, out, "data.sentence_objective=sop"), progress=False)
    assert (sop.corpus, sop.tokenizer, sop.tokenized) == (prepared.corpus, prepared.tokenizer, prepared.tokenized)
    assert sop.instances != prepared.instances and sop.instances.name.startswith("data-segment-pair-")
    stats = sop.stats()["instances"]
    assert stats["sentence_objective"] == "sop" and "nsp_label_1" not in stats["train"]
    train = stats["train"]
    n, swapped = train["sequences"], train["sop_label_1"]
    assert train["sop_label_0"] + swapped == n and train["sop_label_1_share"] == round(swapped / n, 4)
    assert abs(swapped / n - 0.5) < 4 * math.sqrt(0.25 / n)  # a fair coin per pair, 4 standard deviations
    labels = load_instances(sop)["train"]["sentence_label"]
    assert labels.count(1) == swapped and set(labels) == {0, 1}
    text = render_examples(config(data_dir, out, "data.sentence_objective=sop"), sop, count=8)
    assert "in order):" in text and "swapped):" in text


def test_masking_does_not_change_the_prepared_data(bert_prepared, data_dir):
    out, prepared = bert_prepared
    static = prepare(config(data_dir, out, "masking.mode=static", "masking.mask_prob=0.2"), progress=False)
    assert static == prepared


def test_same_config_gives_the_same_bytes(bert_prepared, data_dir, tmp_path):
    _, prepared = bert_prepared
    fresh = prepare(config(data_dir, tmp_path), progress=False)
    assert fresh.instances.name == prepared.instances.name
    a, b = load_instances(prepared)["train"], load_instances(fresh)["train"]
    assert a["input_ids"] == b["input_ids"] and a["sentence_label"] == b["sentence_label"]


def test_roberta_family_end_to_end(data_dir, tmp_path):
    cfg = config(data_dir, tmp_path, "tokenizer.family=roberta", "model.family=roberta",
                 "data.input_format=doc-sentences", "data.sentence_objective=none")
    prepared = prepare(cfg, progress=False)
    tokenizer, family = load_tokenizer(prepared.tokenizer)
    assert family == "roberta"
    train = load_instances(prepared)["train"]
    assert train[0]["input_ids"][0] == tokenizer.token_to_id("<s>")
    assert isinstance(train, datasets.Dataset)
    text = render_examples(cfg, prepared, count=2, epoch=3)
    assert "doc-sentences, dynamic masking, epoch 3" in text and "<mask>{" in text


# --- sentences as they stand in running text (byte-level BPE) ----------------------------------------------------

RUNNING = [["He left.", "The cat sat on the mat.", "The dog ran."], ["The end came.", "He left the city."]] * 40


def _split(documents: list[list[str]]) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"doc_id": [str(d) for d in range(len(documents))], "sentences": documents})


@pytest.fixture(scope="module")
def running_tokenizers() -> dict:
    return {family: train_tokenizer(family, SentenceBatches(_split(RUNNING), family), vocab_size=320,
                                    show_progress=False) for family in ("bert", "roberta")}


def test_byte_level_packs_a_later_sentence_with_its_leading_space(running_tokenizers):
    """A packed byte-level sequence of two sentences reads 'He left. The' as in running text: ĠThe, not The; the
    document's first sentence has no space, like the start of a fine-tuning text."""
    tokenizer = running_tokenizers["roberta"]
    tokenized = _tokenize_batch({"doc_id": ["0"], "sentences": [["He left.", "The cat sat."]]}, tokenizer, "roberta")
    lengths = tokenized["sentence_lengths"][0]
    ids = np.array(tokenized["token_ids"][0])
    assert ids.tolist() == tokenizer.encode("He left. The cat sat.", add_special_tokens=False).ids
    template = Template.for_family("roberta", tokenizer.token_to_id("<s>"), tokenizer.token_to_id("</s>"))
    out = create_instances([np.split(ids, [lengths[0]])], "full-sentences", max_length=32, objective="none",
                           template=template, rng=random.Random(0))
    tokens = [tokenizer.id_to_token(int(i)) for i in out["input_ids"][0]]
    second = 1 + lengths[0]  # after <s> and the first sentence
    assert tokens[1] == "He" and tokens[second - 1] == "." and tokens[second] == "ĠThe"


def test_whole_word_masking_starts_a_word_at_the_next_sentence(running_tokenizers):
    """The '.' ending a sentence and the next sentence's 'ĠThe' are two words: over 200 dynamic copies the '.' is
    masked without 'ĠThe' (encoded alone, 'The' would continue the '.' and the two be masked together or not at
    all)."""
    tokenizer = running_tokenizers["roberta"]
    vocab = vocab_info(tokenizer, "roberta")
    assert vocab.word_start[tokenizer.token_to_id("ĠThe")] and not vocab.word_start[tokenizer.token_to_id("The")]
    tokenized = _tokenize_batch({"doc_id": ["0"], "sentences": [["He left.", "The cat sat."]]}, tokenizer, "roberta")
    ids = [vocab.cls_id, *tokenized["token_ids"][0], vocab.sep_id]
    dot = 1 + tokenized["sentence_lengths"][0][0] - 1
    collate = PretrainingCollator(vocab, mode="dynamic", seed=0, rule=MaskRule(scheme="whole-word", mask_prob=0.15))
    apart = together = 0
    for epoch in range(200):
        batch = collate([{"input_ids": ids, "token_type_ids": [0] * len(ids), "sentence_label": -100, "index": 0,
                          "epoch": epoch}])
        chosen = (batch["labels"][0] != -100).tolist()
        apart += chosen[dot] != chosen[dot + 1]
        together += chosen[dot] and chosen[dot + 1]
    assert apart > 0 and together == 0  # 8 tokens at 15%: one token masked, so never the two


def test_wordpiece_ids_and_training_are_unchanged(running_tokenizers):
    """WordPiece sentences are encoded and trained on exactly as before: each sentence alone, no prefix."""
    tokenizer = running_tokenizers["bert"]
    plain = [sentence for doc in RUNNING for sentence in doc]
    assert tokenizer.to_str() == train_tokenizer("bert", plain, vocab_size=320, show_progress=False).to_str()
    batch = {"doc_id": [str(d) for d in range(len(RUNNING))], "sentences": RUNNING}
    tokenized = _tokenize_batch(batch, tokenizer, "bert")
    for doc, token_ids, lengths in zip(RUNNING, tokenized["token_ids"], tokenized["sentence_lengths"], strict=True):
        alone = [tokenizer.encode(sentence, add_special_tokens=False).ids for sentence in doc]
        assert token_ids == [t for ids in alone for t in ids] and lengths == [len(ids) for ids in alone]


def test_a_stage_another_version_made_is_built_anew_in_one_line(data_dir, tmp_path, capsys):
    """A corpus folder stamped with another cache version (as an earlier bvr's, version 3) is not reused: the corpus
    is built under today's key, in one line naming the folder, and the stages after it, keyed on that name, are found.
    Today's store is then reused without a line."""
    out = tmp_path / "out"
    cfg = config(data_dir, out)
    today = prepare(cfg, progress=False)
    earlier = today.corpus.with_name("corpus-0123456789ab")
    today.corpus.rename(earlier)
    stamp = earlier / "config.yaml"
    stamp.write_text(stamp.read_text().replace(f"version: {CACHE_VERSION}\n", "version: 3\n"))
    capsys.readouterr()
    built: set[Path] = set()
    assert prepare(cfg, progress=False, built=built) == today and built == {today.corpus.resolve()}
    assert capsys.readouterr().err == (
        f"{earlier}: made by another version of bvr (cache version 3; this one writes {CACHE_VERSION}), not reused: "
        f"{today.corpus.name} is made anew\n")
    assert prepare(cfg, progress=False, built=built) == today and built == {today.corpus.resolve()}
    assert capsys.readouterr().err == ""


def test_a_large_corpus_trains_its_tokenizer_on_an_evenly_spaced_sample(data_dir, bert_prepared, capsys):
    out, prepared = bert_prepared
    sampled = prepare_tokenizer(config(data_dir, out, "tokenizer.train_documents=3"), prepared.corpus, progress=True)
    stats = json.loads((sampled / "tokenizer_stats.json").read_text())
    documents = load_corpus(prepared.corpus / "documents")["train"].num_rows
    assert stats["trained_on_documents"] == 3 and stats["training_documents"] == documents > 3
    assert f"training the tokenizer on 3 of the {documents:,} training documents" in capsys.readouterr().err
    whole = json.loads((prepared.tokenizer / "tokenizer_stats.json").read_text())
    assert whole["trained_on_documents"] == documents and sampled.name != prepared.tokenizer.name


def test_byte_level_documents_keep_the_space_before_later_sentences(data_dir, tmp_path):
    cfg = config(data_dir, tmp_path, "tokenizer.family=roberta", "model.family=roberta",
                 "data.input_format=full-sentences", "data.sentence_objective=none")
    prepared = prepare(cfg, progress=False)
    tokenizer, _ = load_tokenizer(prepared.tokenizer)
    tokenized = datasets.load_from_disk(str(prepared.tokenized / "tokenized"))["train"]
    firsts = []
    for ids, lengths in zip(tokenized["token_ids"][:50], tokenized["sentence_lengths"][:50], strict=True):
        starts = np.cumsum([0, *lengths[:-1]])
        firsts.append([tokenizer.id_to_token(ids[s]) for s in starts])
    assert all(not doc[0].startswith("Ġ") for doc in firsts)  # a document's first sentence: no space
    later = [token for doc in firsts for token in doc[1:]]
    assert len(later) > 20 and all(token.startswith("Ġ") for token in later)


def test_killed_build_leaves_no_finished_folder(data_dir, tmp_path, monkeypatch):
    from bvr.pretraining import prepare as stages

    def boom(*args, **kwargs):
        raise RuntimeError("killed")

    monkeypatch.setattr(stages, "create_instances", boom)
    cfg = config(data_dir, tmp_path)
    with pytest.raises(RuntimeError):
        prepare(cfg, progress=False)
    assert not list((tmp_path / "cache").glob("data-*/DONE"))
    monkeypatch.undo()
    assert (prepare(cfg, progress=False).instances / DONE).is_file()


# --- content-keyed stages and small corpora -----------------------------------------------------------------------


def _dirs(prepared) -> tuple[Path, ...]:
    return prepared.corpus, prepared.tokenizer, prepared.tokenized, prepared.instances


def test_a_corpus_file_edited_in_place_is_read_again(tmp_path):
    data_dir = write_wiki_corpus(tmp_path / "data", documents=40)
    cfg = config(data_dir, tmp_path / "out")
    first = prepare(cfg, progress=False)
    assert prepare(cfg, progress=False) == first  # unchanged files: every stage reused
    wiki = data_dir / "corpus" / "wiki" / "AA" / "wiki_01"
    wiki.write_text(wiki.read_text().replace("river", "ocean"))  # same path, new content
    second = prepare(cfg, progress=False)
    assert all(a != b for a, b in zip(_dirs(first), _dirs(second), strict=True))
    def text(prepared) -> str:
        documents = datasets.load_from_disk(str(prepared.corpus / "documents"))
        return " ".join(s for split in documents.values() for doc in split["sentences"] for s in doc)

    assert "ocean" in text(second) and "ocean" not in text(first)
    assert all(is_done(folder) for folder in _dirs(first))  # the old stages stay, for the old content


def test_a_tiny_corpus_takes_its_minimum_of_validation_documents_from_train(tmp_path):
    data_dir = write_wiki_corpus(tmp_path / "data", documents=20)
    prepared = prepare(config(data_dir, tmp_path / "out", "corpus.validation_fraction=0.01"), progress=False)
    corpus = prepared.stats()["corpus"]
    assert corpus["validation_documents"] == MIN_VALIDATION_DOCUMENTS
    assert corpus["validation_documents_from_train"] == MIN_VALIDATION_DOCUMENTS  # the hash chose none at 1%
    assert corpus["train_documents"] == 20 - MIN_VALIDATION_DOCUMENTS
    assert load_instances(prepared)["validation"].num_rows > 0
    assert datasets.load_from_disk(str(prepared.tokenized / "tokenized"))["validation"].num_rows == 2


def test_a_single_document_is_refused_and_no_stage_is_marked_done(tmp_path):
    (tmp_path / "one.txt").write_text("A lone document. It has two sentences.\nAnd a second paragraph.\n")
    cfg = config(tmp_path, tmp_path / "out", "corpus.source=text", "corpus.path=one.txt")
    with pytest.raises(BvrError, match=r"1 document\(s\) found: too few .* at least 3 documents") as info:
        prepare(cfg, progress=False)
    assert "\n" not in str(info.value)
    assert not list((tmp_path / "out" / "cache").glob("*/DONE"))
    assert not list((tmp_path / "out" / "cache").glob("*.tmp-*"))


def test_no_progress_means_no_bars(data_dir, tmp_path, capfd):
    # --no-progress reaches the datasets.map bars of tokenizing and instance making (they wrote to stderr before).
    capfd.readouterr()
    prepare(config(data_dir, tmp_path / "quiet"), progress=False)
    quiet = capfd.readouterr()
    assert "tokenizing" not in quiet.err and "sequences" not in quiet.err and "%|" not in quiet.err
    prepare(config(data_dir, tmp_path / "loud"), progress=True)
    assert "tokenizing train documents" in capfd.readouterr().err
