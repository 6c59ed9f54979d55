"""The cache's guarantees: keys follow the files' content, a failed build leaves nothing, a live build is never
removed, and two processes asking for one target at once build it once."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bvr import cache
from bvr.cache import DONE, build_once, fingerprint, is_done
from bvr.locks import file_lock, holder, lock_path


def test_fingerprint_follows_content_not_place_or_time(tmp_path: Path) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("one two three\n")
    b.write_text("one two three\n")
    assert fingerprint(a) == fingerprint(b)  # same bytes elsewhere: same key
    before = fingerprint(a)
    stat = a.stat()
    a.write_text("one two THREE\n")  # same size, then the old modification time put back
    os.utime(a, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert fingerprint(a) != before
    a.write_text("one two three\n")
    assert fingerprint(a) == before
    assert fingerprint(tmp_path / "absent") != fingerprint(tmp_path / "absent", a)


def test_fingerprint_of_a_folder_sees_names_and_skips_hidden_files(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    (folder / "AA").mkdir(parents=True)
    (folder / "AA" / "wiki_00").write_text("text")
    before = fingerprint(folder)
    (folder / ".cache").write_text("anything")
    assert fingerprint(folder) == before
    (folder / "AA" / "wiki_00").rename(folder / "AA" / "wiki_01")
    assert fingerprint(folder) != before


def test_a_failed_build_is_neither_marked_done_nor_left_behind(tmp_path: Path) -> None:
    target = tmp_path / "stage-abc"

    def fails(tmp: Path) -> None:
        (tmp / "half.txt").write_text("half")
        raise RuntimeError("build failed")

    with pytest.raises(RuntimeError, match="build failed"):
        build_once(target, fails, {})
    assert not target.exists() and not list(tmp_path.glob(".stage-abc.tmp-*"))
    path, built = build_once(target, lambda tmp: (tmp / "out.txt").write_text("ok"), {"k": 1})
    assert built and is_done(path) and (path / "out.txt").read_text() == "ok"


def test_the_caller_learns_what_was_built_through_its_own_set(tmp_path: Path) -> None:
    built: set[Path] = set()
    first = build_once(tmp_path / "stage-a", lambda tmp: None, {}, built=built)
    build_once(tmp_path / "stage-a", lambda tmp: None, {}, built=built)  # reused: the set does not change
    other: set[Path] = set()
    build_once(tmp_path / "stage-b", lambda tmp: None, {}, built=other)
    assert first == (tmp_path / "stage-a", True)
    assert built == {(tmp_path / "stage-a").resolve()} and other == {(tmp_path / "stage-b").resolve()}
    assert not hasattr(cache, "BUILT")  # no set shared by every caller in the process


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_builds_of_dead_processes_are_removed(tmp_path: Path) -> None:
    target = tmp_path / "stage-abc"
    dead = tmp_path / f".stage-abc.tmp-{_dead_pid()}"
    live = tmp_path / f".stage-abc.tmp-{os.getppid()}"  # pytest's parent: alive, and not this process
    for folder in (dead, live):
        folder.mkdir()
    build_once(target, lambda tmp: None, {})
    assert not dead.exists() and live.is_dir()


# --- two processes, one target ----------------------------------------------------------------------------------


def _flag(path: Path, text: str) -> None:
    """Write a flag whole: the test polls for the name, so the name appears only once the text is in it."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.rename(path)


def _slow_build(target: Path, flags: Path, name: str) -> None:
    """Build ``target`` writing ``name``; a builder holds on until ``flags/release`` exists. A process kept waiting
    for the lock leaves ``flags/waiting-NAME`` holding the PID it waits for."""
    cache._announce_wait = lambda target, pid: _flag(flags / f"waiting-{name}", str(pid))

    def build(tmp: Path) -> None:
        _flag(flags / f"started-{name}", str(tmp))
        while not (flags / "release").exists():
            time.sleep(0.05)
        (tmp / "who.txt").write_text(name)

    path, built = build_once(target, build, {})
    (flags / f"result-{name}.json").write_text(json.dumps({"built": built, "who": (path / "who.txt").read_text()}))


def _wait_until(condition, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_second_process_waits_for_the_first_and_reuses_its_build(tmp_path: Path) -> None:
    target, flags = tmp_path / "cache" / "stage-abc", tmp_path / "flags"
    flags.mkdir()
    context = multiprocessing.get_context("spawn")
    first = context.Process(target=_slow_build, args=(target, flags, "first"))
    first.start()
    _wait_until(lambda: (flags / "started-first").exists())
    second = context.Process(target=_slow_build, args=(target, flags, "second"))
    second.start()
    _wait_until(lambda: (flags / "waiting-second").exists())
    assert (flags / "waiting-second").read_text() == str(first.pid)
    first_tmp = Path((flags / "started-first").read_text())
    assert first_tmp.is_dir() and not (flags / "started-second").exists()
    (flags / "release").write_text("")
    for process in (first, second):
        process.join(120)
        assert process.exitcode == 0
    results = {name: json.loads((flags / f"result-{name}.json").read_text()) for name in ("first", "second")}
    assert results == {"first": {"built": True, "who": "first"}, "second": {"built": False, "who": "first"}}
    assert (target / DONE).is_file() and not first_tmp.exists()


def test_a_waiting_process_says_who_it_waits_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "stage-abc"
    script = (f"from bvr.locks import file_lock; import time, pathlib\n"
              f"with file_lock({str(lock_path(target))!r}):\n"
              f"    pathlib.Path({str(tmp_path / 'held')!r}).write_text('')\n"
              f"    time.sleep(2)\n")
    other = subprocess.Popen([sys.executable, "-c", script])
    try:
        _wait_until(lambda: (tmp_path / "held").exists())
        with cache.target_lock(target):
            assert holder(lock_path(target)) == os.getpid()
    finally:
        other.wait(60)
    assert f"process {other.pid} is working on this; waiting" in capsys.readouterr().err


def test_a_cache_another_version_made_is_named_in_one_line_and_built_anew(tmp_path: Path,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    """The version each folder's config.yaml stamps says which bvr made it: finished folders of the target's kind
    stamped with another version are named when the target is built; this version's folders (other settings), an
    unfinished folder and another kind are not. A cache that is found costs no look."""
    root = tmp_path / "cache"

    def make(name: str, version: int | None) -> bool:
        return build_once(root / name, lambda out: (out / "x").write_text(name),
                          {"version": version, "key": name} if version is not None else {"key": name})[1]

    for name, version in [("corpus-aaaaaaaaaaaa", 3), ("corpus-bbbbbbbbbbbb", cache.CACHE_VERSION),
                          ("corpus-cccccccccccc", 4), ("corpus-plus-dddddddddddd", 3), ("tokenized-eeeeeeeeeeee", 3)]:
        make(name, version)
    (root / "corpus-ffffffffffff").mkdir()  # unfinished: no stamp is read
    capsys.readouterr()
    assert make("corpus-0123456789ab", cache.CACHE_VERSION)
    assert capsys.readouterr().err == (
        f"{root / 'corpus-aaaaaaaaaaaa'} (and 1 more corpus cache): made by another version of bvr (cache version "
        f"3, 4; this one writes {cache.CACHE_VERSION}), not reused: corpus-0123456789ab is made anew\n")
    assert not make("corpus-0123456789ab", cache.CACHE_VERSION) and capsys.readouterr().err == ""  # found: reused
    assert make("tokenizer-bert-0123456789ab", cache.CACHE_VERSION)  # no cache of its kind
    assert capsys.readouterr().err == ""
    assert make("tokenized-0123456789ab", None) and capsys.readouterr().err == ""  # a cache that stamps no version


def test_a_process_making_many_caches_of_a_kind_reads_each_siblings_stamp_once(tmp_path: Path) -> None:
    """Fine-tuning makes hundreds of seed folders of one kind: each one made looks at its siblings' versions, and a
    finished sibling's stamp (fixed by its name's hash) is read once per process, not once per folder made."""
    root = tmp_path / "runs"
    for i in range(5):
        (root / f"seed-{i:012x}").mkdir(parents=True)
    (root / "seed-ffffffffffff").mkdir()  # unfinished: asked each time until it has a stamp
    reads: list[str] = []

    def stamp(folder: Path) -> int | None:
        reads.append(folder.name)
        return None if folder.name.endswith("f") else 1

    lines = [cache.other_versions(root / f"seed-{n:012x}", 2, stamp) for n in range(100, 110)]
    assert lines[0] == (f"{root / 'seed-000000000000'} (and 4 more seed caches): made by another version of bvr "
                        "(cache version 1; this one writes 2), not reused: seed-000000000064 is made anew")
    assert lines[-1] == lines[0].replace("seed-000000000064", "seed-00000000006d")
    assert sorted(set(reads) - {"seed-ffffffffffff"}) == [f"seed-{i:012x}" for i in range(5)]
    assert len(reads) == 5 + 10  # each finished sibling once; the unfinished one at each of the ten


def test_an_evaluation_result_another_version_cached_is_named_when_evaluated_anew(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bvr.evaluation.run import _Asked, _look_up

    folder = tmp_path / "evaluations"
    folder.mkdir()
    for name, version in [("blimp-0123456789ab", 2), ("blimp-ba9876543210", cache.CACHE_VERSION),
                          ("probe-sst2-0123456789ab", 2)]:
        (folder / f"{name}.json").write_text(json.dumps({"settings": {"version": version}, "checksum": "0"}))

    class NoRuns:
        def run_of(self, cached: object, name: str) -> None:
            return None

    asked = _Asked(tmp_path / "model", "blimp", None, None, None, folder / "blimp-aaaaaaaaaaaa.json")
    assert _look_up(asked, NoRuns())[0] is None  # type: ignore[arg-type]
    assert capsys.readouterr().err == (
        f"{folder / 'blimp-0123456789ab.json'}: made by another version of bvr (cache version 2; this one writes "
        f"{cache.CACHE_VERSION}), not reused: blimp-aaaaaaaaaaaa.json is made anew\n")


def test_a_lock_is_released_when_its_block_ends(tmp_path: Path) -> None:
    path = tmp_path / ".x.lock"
    with file_lock(path):
        assert holder(path) == os.getpid()
    assert holder(path) is None
    with file_lock(path):  # taken again at once
        pass


def test_evaluation_results_are_keyed_by_the_data_they_read(tmp_path: Path) -> None:
    from bvr.ablation.declare import Evaluations
    from bvr.evaluation.run import result_path

    model = tmp_path / "run" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    probe_files = [tmp_path / "glue" / "SST-2" / name for name in ("train.tsv", "dev.tsv")]
    blimp_file = tmp_path / "blimp" / "data" / "anaphor_gender_agreement.jsonl"
    for file in (*probe_files, blimp_file):
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text("one\n")
    settings = Evaluations()

    def keys(folder: Path = model) -> dict[str, Path]:
        return {"probe": result_path(folder, "probe", "sst2", settings, tmp_path, tmp_path / "outputs"),
                "blimp": result_path(folder, "blimp", None, settings, tmp_path, tmp_path / "outputs")}

    original = keys()
    # A copy of the model elsewhere (DVC's stage folder) finds the same results; other weights do not.
    copy = shutil.copytree(model, tmp_path / "pipeline" / "static-p0" / "model")
    assert keys(copy) == original and original["blimp"].parent == tmp_path / "outputs" / "evaluations"
    (copy / "config.json").write_text('{"hidden_size": 8}')
    assert keys(copy)["blimp"] != original["blimp"]
    for file, kind in [(f, "probe") for f in probe_files] + [(blimp_file, "blimp")]:
        file.write_text("two\n")  # edited in place
        changed = keys()
        assert {k for k in original if changed[k] != original[k]} == {kind}
        file.write_text("one\n")
        assert keys() == original


def test_evaluation_results_are_keyed_by_the_datas_content_not_its_path(tmp_path: Path) -> None:
    from bvr.ablation.declare import Evaluations
    from bvr.evaluation.run import result_path

    model = tmp_path / "run" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    data = tmp_path / "data"
    (data / "blimp").mkdir(parents=True)
    (data / "blimp" / "a.jsonl").write_text("one\n")
    settings = Evaluations()
    original = result_path(model, "blimp", None, settings, data, tmp_path / "outputs")
    shutil.copytree(data, tmp_path / "moved")
    assert result_path(model, "blimp", None, settings, tmp_path / "moved", tmp_path / "outputs") == original


def test_fine_tuning_seeds_are_keyed_by_the_task_files_content_not_the_data_folders_path(tmp_path: Path) -> None:
    from bvr.config.finetune import FinetuneConfig
    from bvr.tasks.registry import get_task
    from bvr.tasks.run import _seed_dirs

    spec, cfg, data = get_task("rte"), FinetuneConfig(), tmp_path / "data"
    for split in spec.splits:
        (data / spec.folder / split.file).parent.mkdir(parents=True, exist_ok=True)
        (data / spec.folder / split.file).write_text(f"{split.name}\n")
    root = tmp_path / "finetune"

    def dirs(folder: Path) -> dict[int, Path]:
        return _seed_dirs(root, spec, cfg, "model-identity", folder, False, [0, 1])

    original = dirs(data)
    assert dirs(shutil.copytree(data, tmp_path / "moved")) == original
    (tmp_path / "moved" / spec.folder / spec.splits[0].file).write_text("other\n")
    assert dirs(tmp_path / "moved")[0] != original[0]
