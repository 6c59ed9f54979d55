"""Bad data files at the command line: a corrupt or missing task file, a CoNLL file of the wrong shape, files not in
UTF-8, SQuAD answers off their offsets, a corpus with nothing (or too little) in it, or too little for one optimiser
step. Each is one line on stderr naming the file (and line where there is one) or the key, and what to do, exit
status 2, before any training."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.reliability.conftest import FIXTURES, copy_task, error_line
from tests.reliability.test_runs import PRETRAIN
from tests.test_prepare import write_wiki_corpus

TINY = ["--seeds", "1", "--set", "finetune.epochs=1", "--set", "finetune.batch_size=2",
        "--set", "finetune.max_length=64"]


@pytest.fixture
def finetune(bvr, checkpoint, tmp_path, monkeypatch):
    """``bvr finetune --task TASK`` of the tiny checkpoint on ``tmp_path/data``, in ``tmp_path``."""
    monkeypatch.chdir(tmp_path)

    def run(task: str, *extra: str):
        return bvr("finetune", "--task", task, "--checkpoint", checkpoint, "--data-dir", tmp_path / "data",
                   "--output-dir", tmp_path / "out", *TINY, *extra)

    return run


def _refused(result) -> str:
    code, _, err = result
    assert code == 2
    return error_line(err)


def test_a_glue_row_with_too_many_columns_names_the_file_and_line(finetune, tmp_path):
    train = copy_task(tmp_path / "data", "glue/SST-2") / "glue" / "SST-2" / "train.tsv"
    train.write_text("sentence\tlabel\na fine film\t1\textra\n")
    assert _refused(finetune("sst2")) == (f"{train}: no examples could be read ({train}: read 0 of 1 rows, skipped "
                                          "1 (more than 2 columns: 1 at line 2))")


def test_a_glue_label_not_of_the_task_names_the_line_and_the_labels(finetune, tmp_path):
    train = copy_task(tmp_path / "data", "glue/SST-2") / "glue" / "SST-2" / "train.tsv"
    train.write_text("sentence\tlabel\na fine film\t1\na dull film\tmaybe\n")
    assert _refused(finetune("sst2")) == (f"{train}:3: unknown label 'maybe' for task 'sst2'. expected one of: "
                                          "negative, positive (or their ids 0 to 1)")


def test_a_missing_glue_file_says_which_folder_to_pass(finetune, tmp_path):
    dev = copy_task(tmp_path / "data", "glue/SST-2") / "glue" / "SST-2" / "dev.tsv"
    dev.unlink()
    data = tmp_path / "data"
    assert _refused(finetune("sst2")) == (
        f"{dev}: no such file: the data folder {data} has no glue/SST-2/dev.tsv. put sst2's files in "
        f"{data}/glue/SST-2/, or pass --data-dir (or set BVR_DATA_DIR to) a folder that holds glue/")


def _conll_refused(finetune, tmp_path, split: str, content: str | bytes) -> tuple[Path, str]:
    """Fine-tune on the fixture CoNLL task with one split's file replaced by ``content``: that file and the one line
    the refusal printed."""
    path = copy_task(tmp_path / "data", "conll") / "conll2003" / f"{split}.txt"
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    return path, _refused(finetune("conll2003"))


def test_a_conll_file_of_two_columns_names_the_line(finetune, tmp_path):
    train, line = _conll_refused(finetune, tmp_path, "train", "-DOCSTART- -X- -X- O\n\nPeter B-PER\nmet O\n")
    assert line == (f"{train}:3: 2 of 2 token lines have fewer than 4 columns (first at line 3). CoNLL-2003 lines are "
                    "'token POS chunk NER', separated by spaces; pass n_columns for other layouts")


def test_a_conll_file_not_in_utf8_names_the_line_and_how_to_convert(finetune, tmp_path):
    valid, line = _conll_refused(finetune, tmp_path, "valid",
                                 "Peter NNP B-NP B-PER\nMüller NNP I-NP I-PER\n".encode("latin-1"))
    assert line == (f"{valid}:2: not UTF-8 (invalid start byte at byte 2 of the line). convert the file to UTF-8 (e.g. "
                    "iconv -f latin1 -t utf-8)")


def test_a_conll_split_without_sentences_is_refused_as_a_header_only_glue_file(finetune, tmp_path):
    test, line = _conll_refused(finetune, tmp_path, "test", "-DOCSTART- -X- -X- O\n\n-DOCSTART- -X- -X- O\n\n")
    assert line == (f"{test}: no sentences could be read ({test}: 2 documents, 0 sentences, 0 tokens, scheme IOB2). "
                    "a CoNLL file holds 'token POS chunk NER' lines, a blank line after each sentence; download the "
                    "task's files again")


def test_an_unknown_conll_tag_names_the_file_and_line(finetune, tmp_path):
    lines = (FIXTURES / "conll" / "sample.txt").read_text().splitlines(keepends=True)
    lines[3] = "rejects VBZ B-VP B-DATE\n"  # a tag of another scheme (OntoNotes), in the dev split only
    valid, line = _conll_refused(finetune, tmp_path, "valid", "".join(lines))
    assert line == (f"{valid}:4: unknown tag 'B-DATE'. expected one of: O, B-PER, I-PER, B-ORG, I-ORG, B-LOC, I-LOC, "
                    "B-MISC, I-MISC")


def test_a_glue_file_not_in_utf8_names_the_line_and_how_to_convert(finetune, tmp_path):
    train = copy_task(tmp_path / "data", "glue/SST-2") / "glue" / "SST-2" / "train.tsv"
    train.write_bytes("sentence\tlabel\na fine film\t1\na café film\t0\n".encode("latin-1"))
    assert _refused(finetune("sst2")) == (f"{train}:3: not UTF-8 (invalid continuation byte at byte 6 of the line). "
                                          "convert the file to UTF-8 (e.g. iconv -f latin1 -t utf-8)")


def test_a_blimp_file_not_in_utf8_names_the_line_and_how_to_convert(bvr, checkpoint, tmp_path):
    paradigm = copy_task(tmp_path / "data", "blimp") / "blimp" / "data" / "anaphor_gender_agreement.jsonl"
    lines = paradigm.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b"Karla", "Karl\xe1".encode("latin-1"), 1)
    paradigm.write_bytes(b"".join(lines))
    column = lines[1].index(b"\xe1") + 1
    assert _refused(bvr("blimp", checkpoint, "--data-dir", tmp_path / "data")) == (
        f"{paradigm}:2: not UTF-8 (invalid continuation byte at byte {column} of the line). convert the file to UTF-8 "
        "(e.g. iconv -f latin1 -t utf-8)")


def test_a_squad_file_not_in_utf8_names_the_line_and_how_to_convert(finetune, tmp_path):
    dev = copy_task(tmp_path / "data", "squad") / "squad" / "v1.1" / "dev-v1.1.json"
    text = (FIXTURES / "squad" / "v1.1.json").read_text(encoding="utf-8")
    line = text[:text.index("Super Bowl 50 was")].count("\n") + 1
    dev.write_bytes(text.replace("Super Bowl 50 was", "Süper Bowl 50 was", 1).encode("latin-1"))
    assert _refused(finetune("squad")) == (f"{dev}:{line}: not UTF-8 (invalid start byte). SQuAD files are UTF-8 "
                                           "JSON; convert the file (e.g. iconv -f latin1 -t utf-8)")


def test_squad_answers_off_their_offsets_are_refused(finetune, tmp_path):
    dev = copy_task(tmp_path / "data", "squad") / "squad" / "v1.1" / "dev-v1.1.json"
    squad = json.loads(dev.read_text())
    squad["data"][0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = 3
    dev.write_text(json.dumps(squad))
    answers = sum(len(qa["answers"]) for article in squad["data"] for paragraph in article["paragraphs"]
                  for qa in paragraph["qas"])
    assert _refused(finetune("squad")) == (
        f"{dev}: 1 of {answers} answers are not at their answer_start in the context. answer_start counts characters "
        "of the context from 0; a file whose offsets are bytes, tokens or shifted trains a model on the wrong spans. "
        "Fix the offsets (the official files have none wrong)")


def test_a_squad_file_of_empty_questions_is_refused_as_glue_refuses_empty_texts(finetune, tmp_path):
    dev = copy_task(tmp_path / "data", "squad") / "squad" / "v1.1" / "dev-v1.1.json"
    squad = json.loads(dev.read_text())
    questions = [qa for article in squad["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    for qa in questions:
        qa["question"] = ""
    dev.write_text(json.dumps(squad))
    # windows that fit (questions may take 64 tokens, more than TINY leaves): only the questions can stop it
    assert _refused(finetune("squad", "--set", "finetune.max_length=128", "--set", "finetune.stride=32")) == (
        f"{dev}: {len(questions)} of {len(questions)} questions are empty (the first at data[0].paragraphs[0].qas[0]), "
        "more than 1%. the file looks damaged: download the task's files again")


# ---------------------------------------------------------------------------------------------------------------
# The pretraining corpus


def _doc(doc_id: int, text: str) -> str:
    return f'<doc id="{doc_id}" url="?curid={doc_id}" title="T{doc_id}">\nT{doc_id}\n\n{text}\n</doc>\n'


def _prepare(bvr, tmp_path, monkeypatch, text: str):
    folder = tmp_path / "data" / "corpus" / "wiki" / "AA"
    folder.mkdir(parents=True)
    (folder / "wiki_00").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return bvr("data", "prepare", "--data-dir", tmp_path / "data", "--output-dir", tmp_path / "out",
               "--set", "corpus.path=corpus/wiki", "--set", "tokenizer.vocab_size=400")


def test_an_empty_corpus_says_what_was_read_and_what_to_check(bvr, tmp_path, monkeypatch):
    result = _prepare(bvr, tmp_path, monkeypatch, "")
    path = tmp_path / "data" / "corpus" / "wiki"
    assert _refused(result) == (
        f"{path}: no documents found. Read 1 file(s) as wikiextractor from {path}: kept 0 documents, 0 sentences, 0 "
        "words, 0 characters. Skipped 0 empty documents, 0 heading lines and 0 markup lines; replaced 0 undecodable "
        "bytes with U+FFFD. Split 0 train / 0 validation documents. check corpus.path and corpus.source "
        "(wikiextractor, text, hf, wikitext)")


def test_a_corpus_of_two_documents_asks_for_three(bvr, tmp_path, monkeypatch):
    text = _doc(1, "One sentence here. Two here.") + _doc(2, "Three here. Four here.")
    result = _prepare(bvr, tmp_path, monkeypatch, text)
    assert _refused(result) == (
        f"{tmp_path / 'data' / 'corpus' / 'wiki'}: 2 document(s) found: too few to hold out 2 for validation and "
        "train on the rest. use a corpus of at least 3 documents (in plain text, a blank line ends a document)")


def test_plain_text_read_as_wikiextractor_says_which_source_to_set(bvr, tmp_path, monkeypatch):
    result = _prepare(bvr, tmp_path, monkeypatch, "One paragraph.\n\nAnother one.\n")
    assert _refused(result) == (f"{tmp_path / 'data' / 'corpus' / 'wiki' / 'AA' / 'wiki_00'}:1: text outside a <doc "
                                "...> block. is this WikiExtractor output? For one paragraph per line use --set "
                                "corpus.source=text")


@pytest.mark.parametrize(("key", "value", "unit"), [("batch_size", 100_000, "sequences"),
                                                    ("tokens_per_batch", 10_000_000, "tokens")])
def test_a_step_larger_than_the_training_data_is_refused_before_training(bvr, tmp_path, monkeypatch, key, value, unit):
    data = write_wiki_corpus(tmp_path / "data", documents=60)
    monkeypatch.chdir(tmp_path)
    args = [*PRETRAIN, "--set", f"training.{key}={value}", "--data-dir", data, "--output-dir", tmp_path / "out"]
    assert bvr("data", "prepare", *args)[0] == 0  # its progress bars out of the way
    code, _, err = bvr("pretrain", *args)
    held = json.loads(next((tmp_path / "out" / "cache").glob("data-*/data_stats.json")).read_text())["train"][unit]
    assert code == 2
    assert error_line(err) == (f"training.{key}: {value:,} {unit} per optimiser step, but the prepared data holds "
                               f"only {held:,} training {unit}. set it to at most {held:,}, or pretrain on a larger "
                               "corpus")
    assert not (tmp_path / "out" / "runs").exists()  # no run folder, no metrics.json claiming an epoch per step


@pytest.mark.parametrize(("option", "value", "message"), [("--count", "-1", "must be at least 1, got -1"),
                                                          ("--count", "0", "must be at least 1, got 0"),
                                                          ("--epoch", "-1", "must be at least 0 (the first epoch), "
                                                                            "got -1")],
                         ids=["count-minus-one", "count-zero", "epoch-minus-one"])
def test_data_show_checks_its_options_before_preparing_anything(bvr, tmp_path, monkeypatch, option, value, message):
    monkeypatch.chdir(tmp_path)
    data = write_wiki_corpus(tmp_path / "data", documents=10)
    code, _, err = bvr("data", "show", option, value, *PRETRAIN, "--data-dir", data, "--output-dir", tmp_path / "out")
    assert code == 2 and error_line(err) == f"{option}: {message}"
    assert not (tmp_path / "out").exists()


def test_a_corpus_hardly_split_into_words_is_one_warning_line(tmp_path, capsys):
    from bvr.corpus.store import build_corpus

    normal = "\n\n".join(f"Document {i} has a few plain words in it. It ends here." for i in range(4))
    text = tmp_path / "one-line.txt"
    text.write_text(normal + "\n\n" + "x" * 100_000 + "\n", encoding="utf-8")
    build_corpus("text", text, tmp_path / "corpus", progress=False)
    err = capsys.readouterr().err
    found = re.fullmatch(rf"{re.escape(str(text))}: warning: ([\d,]+) characters in (\d+) word\(s\), [\d,]+ "
                         r"characters a word \(English: about 6\): the tokenizer reads a word longer than 100 "
                         r"characters as one unknown token, so most of this text will not reach the model\. is it text "
                         r"with spaces between words\?\n", err)
    assert found, err
    characters, words = int(found.group(1).replace(",", "")), int(found.group(2))
    assert characters > 100_000 and 40 < words < 60  # the x line is one word
    text.write_text(normal + "\n", encoding="utf-8")
    build_corpus("text", text, tmp_path / "corpus", progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(("shard", "damage"), [("data-*/instances/train/*.arrow", "cut"),
                                               ("corpus-*/documents/validation/*.arrow", "deleted")])
def test_a_damaged_arrow_file_in_the_data_cache_is_named_and_built_again(bvr, tmp_path, monkeypatch, shard, damage):
    data = write_wiki_corpus(tmp_path / "data", documents=10)
    monkeypatch.chdir(tmp_path)
    args = ["data", "prepare", *PRETRAIN, "--data-dir", data, "--output-dir", tmp_path / "out"]
    assert bvr(*args)[0] == 0
    path = next((tmp_path / "out" / "cache").glob(shard))
    stage, whole = path.relative_to(tmp_path / "out" / "cache").parts[0], path.read_bytes()
    if damage == "cut":  # a copy or a disk that stopped half-way
        path.write_bytes(whole[: len(whole) // 2])
        problem = f"cut short ({len(whole) // 2:,} bytes, without Arrow's end-of-stream marker)"
    else:
        path.unlink()
        problem = "missing"
    code, _, err = bvr(*args)
    assert code == 0
    assert [line for line in err.splitlines() if "built again" in line] == [f"{stage}: {path}: {problem}; built again"]
    assert path.read_bytes() == whole  # the same bytes again: the stages after it are reused
    code, _, err = bvr(*args)
    assert code == 0 and "built again" not in err
