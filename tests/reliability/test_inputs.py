"""Real-world inputs and bad files: each is read correctly or refused with one line naming the file, line or key
and what to do (issue 12, items 5-7).

Corpora: one plain-text rule for ``--source text`` and local ``.txt`` files of ``--source hf``; WikiText articles;
NUL bytes. Tasks: GLUE files with empty sentences, a missing training file. Model folders: a tokenizer that does not
fit the embeddings, a truncated weights file, an encoder-only folder; ``bvr fill-mask`` limits.
"""

from __future__ import annotations

import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from bvr import cli
from bvr.corpus import (
    CorpusStats,
    HoldOut,
    build_corpus,
    load_corpus,
    read_hf_dataset,
    read_plain_text,
    read_wikiextractor,
    read_wikitext,
)
from bvr.errors import BvrError
from bvr.pretrained import fill_mask, load_pretrained
from bvr.tasks.readers import task_file
from bvr.tasks.readers.common import MAX_EMPTY_SHARE
from bvr.tasks.readers.tsv import read_tsv
from bvr.tasks.registry import get_task
from bvr.tokenization import save_tokenizer, train_tokenizer

transformers = pytest.importorskip("transformers")

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WIKITEXT = FIXTURES / "corpus" / "wikitext" / "wiki.train.raw"
GLUE = FIXTURES / "glue"


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """Run ``bvr ARGS`` through :func:`bvr.cli.main`; the exit status, stdout and stderr."""
    capsys.readouterr()  # drop what building the fixtures printed
    monkeypatch.setattr(sys, "argv", ["bvr", *args])
    with pytest.raises(SystemExit) as info:
        cli.main()
    out, err = capsys.readouterr()
    return info.value.code, out, err


def one_line(error: pytest.ExceptionInfo[BvrError]) -> str:
    return error.value.one_line()


# ---------------------------------------------------------------------------------------------------------------
# Plain text: one rule for --source text and --source hf
# ---------------------------------------------------------------------------------------------------------------

# A blank line of spaces, three blank lines, Windows line ends, a bad byte and no final newline: the cases where
# datasets' "paragraph" sampling (split on "\n\n") and the text reader used to disagree.
AWKWARD_TEXT = (b"First doc. Line one.\r\nLine two.\r\n  \r\nSecond doc here.\n\n\n\nThird doc, caf\xe9.\n"
                b"Still third.\n\t\nFourth, no final newline.")


def test_text_and_hf_read_a_text_file_into_the_same_documents(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(AWKWARD_TEXT)
    text_stats, hf_stats = CorpusStats(), CorpusStats()
    as_text = list(read_plain_text([path], text_stats, root=tmp_path))
    as_hf = list(read_hf_dataset(str(path), hf_stats))
    assert as_hf == as_text
    assert [(document["doc_id"], len(document["sentences"])) for document in as_text] == [
        ("corpus.txt:1", 3), ("corpus.txt:4", 1), ("corpus.txt:8", 2), ("corpus.txt:11", 1)]
    assert as_text[2]["sentences"] == ["Third doc, caf\ufffd.", "Still third."]
    assert asdict(hf_stats) == asdict(text_stats)
    assert text_stats.undecodable_bytes == 1


def test_text_and_hf_build_the_same_corpus_from_a_folder(tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    for index in range(12):  # enough documents that the hash puts some in validation
        (folder / f"part{index % 3}.txt").open("a").write(f"Document {index} opens. It goes on.\n\n")
    splits = {}
    for source in ("text", "hf"):
        build_corpus(source, folder, tmp_path / source, held_out=HoldOut(0.3), progress=False)
        splits[source] = {name: split.to_list() for name, split in load_corpus(tmp_path / source).items()}
    assert splits["hf"] == splits["text"]
    assert len(splits["text"]["train"]) + len(splits["text"]["validation"]) == 12
    assert splits["text"]["validation"]  # the split is by doc id, which both sources now share


def test_hf_text_file_has_only_the_train_split(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("Alpha.\n")
    with pytest.raises(BvrError) as error:
        list(read_hf_dataset(str(path), CorpusStats(), split="validation"))
    assert one_line(error) == (f"{path}: local text files have only the 'train' split, not 'validation'. read split "
                               "'train'")


# ---------------------------------------------------------------------------------------------------------------
# WikiText
# ---------------------------------------------------------------------------------------------------------------


def test_wikitext_articles_keep_their_sections_and_drop_headings():
    stats = CorpusStats()
    documents = list(read_wikitext([WIKITEXT], stats, root=WIKITEXT.parent))
    assert documents == [
        {"doc_id": "wiki.train.raw:2", "title": "Valkyria Chronicles III", "sentences": [
            "Valkyria Chronicles III is a tactical role @-@ playing video game .", "It was released in 2011 .",
            "The game began development in 2010 .",
            "As with previous games , the player moves units across the map .", "Units fight in real time ."]},
        {"doc_id": "wiki.train.raw:15", "title": "Tower Building of the Little Rock Arsenal", "sentences": [
            "The Tower Building is a historic building in Little Rock .", "It was built in 1840 ."]},
    ]
    # "= = Gameplay = =", "= = = Battle system = = =", "= = History = =", "= = Only a heading = ="
    assert (stats.headings_dropped, stats.empty_documents, stats.paragraphs) == (4, 1, 6)


def test_wikitext_source_keeps_an_article_on_one_side_of_the_split(tmp_path):
    stats = build_corpus("wikitext", WIKITEXT.parent, tmp_path / "out", held_out=HoldOut(0.5), progress=False)
    corpus = load_corpus(tmp_path / "out")
    titles = [doc["title"] for name in ("train", "validation") for doc in corpus[name]]
    assert sorted(titles) == ["Tower Building of the Little Rock Arsenal", "Valkyria Chronicles III"]
    assert (stats.source, stats.documents, stats.train_documents + stats.validation_documents) == ("wikitext", 2, 2)


def test_text_source_refuses_a_wikitext_file():
    with pytest.raises(BvrError) as error:
        list(read_plain_text([WIKITEXT], CorpusStats()))
    assert one_line(error) == (
        f"{WIKITEXT}:2: this looks like WikiText: its first line is a '= Title =' heading, and as plain text every "
        "section would become a document. read it with corpus.source=wikitext")


def test_wikitext_refuses_text_before_the_first_title(tmp_path):
    path = tmp_path / "notes.raw"
    path.write_text("\nA stray line.\n = Title = \nText.\n")
    with pytest.raises(BvrError) as error:
        list(read_wikitext([path], CorpusStats()))
    assert one_line(error) == (
        f"{path}:2: text before the first '= Title =' line. is this a WikiText file (articles opened by "
        "'= Title =' lines)? For plain text use --source text")


def test_a_formula_shaped_like_a_title_inside_an_article_stays_text(tmp_path):
    """WikiText-2 test's "Constant k filter" has formula lines ``= X =`` between its text lines; titles have blank
    lines around them."""
    path = tmp_path / "wiki.test.raw"
    path.write_text(" \n = Constant k filter = \n \n Constant k filters are image filters . \n \n = = Image "
                    "impedance = = \n \n The image impedance is \n = a = b = \n where b is the nominal impedance . "
                    "\n \n")
    stats = CorpusStats()
    assert list(read_wikitext([path], stats)) == [{"doc_id": "wiki.test.raw:2", "title": "Constant k filter",
                                                   "sentences": ["Constant k filters are image filters .",
                                                                 "The image impedance is", "= a = b =",
                                                                 "where b is the nominal impedance ."]}]
    assert (stats.headings_dropped, stats.paragraphs) == (1, 4)


def test_data_prepare_on_wikitext_as_text_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("BVR_DATA_DIR", raising=False)
    code, _, err = run_main(monkeypatch, capsys, "data", "prepare", "--set", f"corpus.path={WIKITEXT}", "--set",
                            "corpus.source=text", "--output-dir", str(tmp_path / "out"))
    assert code == 2
    assert err == (f"error: {WIKITEXT}:2: this looks like WikiText: its first line is a '= Title =' heading, and as "
                   "plain text every section would become a document. read it with corpus.source=wikitext\n")


# ---------------------------------------------------------------------------------------------------------------
# NUL bytes: dropped and counted in WikiExtractor (and WikiText) files, refused in plain text
# ---------------------------------------------------------------------------------------------------------------


def test_nul_bytes_in_wikiextractor_are_dropped_and_counted(tmp_path):
    path = tmp_path / "wiki_00"
    path.write_bytes(b'<doc id="7" title="Nul">\nNul\nThe first\x00 sentence is here. The sec\x00\x00ond one.\n'
                     b"</doc>\n")
    stats = CorpusStats()
    documents = list(read_wikiextractor([path], stats))
    assert documents == [{"doc_id": "7", "title": "Nul",
                          "sentences": ["The first sentence is here.", "The second one."]}]
    assert stats.nul_bytes_dropped == 3
    assert "dropped 3 NUL bytes." in stats.summary()
    assert "NUL" not in CorpusStats().summary()  # said only when there were some


def test_template_debris_in_wikiextractor_is_dropped_and_counted_as_markup(tmp_path):
    """Older dumps leave unexpanded templates (``}}{{``, ``#if:``) in WikiExtractor's text."""
    path = tmp_path / "wiki_00"
    path.write_text('<doc id="7" title="Debris">\nDebris\nThe town lies on the river. It was founded in 1200.}}\n'
                    "}}{{Infobox settlement\n#if: {{{population|}}} | Population\nIt has a church. Its mayor is "
                    "elected.\n</doc>\n")
    stats = CorpusStats()
    documents = list(read_wikiextractor([path], stats))
    assert documents == [{"doc_id": "7", "title": "Debris", "sentences": [
        "The town lies on the river.", "It has a church.", "Its mayor is elected."]}]
    assert (stats.markup_sentences_dropped, stats.paragraphs, stats.sentences) == (3, 2, 3)
    assert "0 markup lines and 3 sentences of template markup; " in stats.summary()


def test_nul_bytes_in_wikitext_are_dropped_and_counted(tmp_path):
    path = tmp_path / "wiki.raw"
    path.write_bytes(b" = T\x00itle = \n Some\x00 text .\n")
    stats = CorpusStats()
    assert list(read_wikitext([path], stats)) == [{"doc_id": "wiki.raw:1", "title": "Title",
                                                   "sentences": ["Some text ."]}]
    assert stats.nul_bytes_dropped == 2


# ---------------------------------------------------------------------------------------------------------------
# GLUE files with empty sentences
# ---------------------------------------------------------------------------------------------------------------


def _rte_file(tmp_path: Path, rows: int, empty_at: set[int]) -> Path:
    """An RTE train file of ``rows`` rows whose sentence2 is empty at the 0-based rows ``empty_at``."""
    lines = ["index\tsentence1\tsentence2\tlabel"]
    lines += [f"{i}\tPremise number {i}.\t{'' if i in empty_at else f'Hypothesis {i}.'}\tentailment"
              for i in range(rows)]
    path = tmp_path / "train.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_few_empty_sentences_are_kept_counted_and_reported(tmp_path):
    allowed = int(MAX_EMPTY_SHARE * 200)  # 2 of 200
    path = _rte_file(tmp_path, 200, {5, 50})
    examples, report = read_tsv(get_task("rte"), path)
    assert allowed == 2 and len(examples) == 200
    assert [example.text_b for example in examples if not example.text_b] == ["", ""]
    assert report.empty == {"sentence2": 2} and report.first_empty == {"sentence2": [7, 52]}
    assert report.summary() == f"{path}: read 200 of 200 rows, skipped 0; kept 2 with an empty sentence2 (lines 7, 52)"


def test_a_file_with_many_empty_sentences_is_refused(tmp_path):
    path = _rte_file(tmp_path, 200, set(range(1, 200, 2)))  # half of them, as in the damaged file found
    with pytest.raises(BvrError) as error:
        read_tsv(get_task("rte"), path)
    assert one_line(error) == (f"{path}: 100 of 200 rows have an empty sentence2 (the first at line 3), more than "
                               "1%. the file looks damaged: download the task's files again")


def test_one_empty_sentence_too_many_is_refused(tmp_path):
    path = _rte_file(tmp_path, 200, {0, 1, 2})  # 3 > 1% of 200
    with pytest.raises(BvrError, match=r"3 of 200 rows have an empty sentence2 \(the first at line 2\)"):
        read_tsv(get_task("rte"), path)


# ---------------------------------------------------------------------------------------------------------------
# Model folders
# ---------------------------------------------------------------------------------------------------------------

SENTENCES = ["the cat sat on the mat .", "a dog ran in the park today .", "paris is the capital of france ."] * 3
MAX_POSITIONS = 24


@pytest.fixture(scope="module")
def tokenizers():
    return {family: train_tokenizer(family, SENTENCES, vocab_size=300, min_frequency=1, show_progress=False)
            for family in ("bert", "roberta")}


def tiny_folder(folder: Path, cls_name: str, tokenizer, tokenizer_family: str, **config) -> Path:
    """Save a tiny transformers model of class ``cls_name`` and a tokenizer into ``folder``."""
    roberta = cls_name.startswith("Roberta")
    defaults = {"vocab_size": 320, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2,
                "intermediate_size": 20, "max_position_embeddings": MAX_POSITIONS + (2 if roberta else 0),
                "pad_token_id": 1 if roberta else 0}
    config_cls = transformers.RobertaConfig if roberta else transformers.BertConfig
    torch.manual_seed(0)
    model = getattr(transformers, cls_name)(config_cls(**(defaults | config))).eval()
    model.save_pretrained(folder)
    save_tokenizer(tokenizer, tokenizer_family, folder)
    return folder


@pytest.fixture(scope="module")
def encoder_only(tmp_path_factory, tokenizers) -> Path:
    return tiny_folder(tmp_path_factory.mktemp("encoder-only"), "BertModel", tokenizers["bert"], "bert")


@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory, tokenizers) -> Path:
    return tiny_folder(tmp_path_factory.mktemp("mlm"), "BertForMaskedLM", tokenizers["bert"], "bert")


@pytest.mark.parametrize(("cls_name", "family", "config", "message"), [
    ("RobertaForMaskedLM", "roberta", {"vocab_size": 290}, "the tokenizer has 300 ids but the model only 290 embedding "
     "rows"),
    ("BertForMaskedLM", "bert", {"pad_token_id": 3}, "the tokenizer's padding token is id 0 but config.json says "
     "pad_token_id 3"),
], ids=["vocabulary-larger-than-embeddings", "other-padding-id"])
def test_a_tokenizer_that_does_not_fit_the_embeddings_is_refused(tmp_path, tokenizers, cls_name, family, config,
                                                                  message):
    folder = tiny_folder(tmp_path, cls_name, tokenizers[family], family, **config)
    with pytest.raises(BvrError) as error:
        load_pretrained(folder)
    assert one_line(error) == f"{folder}: {message}. use the tokenizer saved with the model"


@pytest.mark.parametrize("record", [True, False], ids=["bvr-record", "tokenizer-json-only"])
def test_a_roberta_tokenizer_in_a_bert_folder_is_refused(tmp_path, tokenizers, record):
    folder = tiny_folder(tmp_path, "BertForMaskedLM", tokenizers["roberta"], "roberta")
    if not record:  # the family then comes from the tokenizer's model type (BPE)
        (folder / "bvr_tokenizer.json").unlink()
    with pytest.raises(BvrError) as error:
        load_pretrained(folder)
    assert one_line(error) == (
        f"{folder}: a roberta tokenizer (<s>=0, <pad>=1, </s>=2, <unk>=3, <mask>=4) in a bert model folder whose "
        "padding id is 0: the model's special tokens map to other ids ([PAD]=missing, [UNK]=missing, [CLS]=missing, "
        "[SEP]=missing, [MASK]=missing). use the tokenizer saved with the model")


def test_a_byte_level_bpe_beside_berts_encoder_loads_as_the_vocabulary_ablation_writes_it(tmp_path, tokenizers):
    """The vocabulary ablation's BPE arm: BERT's encoder family, a roberta tokenizer, the padding id taken from it."""
    folder = tiny_folder(tmp_path, "BertForMaskedLM", tokenizers["roberta"], "roberta", pad_token_id=1)
    loaded = load_pretrained(folder)
    assert (loaded.family, loaded.model.config.family, loaded.model.config.pad_token_id) == ("roberta", "bert", 1)


def test_a_truncated_safetensors_file_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path, tokenizers):
    folder = tiny_folder(tmp_path, "BertForMaskedLM", tokenizers["bert"], "bert")
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # an interrupted copy
    code, _, err = run_main(monkeypatch, capsys, "fill-mask", str(folder), "the [MASK] sat")
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith(f"error: {weights}: cannot read the weights (")
    assert err.endswith("); the file is truncated or corrupt. download or copy the model folder again\n")


def test_an_encoder_only_folder_loads_for_fine_tuning_with_the_encoders_weights(encoder_only):
    pretrained = load_pretrained(encoder_only, need_mlm_head=False)
    assert not pretrained.model.has_mlm_head
    reference = transformers.BertModel.from_pretrained(encoder_only).eval()
    ids = torch.tensor([[2, 10, 11, 12, 3, 0]])  # (batch, seq)
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    types = torch.zeros_like(ids)
    with torch.no_grad():
        ours = pretrained.model.encoder(ids, mask, types)  # (batch, seq, hidden)
        theirs = reference(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state
    torch.testing.assert_close(ours[:, :5], theirs[:, :5], atol=1e-5, rtol=1e-5)


def test_fill_mask_on_an_encoder_only_folder_says_it_has_no_mlm_head(monkeypatch, capsys, encoder_only):
    code, _, err = run_main(monkeypatch, capsys, "fill-mask", str(encoder_only), "the [MASK] sat")
    assert code == 2
    assert err == (f"error: {encoder_only}: no MLM head: an encoder-only model (no cls.predictions.* weights). "
                   "fill-mask, BLiMP and export need a masked-LM folder (BertForMaskedLM, RobertaForMaskedLM); "
                   "fine-tuning and probing accept this one\n")
    with pytest.raises(BvrError, match="no MLM head: an encoder-only model cannot fill masks"):
        fill_mask(load_pretrained(encoder_only, need_mlm_head=False), "the [MASK] sat")


def test_finetune_accepts_an_encoder_only_folder_and_names_a_missing_train_file(monkeypatch, capsys, tmp_path,
                                                                                 encoder_only):
    data = tmp_path / "data"
    (data / "glue" / "RTE").mkdir(parents=True)
    (data / "glue" / "RTE" / "dev.tsv").write_text((GLUE / "RTE" / "dev.tsv").read_text())  # no train.tsv
    code, _, err = run_main(monkeypatch, capsys, "finetune", "--task", "rte", "--checkpoint", str(encoder_only),
                            "--seeds", "1", "--set", f"finetune.max_length={MAX_POSITIONS}", "--data-dir", str(data),
                            "--output-dir", str(tmp_path / "out"))
    assert code == 2  # past the weights (no "missing 5: cls.predictions..."), stopped at the data
    assert err == (f"error: {data}/glue/RTE/train.tsv: no such file: the data folder {data} has no glue/RTE/train.tsv. "
                   f"put rte's files in {data}/glue/RTE/, or pass --data-dir (or set BVR_DATA_DIR to) a folder that "
                   "holds glue/\n")


def test_a_missing_task_file_names_the_path_and_the_data_folder(tmp_path):
    with pytest.raises(BvrError) as error:
        task_file(get_task("sst2"), tmp_path, "dev.tsv")
    assert one_line(error) == (
        f"{tmp_path}/glue/SST-2/dev.tsv: no such file: the data folder {tmp_path} has no glue/SST-2/dev.tsv. put "
        f"sst2's files in {tmp_path}/glue/SST-2/, or pass --data-dir (or set BVR_DATA_DIR to) a folder that holds "
        "glue/")


# ---------------------------------------------------------------------------------------------------------------
# bvr fill-mask: --top-k and the text's length
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("top_k", ["0", "-3"])
def test_fill_mask_top_k_below_one_is_one_line_and_exit_2(monkeypatch, capsys, masked_lm, top_k):
    code, _, err = run_main(monkeypatch, capsys, "fill-mask", str(masked_lm), "the [MASK] sat", "--top-k", top_k)
    assert (code, err) == (2, f"error: --top-k: must be at least 1, got {top_k}\n")


def test_fill_mask_text_longer_than_the_positions_is_one_line_and_exit_2(monkeypatch, capsys, masked_lm,
                                                                           tokenizers):
    text = "the [MASK] sat on the mat . " * 4
    tokens = len(tokenizers["bert"].encode(text).ids)
    assert tokens > MAX_POSITIONS
    code, _, err = run_main(monkeypatch, capsys, "fill-mask", str(masked_lm), text)
    assert code == 2
    assert err == (f"error: text: the text is {tokens} tokens long (special tokens included), more than the model's "
                   f"limit of {MAX_POSITIONS}. shorten the text around the mask\n")


def test_fill_mask_text_at_the_limit_still_predicts(masked_lm, tokenizers):
    words = "the [MASK] sat on the mat . " * 4
    text = " ".join(words.split()[: MAX_POSITIONS - 2])  # [CLS] and [SEP] fill the rest
    assert len(tokenizers["bert"].encode(text).ids) == MAX_POSITIONS
    predictions = fill_mask(load_pretrained(masked_lm), text, top_k=2)
    assert len(predictions) == text.count("[MASK]") and all(len(top) == 2 for top in predictions)
