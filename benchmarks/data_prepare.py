"""Data preparation: ``bvr data prepare`` against the pipeline a user would write with ``datasets``, in one run.

The peer is what Hugging Face's ``run_mlm.py`` does with a text corpus: ``datasets.load_dataset("text")`` over the
WikiExtractor files, the ``<doc>`` markup lines filtered out, ``Dataset.map`` with the fast tokenizer (batched,
``return_special_tokens_mask``) and then ``group_texts`` into 128-token blocks, each with ``num_proc=2``. bvr runs
its whole staged pipeline, from the same files and the same WordPiece tokenizer (trained once, untimed, and given
to both through ``tokenizer.path``): documents parsed and split into sentences, tokenized, and cut into
FULL-SENTENCES sequences (the peer's shape: packed 128-token blocks) and SEGMENT-PAIR sequences with NSP labels
(which the peer does not even build). Each side runs in a fresh process with an empty cache; the wall time and the
process's peak resident memory are measured from outside.

Then ``bvr data prepare`` (FULL-SENTENCES) on the first 25%, 50% and 100% of the corpus files: its time should grow
linearly with the corpus and its peak memory stay flat (documents and sequences are written to memory-mapped Arrow
in shards, never held whole). Two peaks are printed: the resident set (GNU time), which counts the pages of the
memory-mapped Arrow files a stage has read and so grows with the corpus by design (the kernel drops them under
pressure), and the anonymous memory the processes allocated, which is what must stay flat.

Target: bvr at most 0.7x the peer's time.

    python benchmarks/data_prepare.py --data-dir DATA [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CORPUS = "corpus/enwiki-2021-extract"
BLOCK = 128

PEER = r'''
import sys
from pathlib import Path
import datasets
from transformers import PreTrainedTokenizerFast
from tokenizers import Tokenizer

files, tokenizer_file, cache, block = sys.argv[1].split(","), sys.argv[2], sys.argv[3], int(sys.argv[4])
datasets.disable_progress_bars()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(tokenizer_file))
raw = datasets.load_dataset("text", data_files=files, split="train", cache_dir=cache)
raw = raw.filter(lambda batch: [not (t.startswith("<doc") or t.startswith("</doc")) and bool(t.strip())
                                for t in batch["text"]], batched=True, num_proc=2)

def tokenize(batch):
    return tokenizer(batch["text"], return_special_tokens_mask=True)

def group_texts(examples):
    joined = {k: sum(examples[k], []) for k in examples}
    total = (len(joined["input_ids"]) // block) * block
    return {k: [v[i:i + block] for i in range(0, total, block)] for k, v in joined.items()}

tokenized = raw.map(tokenize, batched=True, num_proc=2, remove_columns=["text"])
blocks = tokenized.map(group_texts, batched=True, num_proc=2)
print(len(blocks))
'''


def timed(command: list[str]) -> tuple[float, float, float, str]:
    """Run ``command``: its wall seconds, its peak resident memory in MB (GNU time: the largest process of the
    tree, memory-mapped file pages included), the peak of its anonymous memory in MB (resident less file-backed
    and shared pages, summed over the process and its children, sampled every 50 ms: what the process itself
    allocated, not the Arrow files it maps) and its stdout."""
    import psutil

    # The child's output and GNU time's figure go to files: a pipe nobody reads until the end fills with progress
    # output and blocks the child (a 1 GB corpus writes more than a pipe's 64 KB).
    with tempfile.TemporaryDirectory() as scratch:
        output, errors, peak_file = (Path(scratch) / name for name in ("stdout", "stderr", "time"))
        start = time.perf_counter()
        with output.open("w") as out, errors.open("w") as err:
            proc = subprocess.Popen(["/usr/bin/time", "-o", str(peak_file), "-f", "%M", *command], stdout=out,
                                    stderr=err, text=True)
            peak_anon = 0
            watched = psutil.Process(proc.pid)
            while proc.poll() is None:
                try:
                    tree = [watched, *watched.children(recursive=True)]
                    anon = 0
                    for member in tree:
                        info = member.memory_info()
                        anon += info.rss - info.shared
                    peak_anon = max(peak_anon, anon)
                except psutil.Error:
                    pass
                time.sleep(0.05)
            proc.wait()
        seconds = time.perf_counter() - start
        stdout = output.read_text()
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(command[:4])} ... failed:\n{errors.read_text()[-3000:]}")
        peak_kb = int(peak_file.read_text().strip().splitlines()[-1])
    return seconds, peak_kb / 1024, peak_anon / 2**20, stdout


def corpus_slice(data_dir: Path, root: Path, fraction: float) -> tuple[str, list[Path]]:
    """A data folder under ``root`` whose corpus holds the first ``fraction`` of the corpus files (symlinks)."""
    files = sorted(p for p in (data_dir / CORPUS).rglob("*") if p.is_file())
    chosen = files[:max(1, round(len(files) * fraction))]
    folder = root / f"data-{int(fraction * 100)}" / CORPUS
    for file in chosen:
        target = folder / file.relative_to(data_dir / CORPUS)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(file.resolve())
    return str(root / f"data-{int(fraction * 100)}"), chosen


def bvr_prepare(data: str, tokenizer: Path, output: Path, input_format: str, nsp: bool) -> tuple[float, float, float]:
    bvr = [sys.executable, "-m", "bvr.cli"] if shutil.which("bvr") is None else ["bvr"]
    command = [*bvr, "data", "prepare", "--data-dir", data, "--output-dir", str(output),
               "--set", f"tokenizer.path={tokenizer}", "--set", f"data.input_format={input_format}",
               "--set", f"data.sentence_objective={'nsp' if nsp else 'none'}", "--set", f"data.max_length={BLOCK}"]
    seconds, peak, anon, _ = timed(command)
    return seconds, peak, anon


def train_tokenizer_once(data_dir: Path, root: Path) -> Path:
    """A 30,522-token WordPiece tokenizer trained on the first corpus file, saved as a bvr tokenizer folder."""
    from bvr.corpus import CorpusStats, read_wikiextractor
    from bvr.tokenization import save_tokenizer, train_tokenizer

    first = sorted(p for p in (data_dir / CORPUS).rglob("*") if p.is_file())[0]
    texts = [" ".join(doc["sentences"]) for doc in read_wikiextractor([first], CorpusStats())]
    folder = root / "tokenizer"
    save_tokenizer(train_tokenizer("bert", texts, vocab_size=30_522, show_progress=False), "bert", folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("BVR_DATA_DIR", "data")),
                        help=f"data folder holding {CORPUS}/ [default: $BVR_DATA_DIR]")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bvr-prepare-bench-"))
    try:
        tokenizer = train_tokenizer_once(args.data_dir, root)
        tokenizer_file = next(tokenizer.glob("*.json"))
        slices = {fraction: corpus_slice(args.data_dir, root, fraction) for fraction in (0.25, 0.5, 1.0)}
        data, files = slices[1.0]
        megabytes = sum(f.stat().st_size for f in files) / 2**20
        figures: dict[str, dict[str, float]] = {}
        peer_seconds, peer_peak, peer_anon, out = timed([sys.executable, "-c", PEER, ",".join(map(str, files)),
                                                         str(tokenizer_file), str(root / "hf-cache"), str(BLOCK)])
        figures["peer"] = {"seconds": peer_seconds, "peak_mb": peer_peak, "peak_anon_mb": peer_anon,
                           "blocks": int(out.split()[-1])}
        for name, fmt, nsp in (("full-sentences", "full-sentences", False), ("segment-pair+nsp", "segment-pair", True)):
            seconds, peak, anon = bvr_prepare(data, tokenizer, root / f"out-{name}", fmt, nsp)
            figures[name] = {"seconds": seconds, "peak_mb": peak, "peak_anon_mb": anon,
                             "ratio_to_peer": seconds / peer_seconds}
        scaling = {}
        for fraction, (slice_data, slice_files) in slices.items():
            if fraction == 1.0:
                full = figures["full-sentences"]
                seconds, peak, anon = full["seconds"], full["peak_mb"], full["peak_anon_mb"]
            else:
                seconds, peak, anon = bvr_prepare(slice_data, tokenizer, root / f"out-{fraction}", "full-sentences",
                                                  False)
            mb = sum(f.stat().st_size for f in slice_files) / 2**20
            scaling[f"{int(fraction * 100)}%"] = {"mb": mb, "seconds": seconds, "peak_mb": peak,
                                                  "peak_anon_mb": anon, "seconds_per_mb": seconds / mb}
        figures["scaling"] = scaling
    finally:
        shutil.rmtree(root, ignore_errors=True)

    print(f"corpus: {megabytes:.1f} MB of WikiExtractor files, WordPiece 30,522, {BLOCK}-token blocks, "
          f"{os.cpu_count()} cores")
    print(f"{'pipeline':<40}{'seconds':>9}{'peak MB':>9}{'anon MB':>9}{'vs peer':>9}")
    print(f"{'peer: datasets.map + group_texts (2 procs)':<40}{figures['peer']['seconds']:>9.1f}"
          f"{figures['peer']['peak_mb']:>9.0f}{figures['peer']['peak_anon_mb']:>9.0f}{'1.00x':>9}")
    for name in ("full-sentences", "segment-pair+nsp"):
        f = figures[name]
        print(f"{'bvr data prepare, ' + name:<40}{f['seconds']:>9.1f}{f['peak_mb']:>9.0f}{f['peak_anon_mb']:>9.0f}"
              f"{f['ratio_to_peer']:>8.2f}x")
    print("target: bvr <= 0.7x the peer's time")
    print("scaling of bvr data prepare (full-sentences):")
    print(f"{'corpus':<8}{'MB':>8}{'seconds':>9}{'s/MB':>7}{'peak MB':>9}{'anon MB':>9}")
    for name, f in scaling.items():
        print(f"{name:<8}{f['mb']:>8.1f}{f['seconds']:>9.1f}{f['seconds_per_mb']:>7.2f}{f['peak_mb']:>9.0f}"
              f"{f['peak_anon_mb']:>9.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
