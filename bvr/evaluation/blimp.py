"""Zero-shot BLiMP by pseudo-log-likelihood: does the encoder prefer the grammatical sentence of each minimal pair?

BLiMP (Warstadt et al. 2020) has 67 paradigms of 1,000 minimal pairs, one file each (``data/PARADIGM.jsonl``): a
grammatical ``sentence_good`` and an ungrammatical ``sentence_bad`` that differ in one place. A model is right on a
pair when it scores the good sentence higher. A masked language model has no left-to-right probability, so each
sentence is scored by its pseudo-log-likelihood (PLL, Salazar et al. 2020, "Masked Language Model Scoring"): mask
each token in turn and sum the log-probabilities of the true tokens.

- :func:`load_blimp` reads the paradigm files, optionally a fixed subsample of each paradigm;
- :func:`pll_scores` scores sentences, batching the masked copies of many sentences;
- :func:`score_pairs` turns the scores into accuracies (per paradigm, linguistic term and field; macro and micro);
- :func:`evaluate_blimp` does all three for a :class:`~bvr.pretrained.Pretrained` model;
- :func:`published_blimp` reads the paper's per-paradigm accuracies of its four language models.

Accuracies are fractions in [0, 1], like every bvr metric. The macro accuracy (the mean over paradigms) is the
paper's headline figure; the accuracy of a linguistic term or field is likewise the mean over its paradigms, which is
how the paper's ``overall`` rows are computed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from tokenizers import Encoding, Tokenizer

from bvr.errors import BvrError
from bvr.model import PretrainingModel
from bvr.tokenization import vocab_info

if TYPE_CHECKING:
    from bvr.pretrained import Pretrained

SUMMARY_FILE = "models_summary.jsonl"
"""The release's per-paradigm accuracies of the paper's models; not a paradigm file."""

REQUIRED_KEYS = ("sentence_good", "sentence_bad", "field", "linguistics_term", "UID", "pairID")
"""Keys every line of a paradigm file must have (the release's lines carry more, which are ignored)."""

PUBLISHED_MODELS = {"ngram": "5-gram", "lstm": "LSTM", "txl": "Transformer-XL", "gpt2": "GPT-2"}
"""Columns of ``models_summary.jsonl`` and the names the paper gives the models."""

CHANCE = 0.5
"""Accuracy of a scorer that picks one sentence of each pair at random."""

DEFAULT_TOKENS_PER_BATCH = 16_384
"""Tokens (masked copies x length) per forward pass. On 2 CPU cores shared with other jobs, a 4-layer, 256-wide encoder
took 148, 118, 89, 67 and 72 s for the same 1,340 sentences with 2,048, 4,096, 8,192, 16,384 and 32,768 (fewer, larger
batches cut the per-operation cost; the time is otherwise matrix products). The largest activation is then
16,384 x intermediate_size floats (64 MB for the tiny preset, 200 MB for base)."""

_LOGITS_PER_CHUNK = 2**24
"""Most (rows x vocabulary) logits held at once (64 MB in float32): with a 50K vocabulary and a batch of very short
sentences, the head's output would otherwise be the largest tensor of the pass."""

_HINT = "use the BLiMP release's data/*.jsonl files (one JSON object a line)"


# ---------------------------------------------------------------------------------------------------------------
# Reading the pairs


@dataclass(frozen=True)
class BlimpPair:
    """One minimal pair of a BLiMP paradigm."""

    uid: str
    """The paradigm (the release's ``UID``), e.g. ``anaphor_gender_agreement``."""
    pair_id: str
    """The pair's ``pairID`` within its paradigm."""
    field: str
    """``morphology``, ``syntax``, ``semantics`` or ``syntax_semantics``."""
    term: str
    """The ``linguistics_term`` (13 of them), e.g. ``anaphor_agreement``."""
    good: str
    """The grammatical sentence."""
    bad: str
    """The ungrammatical sentence."""


def paradigm_files(folder: Path) -> list[Path]:
    """The paradigm files (``*.jsonl`` but ``models_summary.jsonl``) of a BLiMP folder, sorted by name.

    Args:
        folder: the folder of the paradigm files, the BLiMP release's folder (which holds them in ``data/``), or a
            data folder that holds ``blimp/``.

    Raises:
        BvrError: the folder does not exist or none of those places has a paradigm file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise BvrError("no such folder", where=folder, hint="pass the data folder that holds blimp/")
    for candidate in (folder, folder / "data", folder / "blimp" / "data", folder / "blimp"):
        files = sorted(p for p in candidate.glob("*.jsonl") if p.name != SUMMARY_FILE) if candidate.is_dir() else []
        if files:
            return files
    raise BvrError("no BLiMP paradigm files (PARADIGM.jsonl) here, nor in its data/, blimp/data/ or blimp/",
                   where=folder, hint="pass the data folder that holds blimp/data/*.jsonl, or that folder itself")


def _json_lines(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) of each non-blank line; bad JSON or a non-object is an error naming ``path:line``."""
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise BvrError(f"not valid JSON ({err.msg}, column {err.colno})", where=f"{path}:{number}",
                               hint=_HINT) from err
            if not isinstance(row, dict):
                raise BvrError(f"expected a JSON object, got {type(row).__name__}", where=f"{path}:{number}",
                               hint=_HINT)
            yield number, row


def _pair(row: dict[str, Any], where: str) -> BlimpPair:
    """A :class:`BlimpPair` from one line, every required key present and a non-empty string (pairID: or an int)."""
    missing = [key for key in REQUIRED_KEYS if key not in row]
    if missing:
        raise BvrError(f"missing key{'s' if len(missing) > 1 else ''} {', '.join(missing)}", where=where, hint=_HINT)
    for key in REQUIRED_KEYS:
        value = row[key]
        allowed = (str, int) if key == "pairID" else (str,)
        if isinstance(value, bool) or not isinstance(value, allowed):
            raise BvrError(f"{key} must be a string, got {json.dumps(value)}", where=where, hint=_HINT)
        if not str(value).strip():
            raise BvrError(f"{key} is empty", where=where, hint=_HINT)
    # The release spells one paradigm's field "syntax/semantics" and thirteen others' "syntax_semantics".
    return BlimpPair(uid=row["UID"], pair_id=str(row["pairID"]), field=row["field"].replace("/", "_"),
                     term=row["linguistics_term"], good=row["sentence_good"], bad=row["sentence_bad"])


def _read_paradigm(path: Path, seen: dict[tuple[str, str], str]) -> list[BlimpPair]:
    """The pairs of one file; a (paradigm, pairID) already in ``seen`` (key -> ``file:line``) is an error."""
    pairs = []
    for number, row in _json_lines(path):
        where = f"{path}:{number}"
        pair = _pair(row, where)
        key = (pair.uid, pair.pair_id)
        if key in seen:
            raise BvrError(f"pair {pair.pair_id} of paradigm {pair.uid} was already read at {seen[key]}", where=where,
                           hint="remove the duplicate file or line")
        seen[key] = where
        pairs.append(pair)
    if not pairs:
        raise BvrError("no pairs in this paradigm file", where=path, hint=_HINT)
    return pairs


def _subsample(pairs: list[BlimpPair], n: int, seed: int) -> list[BlimpPair]:
    """The ``n`` pairs with the smallest hashes of (seed, paradigm, pairID), in their original order.

    A hash of the pair's identity rather than a random permutation: the choice does not depend on the order of the
    lines or on numpy's generator, and a larger ``n`` keeps every pair a smaller one chose.
    """
    if n >= len(pairs):
        return pairs

    def rank(index: int) -> bytes:
        key = f"{seed}\0{pairs[index].uid}\0{pairs[index].pair_id}".encode()
        return hashlib.blake2b(key, digest_size=8).digest()

    chosen = sorted(sorted(range(len(pairs)), key=rank)[:n])
    return [pairs[i] for i in chosen]


def load_blimp(folder: Path, per_paradigm: int | None = None, seed: int = 0) -> list[BlimpPair]:
    """Read every BLiMP paradigm file, optionally a fixed subsample of each.

    Args:
        folder: see :func:`paradigm_files` (``DATA_DIR``, ``DATA_DIR/blimp`` or ``DATA_DIR/blimp/data``).
        per_paradigm: keep this many pairs of each paradigm (all of a paradigm that has fewer); None keeps all.
            The pairs kept are a function of ``seed`` and the pairs' identities only, so every model evaluated with
            the same ``seed`` sees the same pairs, and paired comparisons between models are possible.
        seed: which subsample.

    Returns:
        The pairs, file by file (files sorted by name), in file order within a file.

    Raises:
        BvrError: no paradigm file; a line that is not a JSON object, lacks a required key
            (:data:`REQUIRED_KEYS`) or repeats a pair (named ``file:line``); an empty file; ``per_paradigm`` < 1.
    """
    if per_paradigm is not None and per_paradigm < 1:
        raise BvrError(f"must be at least 1, got {per_paradigm}", where="per_paradigm",
                       hint="leave it out to score every pair")
    seen: dict[tuple[str, str], str] = {}
    by_paradigm: dict[str, list[BlimpPair]] = defaultdict(list)
    for path in paradigm_files(folder):
        for pair in _read_paradigm(path, seen):
            by_paradigm[pair.uid].append(pair)
    if per_paradigm is None:
        return [pair for pairs in by_paradigm.values() for pair in pairs]
    return [pair for pairs in by_paradigm.values() for pair in _subsample(pairs, per_paradigm, seed)]


# ---------------------------------------------------------------------------------------------------------------
# Pseudo-log-likelihood


class _Batch(NamedTuple):
    """Masked copies of equally long sentences: one copy per scored token, that token replaced by the mask."""

    input_ids: torch.Tensor
    """(copies, length) token ids, one mask in each row."""
    positions: torch.Tensor
    """(copies,) where each row's mask is."""
    targets: torch.Tensor
    """(copies,) the true token under each mask."""
    owners: np.ndarray
    """(copies,) index of each copy's sentence."""
    finished: int
    """Sentences whose last copy is in this batch (for progress)."""


def _check_lengths(encodings: Sequence[Encoding], sentences: Sequence[str], max_tokens: int) -> None:
    for index, (encoding, sentence) in enumerate(zip(encodings, sentences, strict=True)):
        if len(encoding.ids) > max_tokens:
            shown = sentence if len(sentence) <= 80 else sentence[:77] + "..."
            raise BvrError(f"{len(encoding.ids)} tokens, more than the model's {max_tokens} positions: {shown!r}",
                           where=f"sentence {index}",
                           hint="pseudo-log-likelihood scores whole sentences and does not truncate; shorten it")


def _masked_batches(encodings: Sequence[Encoding], mask_id: int, tokens_per_batch: int) -> Iterator[_Batch]:
    """Every masked copy of every sentence, in batches of one length (so no padding) of about ``tokens_per_batch``.

    Sentences are grouped by tokenized length and each group's copies are cut into batches of
    ``tokens_per_batch // length`` rows; a sentence's copies may straddle two batches. Copies are built batch by
    batch, so memory stays that of one batch however many sentences there are.
    """
    lengths = np.array([len(e.ids) for e in encodings])  # (sentences,)
    for length in np.unique(lengths):
        owners = np.flatnonzero(lengths == length)  # (m,) sentences of this length
        ids = np.array([encodings[i].ids for i in owners], dtype=np.int64)  # (m, length)
        # Only what the post-processor added ([CLS]/[SEP], <s>/</s>) is left unscored; [UNK] is scored, as by Salazar.
        scored = np.array([encodings[i].special_tokens_mask for i in owners]) == 0  # (m, length)
        rows, cols = np.nonzero(scored)  # (copies,) each, row-major: a sentence's copies are contiguous
        last = np.append(rows[1:] != rows[:-1], True)  # (copies,) True at each sentence's last copy
        step = max(1, tokens_per_batch // int(length))
        for start in range(0, len(rows), step):
            r, c = rows[start:start + step], cols[start:start + step]
            copies = ids[r]  # (rows, length), a fresh array
            every = np.arange(len(r))
            targets = copies[every, c]
            copies[every, c] = mask_id
            yield _Batch(torch.from_numpy(copies), torch.from_numpy(c), torch.from_numpy(targets), owners[r],
                         int(last[start:start + step].sum()))


def _target_log_probs(model: PretrainingModel, batch: _Batch, device: torch.device) -> np.ndarray:
    """log p(true token | its masked copy) of each row, (copies,) float64.

    The last layer runs only at the masked position and the vocabulary-sized head only there too. No attention mask
    (a batch has one length) and no token types (a single segment is type 0 in both families).
    """
    ids = batch.input_ids.to(device)  # (copies, length)
    rows = torch.arange(ids.shape[0], device=device)
    selected = torch.zeros(ids.shape, dtype=torch.bool, device=device)
    selected[rows, batch.positions.to(device)] = True  # one position per row, so states come one per row, in order
    states = model.encoder.forward_selected(ids, selected)  # (copies, hidden)
    targets = batch.targets.to(device)
    chunk = max(1, _LOGITS_PER_CHUNK // model.config.vocab_size)
    out = []
    for start in range(0, len(states), chunk):
        logits = model.mlm_head(states[start:start + chunk]).float()  # (chunk, vocab)
        target_logits = logits.gather(1, targets[start:start + chunk, None]).squeeze(1)  # (chunk,)
        out.append(target_logits - logits.logsumexp(dim=1))  # log_softmax at the target, one pass fewer
    return torch.cat(out).double().cpu().numpy()


@contextmanager
def _evaluating(model: torch.nn.Module) -> Iterator[None]:
    """Dropout off while scoring; the model's mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


def pll_scores(
    model: PretrainingModel,
    tokenizer: Tokenizer,
    family: str,
    sentences: Sequence[str],
    *,
    max_tokens_per_batch: int = DEFAULT_TOKENS_PER_BATCH,
    on_progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """Pseudo-log-likelihood of each sentence (Salazar et al. 2020).

    Each sentence is encoded with its special tokens; every other token is masked in turn, and the log-probability
    the model gives the true token at the mask is summed: ``PLL(s) = sum_t log p(s_t | s with s_t masked)``. A
    sentence of n scored tokens costs n forward passes of its length, so all the masked copies of all the
    sentences are batched: copies of equally long sentences fill batches of about ``max_tokens_per_batch`` tokens
    (no padding), the last layer and the MLM head run only at the masked position, under
    ``torch.inference_mode()``, on the model's device, with dropout off.

    Args:
        model: the encoder and its MLM head.
        tokenizer: the model's tokenizer (with its post-processor, which adds [CLS]/[SEP] or <s>/</s>).
        family: the tokenizer's family, "bert" or "roberta".
        sentences: the texts to score.
        max_tokens_per_batch: copies x length per forward pass (at least one copy).
        on_progress: called with the number of sentences finished after each batch.

    Returns:
        (len(sentences),) float64 PLLs, natural log; 0 for a sentence with no token to score.

    Raises:
        BvrError: a sentence is longer than the model's positions (the message quotes it; nothing is truncated).
    """
    sentences = list(sentences)
    mask_id = vocab_info(tokenizer, family).mask_id
    encodings = tokenizer.encode_batch_fast(sentences)  # with the special tokens
    _check_lengths(encodings, sentences, model.config.max_tokens)
    scores = np.zeros(len(sentences))  # (sentences,)
    device = next(model.parameters()).device
    if on_progress is not None:
        on_progress(sum(1 for e in encodings if 0 not in e.special_tokens_mask))  # nothing to score: done
    with _evaluating(model), torch.inference_mode():
        for batch in _masked_batches(encodings, mask_id, max_tokens_per_batch):
            np.add.at(scores, batch.owners, _target_log_probs(model, batch, device))
            if on_progress is not None:
                on_progress(batch.finished)
    return scores


# ---------------------------------------------------------------------------------------------------------------
# Accuracies


@dataclass(frozen=True)
class BlimpSummary:
    """A model's macro accuracy and accuracy per linguistic term, over some paradigms."""

    macro: float
    """Mean accuracy over the paradigms."""
    terms: dict[str, float]
    """Mean accuracy over each term's paradigms."""
    paradigms: int
    """How many paradigms the figures average."""


def _group_means(values: Mapping[str, float], group_of: Mapping[str, str]) -> dict[str, float]:
    """Mean of ``values`` (paradigm -> accuracy) per group (paradigm -> group), groups sorted by name."""
    members: dict[str, list[float]] = defaultdict(list)
    for paradigm, value in values.items():
        members[group_of[paradigm]].append(value)
    return {group: float(np.mean(members[group])) for group in sorted(members)}


@dataclass
class BlimpResult:
    """Scores and accuracies of one model on BLiMP; build it with :func:`score_pairs`.

    Accuracies are fractions in [0, 1]. A pair is correct when the good sentence's PLL is strictly higher than the
    bad one's; a tie counts as wrong (the release has 7 pairs whose two sentences are identical, always wrong).
    """

    pairs: list[BlimpPair]
    """The pairs scored, in the order of the arrays below."""
    good_pll: np.ndarray
    """(pairs,) PLL of each good sentence."""
    bad_pll: np.ndarray
    """(pairs,) PLL of each bad sentence."""
    correct: np.ndarray
    """(pairs,) bool, good_pll > bad_pll: per-pair correctness, for paired statistics across models."""
    paradigm_accuracy: dict[str, float]
    """Accuracy of each paradigm (UID), sorted by UID."""
    paradigm_pairs: dict[str, int]
    """Pairs scored in each paradigm."""
    term_accuracy: dict[str, float]
    """Mean paradigm accuracy of each linguistics_term."""
    field_accuracy: dict[str, float]
    """Mean paradigm accuracy of each field."""
    macro_accuracy: float
    """Mean paradigm accuracy: the paper's headline figure."""
    micro_accuracy: float
    """Share of all pairs correct (equal to the macro accuracy when every paradigm has as many pairs)."""
    seconds: float | None = None
    """Wall time of the scoring, when measured."""
    published: dict[str, BlimpSummary] = dataclasses.field(default_factory=dict)
    """The paper's models over the same paradigms (:func:`published_summaries`), when their file was found."""

    @property
    def paradigm_terms(self) -> dict[str, str]:
        """Paradigm -> linguistics_term."""
        return {pair.uid: pair.term for pair in self.pairs}

    @property
    def paradigm_fields(self) -> dict[str, str]:
        """Paradigm -> field."""
        return {pair.uid: pair.field for pair in self.pairs}

    @property
    def sentences(self) -> int:
        """Sentences scored (two per pair)."""
        return 2 * len(self.pairs)

    def summary(self) -> BlimpSummary:
        """This model's macro and per-term accuracies, to set beside :attr:`published`."""
        return BlimpSummary(self.macro_accuracy, dict(self.term_accuracy), len(self.paradigm_accuracy))

    def metrics(self) -> dict[str, float]:
        """Flat metrics, fractions in [0, 1]: ``blimp/macro_accuracy``, ``blimp/micro_accuracy``, ``blimp/pairs``,
        ``blimp/paradigm/<UID>``, ``blimp/term/<linguistics_term>`` and ``blimp/field/<field>``."""
        metrics = {"blimp/macro_accuracy": self.macro_accuracy, "blimp/micro_accuracy": self.micro_accuracy,
                   "blimp/pairs": float(len(self.pairs))}
        for prefix, values in (("paradigm", self.paradigm_accuracy), ("term", self.term_accuracy),
                               ("field", self.field_accuracy)):
            metrics.update({f"blimp/{prefix}/{name}": value for name, value in values.items()})
        return metrics

    def to_dict(self) -> dict[str, Any]:
        """Everything as JSON-ready values: the metrics, each paradigm, the published models, and every pair."""
        terms, fields = self.paradigm_terms, self.paradigm_fields
        return {
            "metrics": self.metrics(),
            "seconds": self.seconds,
            "sentences": self.sentences,
            "paradigms": {uid: {"term": terms[uid], "field": fields[uid], "pairs": self.paradigm_pairs[uid],
                                "accuracy": accuracy} for uid, accuracy in self.paradigm_accuracy.items()},
            "published": {name: {"macro_accuracy": s.macro, "terms": s.terms, "paradigms": s.paradigms}
                          for name, s in self.published.items()},
            "pairs": [{"UID": p.uid, "pairID": p.pair_id, "good_pll": float(g), "bad_pll": float(b),
                       "correct": bool(c)}
                      for p, g, b, c in zip(self.pairs, self.good_pll, self.bad_pll, self.correct, strict=True)],
        }


def score_pairs(
    pairs: Sequence[BlimpPair], good_pll: Sequence[float], bad_pll: Sequence[float], *, seconds: float | None = None
) -> BlimpResult:
    """Accuracies from the scores of each pair's good and bad sentence (any scores where higher means likelier).

    Ties count as wrong. Paradigm accuracy is the share of its pairs correct; a term's or field's is the mean of its
    paradigms' accuracies (as the paper's summary rows); macro is the mean over paradigms, micro over pairs.

    Example:
        >>> pairs = [BlimpPair("p", "0", "syntax", "t", "good", "bad"), BlimpPair("p", "1", "syntax", "t", "a", "b"),
        ...          BlimpPair("q", "0", "semantics", "t", "x", "y")]
        >>> result = score_pairs(pairs, [-1.0, -5.0, -2.0], [-3.0, -5.0, -9.0])
        >>> result.paradigm_accuracy, result.macro_accuracy, result.micro_accuracy
        ({'p': 0.5, 'q': 1.0}, 0.75, 0.6666666666666666)
    """
    pairs = list(pairs)
    if not pairs:
        raise ValueError("no pairs to score")
    good, bad = np.asarray(good_pll, dtype=np.float64), np.asarray(bad_pll, dtype=np.float64)  # (pairs,) each
    if good.shape != (len(pairs),) or bad.shape != (len(pairs),):
        raise ValueError(f"need one good and one bad score per pair: {len(pairs)} pairs, {good.shape}, {bad.shape}")
    correct = good > bad  # strict: a tie is wrong
    members: dict[str, list[int]] = defaultdict(list)
    for index, pair in enumerate(pairs):
        members[pair.uid].append(index)
    accuracy = {uid: float(correct[members[uid]].mean()) for uid in sorted(members)}
    return BlimpResult(
        pairs=pairs, good_pll=good, bad_pll=bad, correct=correct,
        paradigm_accuracy=accuracy,
        paradigm_pairs={uid: len(members[uid]) for uid in accuracy},
        term_accuracy=_group_means(accuracy, {p.uid: p.term for p in pairs}),
        field_accuracy=_group_means(accuracy, {p.uid: p.field for p in pairs}),
        macro_accuracy=float(np.mean(list(accuracy.values()))),
        micro_accuracy=float(correct.mean()),
        seconds=seconds,
    )


# ---------------------------------------------------------------------------------------------------------------
# The paper's models


def summary_file(folder: Path) -> Path | None:
    """``models_summary.jsonl`` in ``folder``, its parent (``folder`` is ``blimp/data``) or ``folder/blimp``."""
    folder = Path(folder)
    for candidate in (folder, folder.parent, folder / "blimp"):
        if (candidate / SUMMARY_FILE).is_file():
            return candidate / SUMMARY_FILE
    return None


def _accuracy(row: dict[str, Any], column: str, where: str) -> float:
    value = row.get(column)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise BvrError(f"{column} must be an accuracy in [0, 1], got {json.dumps(value)}", where=where,
                       hint=f"use the BLiMP release's {SUMMARY_FILE}")
    return float(value)


def published_blimp(folder: Path) -> dict[str, dict[str, float]]:
    """The paper's per-paradigm accuracies of its four models, from ``models_summary.jsonl``.

    Rows whose ``UID`` is ``overall`` are the paper's summaries and are skipped; :func:`macro_accuracy` of a model's
    paradigms gives its headline figure (5-gram 0.612, LSTM 0.698, Transformer-XL 0.696, GPT-2 0.830).

    Args:
        folder: where :func:`summary_file` looks.

    Returns:
        Model name (``5-gram``, ``LSTM``, ``Transformer-XL``, ``GPT-2``) -> paradigm -> accuracy in [0, 1].

    Raises:
        BvrError: no such file, a bad line or a missing or out-of-range accuracy (named ``file:line``), no paradigm.
    """
    path = summary_file(folder)
    if path is None:
        raise BvrError(f"no {SUMMARY_FILE} here, in its parent or in blimp/", where=folder,
                       hint="it ships with the BLiMP release, beside data/")
    published: dict[str, dict[str, float]] = {name: {} for name in PUBLISHED_MODELS.values()}
    for number, row in _json_lines(path):
        where = f"{path}:{number}"
        if not isinstance(row.get("UID"), str) or not row["UID"]:
            raise BvrError("missing key UID", where=where, hint=f"use the BLiMP release's {SUMMARY_FILE}")
        if row["UID"] == "overall":
            continue
        for column, name in PUBLISHED_MODELS.items():
            published[name][row["UID"]] = _accuracy(row, column, where)
    if not published["GPT-2"]:
        raise BvrError("no per-paradigm rows (only 'overall' summaries or nothing)", where=path)
    return published


def macro_accuracy(by_paradigm: Mapping[str, float]) -> float:
    """Mean accuracy over paradigms.

    >>> macro_accuracy({"a": 0.5, "b": 1.0})
    0.75
    """
    return float(np.mean(list(by_paradigm.values())))


def published_summaries(published: Mapping[str, Mapping[str, float]],
                        paradigm_terms: Mapping[str, str]) -> dict[str, BlimpSummary]:
    """Each published model's macro and per-term accuracies over the paradigms of ``paradigm_terms``.

    Restricting to the paradigms a result has keeps the comparison fair when only some were scored. A model with
    none of them is left out.

    Args:
        published: :func:`published_blimp`'s result.
        paradigm_terms: paradigm -> linguistics_term of the paradigms to average (:attr:`BlimpResult.paradigm_terms`).
    """
    out = {}
    for name, accuracies in published.items():
        shared = {uid: accuracies[uid] for uid in paradigm_terms if uid in accuracies}
        if shared:
            out[name] = BlimpSummary(macro_accuracy(shared), _group_means(shared, paradigm_terms), len(shared))
    return out


# ---------------------------------------------------------------------------------------------------------------
# Evaluation


@contextmanager
def _progress_bar(total: int, enabled: bool) -> Iterator[Callable[[int], None] | None]:
    """A rich progress bar over sentences, yielding its ``advance(n)``; None when disabled."""
    if not enabled:
        yield None
        return
    columns = (TextColumn("BLiMP"), BarColumn(), MofNCompleteColumn(), TextColumn("sentences"), TimeElapsedColumn(),
               TextColumn("left"), TimeRemainingColumn())
    with Progress(*columns) as bar:
        task = bar.add_task("BLiMP", total=total)
        yield lambda n: bar.advance(task, n)


def evaluate_blimp(
    pretrained: Pretrained,
    folder: Path,
    per_paradigm: int | None = None,
    seed: int = 0,
    progress: bool = False,
    *,
    max_tokens_per_batch: int = DEFAULT_TOKENS_PER_BATCH,
) -> BlimpResult:
    """Zero-shot BLiMP accuracy of a pretrained encoder, by pseudo-log-likelihood.

    A pair is correct when the good sentence's PLL is strictly higher than the bad one's; ties count as wrong.

    Args:
        pretrained: the model and tokenizer (:func:`bvr.pretrained.load_pretrained`).
        folder: the BLiMP data (see :func:`paradigm_files`); its ``models_summary.jsonl``, when there, fills
            :attr:`BlimpResult.published` over the same paradigms.
        per_paradigm: score a fixed subsample of this many pairs per paradigm (:func:`load_blimp`); None: all.
        seed: which subsample.
        progress: draw a progress bar over sentences.
        max_tokens_per_batch: see :func:`pll_scores`.

    Returns:
        The accuracies, each pair's scores and correctness, the wall time and the published models.

    Raises:
        BvrError: bad BLiMP files (``file:line``), or a sentence longer than the model's positions.
    """
    pairs = load_blimp(folder, per_paradigm, seed)
    summary = summary_file(paradigm_files(folder)[0].parent)
    sentences = [pair.good for pair in pairs] + [pair.bad for pair in pairs]
    start = time.perf_counter()
    with _progress_bar(len(sentences), progress) as advance:
        scores = pll_scores(pretrained.model, pretrained.tokenizer, pretrained.family, sentences,
                            max_tokens_per_batch=max_tokens_per_batch, on_progress=advance)
    result = score_pairs(pairs, scores[:len(pairs)], scores[len(pairs):], seconds=time.perf_counter() - start)
    if summary is not None:
        result.published = published_summaries(published_blimp(summary.parent), result.paradigm_terms)
    return result
