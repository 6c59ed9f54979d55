"""Data preparation at scale: ``bvr data prepare`` on 1 GB and more, its tokenizer sample, and what a rank maps.

The corpus is the WikiExtractor extract repeated ``--copies`` times, each copy's documents given ids of their own
(``<doc id="ID-cK"``), so nothing downstream can tell the copies apart by id. Three measures:

1. **Scaling**: ``bvr data prepare`` (FULL-SENTENCES, a fixed WordPiece tokenizer through ``tokenizer.path``, so
   the three runs do the same work per document) on a quarter, half and all of the copies: its time should grow
   linearly with the corpus, the memory it allocates stay flat, and its resident peak stay bounded (it counts the
   pages of the memory-mapped Arrow files a stage has read, which the kernel can drop).
2. **Tokenizer sample**: the tokenizer stage as a user runs it, with the default ``tokenizer.train_documents``, on
   the largest corpus: its time, memory and how many documents it trained on.
3. **A rank's memory**: a process loads the largest prepared sequences as a training rank does (memory-mapped
   Arrow) and reads rank 0's first 20,000 sequences of 8 ranks: the memory it allocates, against the size of the
   Arrow files every rank maps.

4. **Resident memory bounded** (``--memory-limit MB``, Linux with a writable cgroup-v1 memory controller, as root):
   the largest preparation again, in a memory cgroup of that size, which charges the page cache too. It finishes,
   in about the same time, because the pages of the Arrow files it maps are clean and the kernel reclaims them.

    python benchmarks/data_scale.py --data-dir DATA [--copies 16] [--memory-limit 640] [--json out.json] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from data_prepare import CORPUS, bvr_prepare, timed, train_tokenizer_once

DOC_ID = re.compile(r'^<doc id="([^"]+)"')

TOKENIZER_STAGE = r'''
import json, sys
from pathlib import Path
from bvr.config import load_config
from bvr.pretraining.prepare import prepare_tokenizer
corpus, out = Path(sys.argv[1]), sys.argv[2]
cfg = load_config(overrides=["tokenizer.vocab_size=30522"], extra={"output_dir": out})
folder = prepare_tokenizer(cfg, corpus, progress=False)
print(json.dumps(json.loads((folder / "tokenizer_stats.json").read_text())))
'''

RANK_READ = r'''
import sys
import datasets
import psutil
from bvr.pretraining.data import EpochSampler

def allocated():
    info = psutil.Process().memory_info()
    return (info.rss - info.shared) / 2**20

instances = datasets.load_from_disk(sys.argv[1])["train"]
loaded = allocated()
sampler = EpochSampler(instances.num_rows, seed=0, rank=0, world_size=8)
tokens = 0
for count, (index, _) in enumerate(sampler):
    if count == 20_000:
        break
    tokens += len(instances[int(index)]["input_ids"])
print(instances.num_rows, tokens, loaded, allocated())
'''


def repeated_corpus(data_dir: Path, root: Path, copies: int) -> Path:
    """A data folder under ``root`` whose corpus is ``copies`` copies of the extract, ids made distinct (kept when a
    ``--keep`` folder already holds it)."""
    if (root / CORPUS / f"C{copies - 1:02d}").is_dir():
        return root
    files = sorted(p for p in (data_dir / CORPUS).rglob("*") if p.is_file())
    for copy in range(copies):
        for file in files:
            target = root / CORPUS / f"C{copy:02d}" / file.relative_to(data_dir / CORPUS)
            target.parent.mkdir(parents=True, exist_ok=True)
            with file.open(encoding="utf-8") as src, target.open("w", encoding="utf-8") as dst:
                suffix = f"-c{copy}"
                for line in src:
                    dst.write(DOC_ID.sub(lambda m, s=suffix: f'<doc id="{m.group(1)}{s}"', line, count=1))
    return root


def subset(full: Path, root: Path, copies: int) -> Path:
    """A data folder under ``root`` holding the first ``copies`` copies of ``full``'s corpus (a symlink per file: the
    reader does not descend into linked folders)."""
    for folder in sorted((full / CORPUS).iterdir())[:copies]:
        for file in sorted(p for p in folder.rglob("*") if p.is_file()):
            target = root / CORPUS / file.relative_to(full / CORPUS)
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                target.symlink_to(file.resolve())
    return root


def bounded(data: Path, tokenizer: Path, out: Path, limit_mb: int) -> dict:
    """``bvr data prepare`` of ``data`` in a cgroup-v1 memory cgroup limited to ``limit_mb`` (page cache included)."""
    group = Path("/sys/fs/cgroup/memory") / f"bvr-bench-{os.getpid()}"
    group.mkdir()
    try:
        (group / "memory.limit_in_bytes").write_text(str(limit_mb * 2**20))
        enter = f"echo $$ > {group / 'cgroup.procs'} && exec \"$@\""
        bvr = [sys.executable, "-m", "bvr.cli"] if shutil.which("bvr") is None else ["bvr"]
        command = ["sh", "-c", enter, "sh", *bvr, "data", "prepare", "--data-dir", str(data), "--output-dir", str(out),
                   "--set", f"tokenizer.path={tokenizer}", "--set", "data.input_format=full-sentences",
                   "--set", "data.sentence_objective=none", "--set", "data.max_length=128"]
        seconds, peak, anon, _ = timed(command)
        result = {"limit_mb": limit_mb, "seconds": seconds, "peak_mb": peak, "peak_anon_mb": anon,
                  "cgroup_max_usage_mb": int((group / "memory.max_usage_in_bytes").read_text()) / 2**20,
                  "limit_hits": int((group / "memory.failcnt").read_text())}
    finally:
        group.rmdir()
    print(f"in a {limit_mb} MB memory cgroup: {seconds:.1f} s, resident peak {peak:.0f} MB, allocated peak "
          f"{anon:.0f} MB, the cgroup's peak {result['cgroup_max_usage_mb']:.0f} MB (page cache included), "
          f"limit reached {result['limit_hits']:,} times", flush=True)
    return result


def megabytes(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", type=Path, default=Path(os.environ.get("BVR_DATA_DIR", "data")),
                        help=f"data folder holding {CORPUS}/ [default: $BVR_DATA_DIR]")
    parser.add_argument("--copies", type=int, default=16, help="copies of the extract in the largest corpus")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    parser.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it [default: a "
                        "temporary folder, removed]")
    parser.add_argument("--memory-limit", type=int, default=None, metavar="MB",
                        help="also prepare the largest corpus again inside a memory cgroup of MB megabytes")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bvr-scale-bench-"))
    root.mkdir(parents=True, exist_ok=True)
    figures: dict = {"scaling": {}}
    try:
        full = repeated_corpus(args.data_dir, root / "data-full", args.copies)
        tokenizer = train_tokenizer_once(args.data_dir, root)
        sizes = sorted({max(1, args.copies // 4), max(1, args.copies // 2), args.copies})
        for copies in sizes:
            data = full if copies == args.copies else subset(full, root / f"data-{copies}", copies)
            out = root / f"out-{copies}"
            seconds, peak, anon = bvr_prepare(str(data), tokenizer, out, "full-sentences", False)
            mb = megabytes(data / CORPUS)
            arrow = megabytes(out / "cache")
            figures["scaling"][copies] = {"mb": mb, "seconds": seconds, "seconds_per_mb": seconds / mb,
                                          "peak_mb": peak, "peak_anon_mb": anon, "cache_mb": arrow}
            print(f"{copies:>3} copies {mb:8.0f} MB {seconds:8.1f} s {seconds / mb:6.3f} s/MB  resident peak "
                  f"{peak:6.0f} MB  allocated peak {anon:6.0f} MB  prepared {arrow:6.0f} MB", flush=True)
        largest = root / f"out-{args.copies}"
        corpus = next(p.parent for p in largest.rglob("documents") if p.is_dir())
        seconds, peak, anon, out = timed([sys.executable, "-c", TOKENIZER_STAGE, str(corpus), str(root / "tok-out")])
        stats = json.loads(out.strip().splitlines()[-1])
        figures["tokenizer"] = {"seconds": seconds, "peak_mb": peak, "peak_anon_mb": anon,
                                "trained_on_documents": stats["trained_on_documents"],
                                "training_documents": stats["training_documents"],
                                "train_seconds": stats["train_seconds"]}
        print(f"tokenizer stage on {stats['training_documents']:,} training documents: trained on "
              f"{stats['trained_on_documents']:,} in {stats['train_seconds']} s; stage {seconds:.1f} s, resident "
              f"peak {peak:.0f} MB, allocated peak {anon:.0f} MB", flush=True)
        instances = next(p for p in largest.rglob("instances") if (p / "dataset_dict.json").is_file())
        seconds, peak, anon, out = timed([sys.executable, "-c", RANK_READ, str(instances)])
        rows, tokens, loaded, after = out.split()[-4:]
        figures["rank"] = {"sequences": int(rows), "read": 20_000, "tokens_read": int(tokens), "seconds": seconds,
                           "allocated_loaded_mb": float(loaded), "allocated_after_mb": float(after),
                           "peak_mb": peak, "arrow_mb": megabytes(instances)}
        print(f"rank 0 of 8 read 20,000 of {int(rows):,} sequences ({int(tokens):,} tokens) in {seconds:.1f} s: "
              f"allocated {float(loaded):.0f} MB once loaded (imports included), {float(after):.0f} MB after "
              f"reading; resident peak {peak:.0f} MB; {megabytes(instances):.0f} MB of Arrow mapped")
        if args.memory_limit:
            figures["bounded"] = bounded(full, tokenizer, root / f"out-{args.copies}-bounded", args.memory_limit)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
