"""Corpus readers, sentence splitting, the train/validation split and the on-disk corpus, on small fixtures."""

from __future__ import annotations

import gzip
import hashlib
import json
from dataclasses import asdict
from pathlib import Path

import datasets
import pytest

from bvr.config import CORPUS_SOURCES
from bvr.corpus import (
    READERS,
    SOURCES,
    CorpusStats,
    HoldOut,
    build_corpus,
    is_heading,
    is_markup,
    is_validation,
    load_corpus,
    read_hf_dataset,
    read_plain_text,
    read_wikiextractor,
    resolve_files,
    split_sentences,
)
from bvr.errors import BvrError

FIXTURES = Path(__file__).parent / "fixtures" / "corpus"
WIKI = FIXTURES / "wiki"
PLAIN = FIXTURES / "plain.txt"

WIKI_DOCUMENTS = [
    {
        "doc_id": "101",
        "title": "Ada Lovelace",
        "sentences": [
            "Ada Lovelace (1815–1852) was an English mathematician.",
            "She worked with Dr. Charles Babbage on the Analytical Engine.",
            "She was born in London.",
            "Her parents were Lord Byron & Anne Isabella Milbanke.",
        ],
    },
    {
        "doc_id": "103",
        "title": "Analytical Engine",
        "sentences": [
            "The Analytical Engine was a proposed mechanical computer designed by Charles Babbage.",
            "Its store held 1,000 numbers of 40 digits, about 16.6 kB in modern terms.",
            "The mill did the arithmetic...",
        ],
    },
    {
        "doc_id": "201",
        "title": "J. R. R. Tolkien",
        "sentences": [
            "J. R. R. Tolkien was an English writer.",
            'He wrote "The Hobbit."',
            "It was published in the U.S. in 1938.",
        ],
    },
]
PLAIN_DOCUMENTS = [
    {
        "doc_id": "plain.txt:1",
        "title": "",
        "sentences": [
            "The first document has one paragraph.",
            "It has two sentences.",
            "Its second paragraph is short.",
        ],
    },
    {
        "doc_id": "plain.txt:6",
        "title": "",
        "sentences": ["The second document starts after blank lines.", "Mr. Smith wrote it."],
    },
]


def _sentences(documents: list[dict]) -> list[str]:
    return [sentence for document in documents for sentence in document["sentences"]]


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _wiki_doc(doc_id: str, title: str, *lines: str) -> str:
    body = "\n".join([title, "", *lines])
    return f'<doc id="{doc_id}" url="?curid={doc_id}" title="{title}">\n{body}\n</doc>\n'


# ---------------------------------------------------------------------------------------------------------------
# Sentence splitting, headings, markup
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", []),
        ("   ", []),
        ("One sentence without a stop", ["One sentence without a stop"]),
        ("It rained. It poured! Did it? Yes.", ["It rained.", "It poured!", "Did it?", "Yes."]),
        # Abbreviations before names and numbers.
        ("Dr. Smith met Mr. Jones. They talked.", ["Dr. Smith met Mr. Jones.", "They talked."]),
        ("See Fig. 3 and No. 5 on p. 12. Then stop.", ["See Fig. 3 and No. 5 on p. 12.", "Then stop."]),
        ("He lived in St. Louis. The city grew.", ["He lived in St. Louis.", "The city grew."]),
        ("Born c. 1500 (d. 1560), he ruled.", ["Born c. 1500 (d. 1560), he ruled."]),
        # Initials, including behind a no-break space.
        ("J. R. R. Tolkien wrote it.", ["J. R. R. Tolkien wrote it."]),
        ("A. A. Milne wrote it.", ["A. A. Milne wrote it."]),
        ("Music by C.\xa0P. E. Bach. It was new.", ["Music by C.\xa0P. E. Bach.", "It was new."]),
        # Dotted acronyms end a sentence only before a common opener.
        ("He served in the U.S. Army. He left.", ["He served in the U.S. Army.", "He left."]),
        ("He moved to the U.S. He stayed.", ["He moved to the U.S.", "He stayed."]),
        ("Some fruit, e.g. Apples and pears.", ["Some fruit, e.g. Apples and pears."]),
        ("Tools, nails, etc. The rest was sold.", ["Tools, nails, etc.", "The rest was sold."]),
        # Decimals, versions and addresses never split (no whitespace after the stop).
        ("It weighs 3.5 kg. Version 2.0.1 shipped.", ["It weighs 3.5 kg.", "Version 2.0.1 shipped."]),
        ("Visit example.com today.", ["Visit example.com today."]),
        # Lower case after the stop does not start a sentence.
        ("Pay approx. ten dollars.", ["Pay approx. ten dollars."]),
        # Ellipses.
        ("He waited... and waited. Then... Nothing.", ["He waited... and waited.", "Then...", "Nothing."]),
        ("He waited… Then he left.", ["He waited…", "Then he left."]),
        # Closing quotes and brackets stay with their sentence; opening ones start the next.
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("It ended (finally.) Next came more.", ["It ended (finally.)", "Next came more."]),
        ('It ended. "Why?" she asked.', ["It ended.", '"Why?" she asked.']),
        ("It ended. (It did.) Next.", ["It ended.", "(It did.)", "Next."]),
        ("It ended. 1990 was a good year.", ["It ended.", "1990 was a good year."]),
        # List enumerators open a sentence.
        ("1. First item. 2. Second item.", ["1. First item.", "2. Second item."]),
        ("IV. Later years were quiet.", ["IV. Later years were quiet."]),
        # Non-ASCII capitals start sentences too.
        ("Er kam. Über Nacht blieb er.", ["Er kam.", "Über Nacht blieb er."]),
    ],
)
def test_split_sentences(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_split_sentences_keeps_every_character_but_whitespace() -> None:
    text = 'Dr. No. 5 said "Hi." (Then.) It was 3.5 p.m. in the U.S. Army... Fine! Ok? Yes.'
    assert "".join(split_sentences(text)).replace(" ", "") == text.replace(" ", "")


@pytest.mark.parametrize(
    ("line", "first", "expected"),
    [
        ("Career.", False, True),
        ("Early life and education.", False, True),
        ("Fort Lauderdale City Commissioner (2003–2006).", False, True),
        ("He died in 1990.", False, False),
        ("This species was described from Ghana.", False, False),
        ("A long line with many words that goes on well past the heading limit.", False, False),
        ("Two sentences. In one line.", False, False),
        ("Works:", False, False),
        ("Events in the year 2018 in Nepal.", True, False),
        ("Results.", True, True),
    ],
)
def test_is_heading(line: str, first: bool, expected: bool) -> None:
    assert is_heading(line, first=first) is expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("! colspan=3 | Career", True),
        ("|-", True),
        ("{| class=wikitable", True),
        ("<onlyinclude></onlyinclude>", True),
        ("https://example.com/a/b", True),
        ("See https://example.com for more.", False),
        ("Hello! How are you?", False),
    ],
)
def test_is_markup(line: str, expected: bool) -> None:
    assert is_markup(line) is expected


# ---------------------------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------------------------


def test_resolve_files_file_and_sorted_folder(tmp_path: Path) -> None:
    for name in ["b/2", "a/10", "a/9", ".hidden", ".git/config", "b/.swp"]:
        _write(tmp_path / name, "x")
    assert resolve_files(tmp_path / "a" / "9") == [tmp_path / "a" / "9"]
    assert resolve_files(tmp_path) == [tmp_path / "a" / "10", tmp_path / "a" / "9", tmp_path / "b" / "2"]


def test_resolve_files_missing_path(tmp_path: Path) -> None:
    with pytest.raises(BvrError, match="no such file") as error:
        resolve_files(tmp_path / "nope")
    assert error.value.where == str(tmp_path / "nope")


def test_resolve_files_empty_folder(tmp_path: Path) -> None:
    _write(tmp_path / "empty" / ".hidden", "x")
    with pytest.raises(BvrError, match="no .*files") as error:
        resolve_files(tmp_path / "empty")
    assert error.value.where == str(tmp_path / "empty")


# ---------------------------------------------------------------------------------------------------------------
# WikiExtractor
# ---------------------------------------------------------------------------------------------------------------


def test_read_wikiextractor_fixture() -> None:
    stats = CorpusStats()
    documents = list(read_wikiextractor(resolve_files(WIKI), stats))
    assert documents == WIKI_DOCUMENTS
    sentences = _sentences(WIKI_DOCUMENTS)
    assert (stats.files, stats.documents, stats.empty_documents) == (2, 3, 2)
    assert (stats.paragraphs, stats.sentences, stats.headings_dropped, stats.markup_lines_dropped) == (5, 10, 4, 1)
    assert stats.words == 82 == sum(len(sentence.split()) for sentence in sentences)
    assert stats.characters == 477 == sum(len(sentence) for sentence in sentences)
    assert stats.undecodable_bytes == 0


def test_read_wikiextractor_plain_text_names_file_and_line() -> None:
    with pytest.raises(BvrError, match="outside a <doc") as error:
        list(read_wikiextractor([PLAIN], CorpusStats()))
    assert error.value.where == f"{PLAIN}:1"
    assert "--set corpus.source=text" in str(error.value)


def test_read_wikiextractor_unclosed_doc(tmp_path: Path) -> None:
    path = _write(tmp_path / "wiki_00", _wiki_doc("1", "One", "Text.") + '<doc id="2" title="Two">\nTwo\nMore text.\n')
    with pytest.raises(BvrError, match="never closed") as error:
        list(read_wikiextractor([path], CorpusStats()))
    assert error.value.where == f"{path}:6"


def test_read_wikiextractor_nested_doc(tmp_path: Path) -> None:
    path = _write(tmp_path / "wiki_00", '<doc id="1" title="One">\nOne\n<doc id="2" title="Two">\n</doc>\n')
    with pytest.raises(BvrError, match="inside the <doc> of line 1") as error:
        list(read_wikiextractor([path], CorpusStats()))
    assert error.value.where == f"{path}:3"


def test_read_wikiextractor_stray_close(tmp_path: Path) -> None:
    path = _write(tmp_path / "wiki_00", _wiki_doc("1", "One", "Text.") + "\n</doc>\n")
    with pytest.raises(BvrError, match="without an opening") as error:
        list(read_wikiextractor([path], CorpusStats()))
    assert error.value.where == f"{path}:7"


def test_read_wikiextractor_undecodable_bytes(tmp_path: Path) -> None:
    text = _wiki_doc("1", "One", "Caf\xe9 au lait is good. It is warm.").encode("utf-8")
    path = _write(tmp_path / "wiki_00", text.replace("\xe9".encode(), b"\xe9\xff"))
    stats = CorpusStats()
    documents = list(read_wikiextractor([path], stats))
    assert documents[0]["sentences"] == ["Caf\ufffd\ufffd au lait is good.", "It is warm."]
    assert stats.undecodable_bytes == 2


def test_read_wikiextractor_compressed(tmp_path: Path) -> None:
    path = tmp_path / "wiki_00.gz"
    path.write_bytes(gzip.compress(_wiki_doc("7", "Seven", "Seven is a number.").encode()))
    documents = list(read_wikiextractor([path], CorpusStats()))
    assert documents == [{"doc_id": "7", "title": "Seven", "sentences": ["Seven is a number."]}]


# ---------------------------------------------------------------------------------------------------------------
# Plain text
# ---------------------------------------------------------------------------------------------------------------


def test_read_plain_text_fixture() -> None:
    stats = CorpusStats()
    documents = list(read_plain_text([PLAIN], stats))
    assert documents == PLAIN_DOCUMENTS
    sentences = _sentences(PLAIN_DOCUMENTS)
    assert (stats.files, stats.documents, stats.empty_documents, stats.paragraphs, stats.sentences) == (1, 2, 0, 3, 5)
    assert stats.words == sum(len(sentence.split()) for sentence in sentences)
    assert stats.characters == sum(len(sentence) for sentence in sentences)


def test_read_plain_text_ids_relative_to_root(tmp_path: Path) -> None:
    _write(tmp_path / "a" / "part", "Alpha one.\n")
    _write(tmp_path / "b" / "part", "\nBeta one.\n\nBeta two.")
    documents = list(read_plain_text(resolve_files(tmp_path), CorpusStats(), root=tmp_path))
    assert [document["doc_id"] for document in documents] == ["a/part:1", "b/part:2", "b/part:4"]


def test_read_plain_text_refuses_binary(tmp_path: Path) -> None:
    path = _write(tmp_path / "blob.bin", b"Text.\nmore\x00bytes\n")
    with pytest.raises(BvrError, match="binary") as error:
        list(read_plain_text([path], CorpusStats()))
    assert error.value.where == f"{path}:2"


# ---------------------------------------------------------------------------------------------------------------
# Hugging Face datasets
# ---------------------------------------------------------------------------------------------------------------

HF_ROWS = {
    "id": ["x1", "x2", "x3"],
    "title": ["First", "Second", "Blank"],
    "text": ["One here. Two here.\nA second paragraph.", "Another document.", "  \n"],
}


def test_read_hf_saved_dataset_dict(tmp_path: Path) -> None:
    other = datasets.Dataset.from_dict({"id": ["t"], "title": [""], "text": ["Not read."]})
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(HF_ROWS), "test": other}).save_to_disk(tmp_path / "ds")
    stats = CorpusStats()
    documents = list(read_hf_dataset(str(tmp_path / "ds"), stats))
    assert documents == [
        {"doc_id": "x1", "title": "First", "sentences": ["One here.", "Two here.", "A second paragraph."]},
        {"doc_id": "x2", "title": "Second", "sentences": ["Another document."]},
    ]
    assert (stats.documents, stats.empty_documents, stats.paragraphs, stats.sentences) == (2, 1, 3, 4)


def test_read_hf_saved_dataset_without_id_or_title(tmp_path: Path) -> None:
    datasets.Dataset.from_dict({"body": ["Alpha.", "Beta."]}).save_to_disk(tmp_path / "ds")
    documents = list(read_hf_dataset(str(tmp_path / "ds"), CorpusStats(), text_column="body"))
    assert documents == [
        {"doc_id": "train:0", "title": "", "sentences": ["Alpha."]},
        {"doc_id": "train:1", "title": "", "sentences": ["Beta."]},
    ]


def test_read_hf_missing_column_names_it_and_the_columns(tmp_path: Path) -> None:
    datasets.Dataset.from_dict(HF_ROWS).save_to_disk(tmp_path / "ds")
    with pytest.raises(BvrError, match=r"no column 'content'; the columns are \['id', 'text', 'title'\]"):
        list(read_hf_dataset(str(tmp_path / "ds"), CorpusStats(), text_column="content"))


def test_read_hf_column_that_is_not_text(tmp_path: Path) -> None:
    datasets.Dataset.from_dict({"text": [["a", "b"]]}).save_to_disk(tmp_path / "ds")
    with pytest.raises(BvrError, match="holds list, not text"):
        list(read_hf_dataset(str(tmp_path / "ds"), CorpusStats()))


def test_read_hf_missing_split(tmp_path: Path) -> None:
    datasets.DatasetDict({"train": datasets.Dataset.from_dict(HF_ROWS)}).save_to_disk(tmp_path / "ds")
    with pytest.raises(BvrError, match=r"no split 'validation'; the splits are \['train'\]"):
        list(read_hf_dataset(str(tmp_path / "ds"), CorpusStats(), split="validation"))


def test_read_hf_local_json_lines(tmp_path: Path) -> None:
    rows = [{"id": 5, "content": "Alpha one. Beta two."}, {"id": 6, "content": "Gamma."}]
    path = _write(tmp_path / "rows.jsonl", "\n".join(json.dumps(row) for row in rows) + "\n")
    stats = CorpusStats()
    documents = list(read_hf_dataset(str(path), stats, text_column="content"))
    assert [document["doc_id"] for document in documents] == ["5", "6"]
    assert _sentences(documents) == ["Alpha one.", "Beta two.", "Gamma."]
    assert stats.files == 1


def test_read_hf_local_text_file_documents_between_blank_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "corpus.txt", "First doc. Line one.\nLine two.\n\nSecond doc.\n")
    documents = list(read_hf_dataset(str(path), CorpusStats()))
    assert [document["sentences"] for document in documents] == [
        ["First doc.", "Line one.", "Line two."],
        ["Second doc."],
    ]


def test_read_hf_local_data_folder(tmp_path: Path) -> None:
    _write(tmp_path / "data" / "part.jsonl", json.dumps({"text": "From a folder."}) + "\n")
    documents = list(read_hf_dataset(str(tmp_path / "data"), CorpusStats()))
    assert _sentences(documents) == ["From a folder."]


def test_read_hf_missing_local_path(tmp_path: Path) -> None:
    with pytest.raises(BvrError, match="no such file"):
        list(read_hf_dataset(str(tmp_path / "missing.jsonl"), CorpusStats()))


def test_read_hf_unreachable_hub_says_to_pass_a_local_path() -> None:
    # conftest sets HF_HUB_OFFLINE, which fails like an unreachable hub, at once.
    with pytest.raises(BvrError, match="Hugging Face hub") as error:
        list(read_hf_dataset("some-user/some-corpus", CorpusStats()))
    assert "local path" in str(error.value)
    assert error.value.where == "some-user/some-corpus"


# ---------------------------------------------------------------------------------------------------------------
# Split
# ---------------------------------------------------------------------------------------------------------------


def test_is_validation_deterministic_fractional_and_seeded() -> None:
    ids = [f"doc-{index}" for index in range(20_000)]
    chosen = [doc_id for doc_id in ids if is_validation(doc_id, 0.1, seed=0)]
    assert chosen == [doc_id for doc_id in reversed(ids) if is_validation(doc_id, 0.1, seed=0)][::-1]
    assert 1_800 < len(chosen) < 2_200
    assert chosen != [doc_id for doc_id in ids if is_validation(doc_id, 0.1, seed=1)]
    assert not any(is_validation(doc_id, 0.0, seed=0) for doc_id in ids[:1000])


def test_is_validation_is_the_documented_hash() -> None:
    # The contract, restated: changing it would reshuffle every prepared corpus's split.
    for index in range(100):
        digest = hashlib.blake2b(f"7\0doc-{index}".encode(), digest_size=8).digest()
        assert is_validation(f"doc-{index}", 0.3, seed=7) is (int.from_bytes(digest, "big") < 0.3 * 2**64)


# ---------------------------------------------------------------------------------------------------------------
# Build and load
# ---------------------------------------------------------------------------------------------------------------


def test_build_corpus_round_trip(tmp_path: Path) -> None:
    out = tmp_path / "corpus"
    stats = build_corpus("wikiextractor", WIKI, out, held_out=HoldOut(0.5, seed=3), progress=False)
    corpus = load_corpus(out)
    assert set(corpus) == {"train", "validation"}
    assert corpus["train"].features == corpus["validation"].features
    assert set(corpus["train"].column_names) == {"doc_id", "title", "sentences"}
    train, validation = corpus["train"].to_list(), corpus["validation"].to_list()
    assert {row["doc_id"] for row in train}.isdisjoint(row["doc_id"] for row in validation)
    assert sorted(train + validation, key=lambda row: row["doc_id"]) == WIKI_DOCUMENTS
    assert all(is_validation(row["doc_id"], 0.5, 3) for row in validation)
    assert (stats.train_documents, stats.validation_documents) == (len(train), len(validation))
    assert json.loads((out / "corpus_stats.json").read_text()) == asdict(stats)
    assert (stats.source, stats.documents, stats.headings_dropped, stats.empty_documents) == ("wikiextractor", 3, 4, 2)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus"]


def test_build_corpus_plain_text_and_hf(tmp_path: Path) -> None:
    stats = build_corpus("text", PLAIN, tmp_path / "text", held_out=HoldOut(0.0), progress=False)
    assert load_corpus(tmp_path / "text")["train"].to_list() == PLAIN_DOCUMENTS
    assert len(load_corpus(tmp_path / "text")["validation"]) == 0  # an empty split still loads
    assert (stats.train_documents, stats.validation_documents) == (2, 0)
    datasets.Dataset.from_dict(HF_ROWS).save_to_disk(tmp_path / "ds")
    stats = build_corpus("hf", tmp_path / "ds", tmp_path / "hf", held_out=HoldOut(0.0), progress=True)
    assert load_corpus(tmp_path / "hf")["train"]["doc_id"] == ["x1", "x2"]


def test_build_corpus_max_documents(tmp_path: Path) -> None:
    stats = build_corpus(
        "wikiextractor", WIKI, tmp_path / "out", held_out=HoldOut(0.0), max_documents=2, progress=False
    )
    assert load_corpus(tmp_path / "out")["train"]["doc_id"] == ["101", "103"]
    assert stats.stopped_at_max_documents
    assert "Stopped early" in stats.summary()


def test_build_corpus_replaces_a_corpus_but_not_other_folders(tmp_path: Path) -> None:
    out = tmp_path / "out"
    build_corpus("text", PLAIN, out, held_out=HoldOut(0.0), progress=False)
    build_corpus("wikiextractor", WIKI, out, held_out=HoldOut(0.0), progress=False)
    assert load_corpus(out)["train"]["doc_id"] == ["101", "103", "201"]
    _write(tmp_path / "precious" / "thesis.tex", "x")
    with pytest.raises(BvrError, match="not a corpus"):
        build_corpus("text", PLAIN, tmp_path / "precious", progress=False)
    assert (tmp_path / "precious" / "thesis.tex").exists()


def test_failed_build_leaves_the_old_corpus_and_no_temporary_folder(tmp_path: Path) -> None:
    out = tmp_path / "out"
    build_corpus("text", PLAIN, out, held_out=HoldOut(0.0), progress=False)
    with pytest.raises(BvrError, match="outside a <doc"):
        build_corpus("wikiextractor", PLAIN, out, progress=False)
    assert load_corpus(out)["train"].to_list() == PLAIN_DOCUMENTS
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out"]


def test_build_corpus_empty_corpus(tmp_path: Path) -> None:
    wiki = _write(tmp_path / "wiki" / "wiki_00", _wiki_doc("1", "Empty") + _wiki_doc("2", "Headings", "History."))
    with pytest.raises(BvrError, match="no documents found") as error:
        build_corpus("wikiextractor", wiki.parent, tmp_path / "out", progress=False)
    assert error.value.where == str(wiki.parent)
    assert "Skipped 2 empty documents, 1 heading lines" in str(error.value)
    assert not (tmp_path / "out").exists()


def test_build_corpus_counts_undecodable_bytes(tmp_path: Path) -> None:
    path = _write(tmp_path / "latin1.txt", "Caf\xe9 society. Na\xefve art.\n".encode("latin-1"))
    stats = build_corpus("text", path, tmp_path / "out", held_out=HoldOut(0.0), progress=False)
    assert stats.undecodable_bytes == 2
    assert load_corpus(tmp_path / "out")["train"][0]["sentences"] == ["Caf\ufffd society.", "Na\ufffdve art."]
    assert "replaced 2 undecodable bytes" in stats.summary()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"source": "pdf"}, "unknown corpus source 'pdf'"),
        ({"held_out": HoldOut(1.0)}, r"not in \[0, 1\)"),
        ({"max_documents": 0}, "not a positive number"),
    ],
)
def test_build_corpus_refuses_bad_arguments(tmp_path: Path, kwargs: dict, match: str) -> None:
    arguments = {"source": "text", "path": PLAIN, "out_dir": tmp_path / "out", "progress": False} | kwargs
    with pytest.raises(BvrError, match=match):
        build_corpus(**arguments)


def test_load_corpus_missing(tmp_path: Path) -> None:
    with pytest.raises(BvrError, match="bvr data prepare") as error:
        load_corpus(tmp_path / "nothing")
    assert error.value.where == str(tmp_path / "nothing")


def test_sources_match_the_reader_registry() -> None:
    assert SOURCES == ("wikiextractor", "text", "hf", "wikitext") == tuple(READERS) == CORPUS_SOURCES
