"""Ablation declarations: every shipped experiment resolves and is fair; broken files are refused with file:line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bvr.ablation.arms import (
    SENTENCE_PAIR_TOKENS,
    arm_differences,
    check_arms,
    equal_passes,
    sequence_tokens,
    tokens_per_step,
    tokens_seen,
)
from bvr.ablation.declare import CONTROL_ARM, list_experiments
from bvr.ablation.loading import load_ablation
from bvr.ablation.plan import make_plan
from bvr.config import PRESETS_DIR, flatten, resolve_finetune
from bvr.errors import BvrError
from bvr.tasks.registry import get_task
from bvr.tasks.run import load_finetune_config

PRESETS = sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))
SHIPPED = ("masking", "nsp", "batch-size", "vocab", "bert-vs-roberta")


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(*args, **kwargs) -> str:
    with pytest.raises(BvrError) as info:
        load_ablation(*args, **kwargs)
    return str(info.value)


def test_all_experiments_are_shipped():
    assert set(SHIPPED) <= set(list_experiments())
    assert "finetune" not in list_experiments()


@pytest.mark.parametrize("preset", [None, *PRESETS])
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_experiments_load_and_are_fair(name, preset):
    ablation = load_ablation(name, preset=preset)
    check_arms(ablation)
    assert ablation.control and CONTROL_ARM not in ablation.arms
    # The pretraining seed is the unit a verdict rests on: no shipped ablation can claim anything from fewer than 3.
    assert len(ablation.pretrain_seeds) >= 3 and ablation.finetune_seeds >= 2
    assert "sst2" in ablation.finetune_tasks
    if preset != "tiny":  # tiny may trim the suite to what fits on a CPU; the full suite has SQuAD too
        assert ablation.finetune_seeds == 5 and {"conll2003", "squad"} <= set(ablation.finetune_tasks)
    for arm, cfg in ablation.arms.items():
        assert cfg.name == arm
    # Arms differ exactly in declared keys: every difference is declared by one of the pair.
    for (a, b), keys in arm_differences(ablation).items():
        assert keys, f"arms {a} and {b} are identical"
        assert keys <= ablation.declared[a] | ablation.declared[b]
    equal_passes(ablation)
    control = ablation.control_config()
    first = next(iter(ablation.arms.values()))
    assert control.name == CONTROL_ARM and control.model == first.model


def test_masking_tiny_repeats_static_masks():
    ablation = load_ablation("masking", preset="tiny")
    static = ablation.arms["static"]
    assert static.masking.mode == "static" and ablation.arms["dynamic"].masking.mode == "dynamic"
    # ~2.2 epochs over 4,500 documents with one mask per sequence: each static mask is seen 2 to 3 times, and the
    # dynamic arm's masks differ from the second epoch on (with epochs under the dupe factor the arms would be one).
    assert (static.corpus.max_documents, static.masking.dupe_factor, static.training.max_steps) == (4500, 1, 2400)
    assert load_ablation("masking", preset="small").arms["static"].masking.dupe_factor == 10
    assert ablation.published == {"ablation": "masking"}
    # Four pretraining seeds at tiny (three elsewhere), BLiMP on a fixed 50 pairs per paradigm and the SST-2 probe
    # scored on 10,000 held-out training examples.
    assert ablation.pretrain_seeds == list(range(4))
    assert load_ablation("masking", preset="small").pretrain_seeds == [0, 1, 2]
    ev = ablation.evaluations
    assert (ev.blimp, ev.blimp_per_paradigm, ev.probe_tasks, ev.probe_seeds) == (True, 50, ("sst2",), 3)
    assert ev.probe_heldout_examples == 10_000
    small = load_ablation("masking", preset="small").evaluations
    assert (small.probe_tasks, small.probe_heldout_examples) == (("sst2", "conll2003"), None)


def test_masking_tiny_is_the_small_budget_recipe_and_small_keeps_berts_layout():
    static = load_ablation("masking", preset="tiny").arms["static"]
    recipe = (static.model.norm, static.model.embedding_norm, static.model.token_type_init, static.model.head_transform,
              static.training.dropout)
    assert recipe == ("pre", False, "zero", False, False)
    assert (static.data.input_format, static.data.sentence_objective, static.data.max_length) == (
        "full-sentences", "none", 64)
    small = load_ablation("masking", preset="small").arms["static"]
    assert (small.model.norm, small.model.embedding_norm, small.model.token_type_init, small.model.head_transform,
            small.training.dropout) == ("post", True, "normal", True, True)


def test_masking_tiny_fine_tunes_over_a_grid_of_learning_rates():
    ablation = load_ablation("masking", preset="tiny")
    assert (ablation.finetune_tasks, ablation.optional_tasks, ablation.finetune_seeds) == (["sst2"], [], 2)
    assert ablation.finetune_hparams == {"max_train_examples": 4000, "max_eval_examples": None,
                                         "learning_rate": [3e-4, 1e-3, 3e-3, 1e-2], "epochs": 2,
                                         "max_length": 64}
    sst2 = load_finetune_config(get_task("sst2"), preset="tiny", overrides=ablation.finetune_overrides())
    assert [(p.learning_rate, p.epochs) for p in sst2.grid()] == [(3e-4, 2), (1e-3, 2), (3e-3, 2), (1e-2, 2)]
    assert (sst2.max_train_examples, sst2.max_eval_examples, sst2.selection_examples) == (4000, None, 2000)
    assert (sst2.max_length, sst2.batch_size, sst2.warmup_fraction) == (64, 32, 0.1)
    # The arms' own config resolves the same fine-tuning settings as the finetune() call above.
    assert resolve_finetune(ablation.arms["static"], get_task("sst2")) == sst2
    assert ablation.evaluations.to_dict() == {
        "blimp": True, "blimp_per_paradigm": 50, "blimp_seed": 0, "probe_tasks": ["sst2"], "probe_seeds": 3,
        "probe_features": "mean", "probe_max_train_examples": 4000, "probe_max_eval_examples": None,
        "probe_heldout_examples": 10000}
    assert ablation.arms["static"].training.max_steps == 2400 and ablation.arms["static"].corpus.max_documents == 4500


def test_finetune_hyperparameters_of_the_file_apply_in_layer_order(tmp_path):
    text = in_base("  finetune: {max_length: 200, per_task: {squad: {max_length: 300}}}") + \
        "presets: {tiny: {finetune: {max_length: 100}}}\n"
    ablation = load_ablation(write(tmp_path, text), preset="tiny")
    assert ablation.finetune_hparams == {"per_task.squad.max_length": 300, "max_length": 100}
    squad = load_finetune_config(get_task("squad"), preset="tiny", overrides=ablation.finetune_overrides())
    assert squad.max_length == 100 == resolve_finetune(ablation.arms["a"], get_task("squad")).max_length


def test_batch_size_follows_table3():
    base = load_ablation("batch-size", preset="base").arms
    assert {a: (c.training.batch_size, c.training.learning_rate) for a, c in base.items()} == {
        "256": (256, 1e-4), "2k": (2048, 7e-4), "8k": (8192, 1e-3)}
    tiny = load_ablation("batch-size", preset="tiny").arms
    assert [c.training.batch_size for c in tiny.values()] == [32, 256, 1024]
    assert {c.training.batch_size * c.training.max_steps for c in tiny.values()} == {32 * 2400}  # same sequences
    assert [c.training.learning_rate for c in tiny.values()] == [1.5e-3, 3e-3, 6e-3]  # tuned per size
    assert tokens_per_step(tiny["2k"]) == 256 * 64


def test_equal_passes_refuses_unequal(tmp_path):
    ablation = load_ablation("batch-size", preset="tiny")
    cfg = ablation.arms["8k"]
    ablation.arms["8k"] = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, max_steps=64))
    with pytest.raises(BvrError, match="8k: 1024 x 64"):
        equal_passes(ablation)


@pytest.mark.parametrize(("preset", "budget"), [(None, 4096), ("tiny", 2048), ("small", 65536), ("base", 131072),
                                              ("large", 131072)])
def test_nsp_arms_fill_every_step_to_the_same_token_budget(preset, budget):
    """RoBERTa's dynamic batch: every input format, short (doc-sentences, sentence-pair) or full, fills each step to
    the preset's batch_size x max_length tokens; no arm declares a batch size of its own."""
    ablation = load_ablation("nsp", preset=preset)
    for arm, cfg in ablation.arms.items():
        assert cfg.training.tokens_per_batch == budget == cfg.training.batch_size * cfg.data.max_length, arm
        assert "training.batch_size" not in ablation.declared[arm] and tokens_per_step(cfg) == budget
    pair, doc = ablation.arms["sentence-pair"], ablation.arms["doc-sentences"]
    assert tokens_seen(pair) == tokens_seen(doc) == tokens_seen(ablation.arms["full-sentences"])
    if doc.data.max_length > SENTENCE_PAIR_TOKENS:  # tiny's 64 ids hold a sentence pair: no shorter there
        assert sequence_tokens(pair) < sequence_tokens(doc)  # shorter sequences: more of them a step, equal tokens


def test_equal_passes_counts_tokens_not_rows():
    """A token budget is compared as tokens: an arm filled to 4,096 tokens a step matches one of 32 x 128-token
    sequences, and one filled to 3,500 (doc-sentences at its old fixed batch, about 32 x 93.6 tokens) does not."""
    ablation = load_ablation("nsp")
    doc = ablation.arms["doc-sentences"]
    ablation.arms["segment-pair"] = dataclasses.replace(
        ablation.arms["segment-pair"],
        training=dataclasses.replace(ablation.arms["segment-pair"].training, tokens_per_batch=None))
    equal_passes(ablation)
    ablation.arms["doc-sentences"] = dataclasses.replace(
        doc, training=dataclasses.replace(doc.training, tokens_per_batch=3500))
    with pytest.raises(BvrError, match=r"doc-sentences: 3500 tokens per step x 1000 = 3500000"):
        equal_passes(ablation)


def test_equal_passes_refuses_unequal_tokens():
    ablation = load_ablation("nsp")
    cfg = ablation.arms["sentence-pair"]
    # Without its token budget, 32 sentence pairs a step are about half the tokens of the other arms' steps.
    ablation.arms["sentence-pair"] = dataclasses.replace(cfg, training=dataclasses.replace(
        cfg.training, batch_size=32, tokens_per_batch=None))
    with pytest.raises(BvrError, match="sentence-pair: 32 x 1000 x 64 tokens"):
        equal_passes(ablation)


@pytest.mark.parametrize("preset", [None, *PRESETS])
@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_experiments_plan_at_every_preset(name, preset, tmp_path):
    plan = make_plan(name, preset=preset, output_dir=tmp_path)
    assert plan.units() and plan.manifest_path.parent.parent == tmp_path / "ablations"


def test_bert_vs_roberta_recipes():
    arms = load_ablation("bert-vs-roberta", preset="tiny").arms
    assert arms["bert"].training.adam_betas == [0.9, 0.999] and arms["roberta"].training.adam_betas == [0.9, 0.98]
    assert arms["bert"].masking.mode == "static" and arms["roberta"].masking.mode == "dynamic"
    assert (arms["bert"].data.sentence_objective, arms["roberta"].data.sentence_objective) == ("nsp", "none")
    assert load_ablation("bert-vs-roberta").arms["roberta"].tokenizer.resolved_vocab_size == 50_000
    # tiny scales both vocabularies by one factor (30K:50K) and keeps the batch equal (docs/results.md)
    assert (arms["bert"].tokenizer.vocab_size, arms["roberta"].tokenizer.vocab_size) == (8192, 13653)
    assert arms["bert"].training.batch_size == arms["roberta"].training.batch_size == 32


GOOD = """\
description: test
base:
  masking: {dupe_factor: 5}
arms:
  a:
    masking: {mode: static}
  b:
    masking: {mode: dynamic}
control: true
"""


def test_minimal_file_and_defaults(tmp_path):
    ablation = load_ablation(write(tmp_path, GOOD), preset="tiny")
    assert ablation.name == "exp" and list(ablation.arms) == ["a", "b"]
    assert ablation.finetune_tasks == ["sst2", "mrpc", "stsb", "rte", "cola", "conll2003", "squad"]
    assert ablation.optional_tasks == ["mnli", "qnli"]
    assert ablation.arms["a"].masking.dupe_factor == 5 and ablation.arms["a"].model.num_layers == 2


def test_set_overrides_apply_to_all_arms(tmp_path):
    ablation = load_ablation(write(tmp_path, GOOD), preset="tiny",
                             overrides=["training.max_steps=7", "training.warmup_steps=1"])
    assert {c.training.max_steps for c in ablation.arms.values()} == {7}


def test_set_of_a_declared_key_is_refused(tmp_path):
    message = error_of(write(tmp_path, GOOD), overrides=["masking.mode=static"])
    assert "--set masking.mode" in message


def test_bad_set_value_names_the_set(tmp_path):
    message = error_of(write(tmp_path, GOOD), overrides=["training.max_steps=0"])
    assert "--set training.max_steps" in message


SMOKE = ["finetune.tasks=[rte]", "finetune.seeds=1", "finetune.max_train_examples=200",
         "finetune.per_task.rte.epochs=1", "evaluate.probes.tasks=[]", "evaluate.blimp.enabled=false",
         "pretrain_seeds=[4]"]


def test_set_shrinks_the_finetuning_and_evaluations_of_every_arm_and_the_control(tmp_path):
    path = write(tmp_path, GOOD + "pretrain_seeds: [0, 1, 2]\n")
    full = make_plan(path, preset="tiny", output_dir=tmp_path)
    smoke = make_plan(path, preset="tiny", overrides=SMOKE, output_dir=tmp_path)
    assert (full.tasks, full.seeds, len(full.arms)) == (["sst2", "mrpc", "stsb", "rte", "cola", "conll2003", "squad"],
                                                        [0, 1, 2, 3, 4], 9)
    assert (smoke.tasks, smoke.seeds) == (["rte"], [0])
    assert [arm.label for arm in smoke.arms] == ["a", "b", CONTROL_ARM] and smoke.arms[0].pretrain_seed == 4
    assert [unit.id for unit in smoke.units() if unit.kind.value in ("finetune", "probe", "blimp")] == [
        "finetune:a:rte", "finetune:b:rte", f"finetune:{CONTROL_ARM}:rte"]
    assert smoke.evaluations.probe_tasks == () and not smoke.evaluations.blimp
    for arm in smoke.arms:  # every arm and the control resolve the same shrunk settings
        assert (arm.config.finetune.seeds, arm.config.finetune.max_train_examples) == (1, 200)
    # The fine-tuning units get them as a preset's would: the cap, the task's own epochs, the tiny preset's rest.
    assert smoke.ablation.finetune_overrides()[-2:] == ["finetune.max_train_examples=200",
                                                        "finetune.per_task.rte.epochs=1"]
    rte = load_finetune_config(get_task("rte"), preset="tiny", overrides=smoke.ablation.finetune_overrides())
    before = load_finetune_config(get_task("rte"), preset="tiny", overrides=full.ablation.finetune_overrides())
    assert (rte.max_train_examples, rte.epochs, rte.learning_rate) == (200, 1, before.learning_rate)
    assert rte.hashed() != before.hashed()  # so each seed's cache folder differs from the full run's
    assert smoke.folder != full.folder and smoke.folder.name.startswith("exp-tiny-")  # and the manifest's


def test_set_of_a_declared_key_is_refused_beside_finetune_keys(tmp_path):
    message = error_of(write(tmp_path, GOOD), preset="tiny", overrides=[*SMOKE, "masking.mode=static"])
    assert message == "--set masking.mode: this key is what the arms differ in; setting it for every arm would " \
                      "erase the ablation"
    assert "erase the ablation" in error_of(write(tmp_path, GOOD), overrides=["masking={mode: static}"])


@pytest.mark.parametrize(("text", "message"), [
    ("pretrain_seeds=[1, 1]", "--set pretrain_seeds=[1, 1]: pretrain_seeds: expected a non-empty list of distinct "
                              "integers, got [1, 1]"),
    ("finetune.per_task.sst3.epochs=1", "--set finetune.per_task.sst3.epochs=1: finetune.per_task.sst3: unknown "
                                        "task 'sst3'. did you mean 'sst2'?"),
    ("finetune.seeds=0", "--set finetune.seeds=0: finetune.seeds: expected a positive integer, got 0"),
])
def test_a_bad_finetune_or_seed_set_names_the_set(tmp_path, text, message):
    assert error_of(write(tmp_path, GOOD), overrides=[text]) == message


def test_arms_differing_in_undeclared_key_are_refused(tmp_path):
    ablation = load_ablation(write(tmp_path, GOOD))
    cfg = ablation.arms["b"]
    ablation.arms["b"] = dataclasses.replace(cfg, training=dataclasses.replace(cfg.training, learning_rate=1e-3))
    with pytest.raises(BvrError, match=r"arms 'a' and 'b' differ in undeclared keys: training\.learning_rate"):
        check_arms(ablation)


def test_declared_but_unchanged_key_is_fine(tmp_path):
    text = GOOD.replace("masking: {mode: dynamic}", "masking: {mode: dynamic}\n    training: {learning_rate: 1.0e-3}")
    ablation = load_ablation(write(tmp_path, text), preset="tiny")
    assert "training.learning_rate" in ablation.declared["b"]
    assert "training.learning_rate" not in arm_differences(ablation)[("a", "b")]


def test_arm_preset_block_with_undeclared_key_is_refused(tmp_path):
    text = GOOD.replace("masking: {mode: dynamic}", "masking: {mode: dynamic}\n    presets:\n"
                        "      tiny: {training: {learning_rate: 1.0e-3}}")
    message = error_of(write(tmp_path, text), preset="small")
    assert "exp.yaml:10: arms.b.presets.tiny.training.learning_rate" in message and "'b'" in message


def test_unknown_top_level_key_names_file_line(tmp_path):
    message = error_of(write(tmp_path, GOOD + "seedz: [0]\n"))
    assert "exp.yaml:10: seedz: unknown key" in message


def test_bad_value_inside_arm_names_file_line_and_key(tmp_path):
    text = GOOD.replace("masking: {mode: dynamic}", "masking: {mode: dynamc}")
    message = error_of(write(tmp_path, text), preset="tiny")
    assert "exp.yaml:8: masking.mode" in message and "dynamc" in message and "arm 'b'" in message
    text = GOOD.replace("masking: {mode: dynamic}", "training: {batch_sise: 8}")
    message = error_of(write(tmp_path, text))
    assert "exp.yaml:8: training.batch_sise" in message and "unknown key" in message


def test_bad_value_in_base_names_file_line(tmp_path):
    message = error_of(write(tmp_path, GOOD.replace("dupe_factor: 5", "dupe_factor: 0")))
    assert "exp.yaml:3: masking.dupe_factor" in message


def in_base(line: str) -> str:
    """GOOD with ``line`` added to its base, at line 4."""
    return GOOD.replace("  masking: {dupe_factor: 5}\n", f"  masking: {{dupe_factor: 5}}\n{line}\n")


def test_control_seeds_add_initialisations_without_touching_the_arms(tmp_path):
    paired = make_plan(write(tmp_path, GOOD + "pretrain_seeds: [0, 1, 2]\n"), preset="tiny", output_dir=tmp_path)
    path = write(tmp_path, GOOD + "pretrain_seeds: [0, 1, 2]\ncontrol_seeds: [0, 1, 2, 3, 4, 5]\n", "own.yaml")
    own = make_plan(path, preset="tiny", output_dir=tmp_path)
    assert paired.ablation.control_seeds == [] and own.ablation.control_seeds == list(range(6))
    assert [a.label for a in own.pretrained] == [a.label for a in paired.pretrained] == [
        "a-p0", "a-p1", "a-p2", "b-p0", "b-p1", "b-p2"]
    assert [a.config for a in own.pretrained] == [a.config for a in paired.pretrained]  # the same caches
    controls = [a for a in own.arms if a.control]
    assert [(a.label, a.pretrain_seed, a.config.training.seed) for a in controls] == [
        (f"{CONTROL_ARM}-p{s}", s, s) for s in range(6)]
    # The same seeds in another order are the paired design; a preset block or --set gives the control its own.
    assert load_ablation(write(tmp_path, GOOD + "pretrain_seeds: [0, 1, 2]\ncontrol_seeds: [2, 0, 1]\n"),
                         preset="tiny").control_seeds == []
    block = load_ablation(write(tmp_path, GOOD + "presets: {tiny: {pretrain_seeds: [0, 1, 2], "
                                "control_seeds: [7, 8, 9]}}\n"), preset="tiny")
    assert (block.pretrain_seeds, block.control_initialisations) == ([0, 1, 2], [7, 8, 9])
    assert load_ablation(write(tmp_path, GOOD + "presets: {tiny: {control_seeds: [7, 8, 9]}}\n"),
                         preset="small").control_initialisations == [0]  # another preset's block does not apply
    assert load_ablation(write(tmp_path, GOOD), preset="tiny", overrides=["pretrain_seeds=[0, 1, 2]",
                                                                          "control_seeds=[3, 4, 5, 6]"]
                         ).control_initialisations == [3, 4, 5, 6]


@pytest.mark.parametrize(("text", "overrides", "fragment"), [
    (GOOD + "control_seeds: [1, 1]\n", [],
     "exp.yaml:10: control_seeds: expected a non-empty list of distinct integers"),
    (GOOD + "presets: {tiny: {control_seeds: []}}\n", [], "exp.yaml:10: presets.tiny.control_seeds: expected a "
     "non-empty list"),
    (GOOD.replace("control: true", "control: false") + "control_seeds: [0, 1, 2]\n", [],
     "exp.yaml:10: control_seeds: control_seeds lists the no-pretraining control's initialisations, but the file has "
     "no control"),
    (GOOD.replace("control: true", "control: false"), ["control_seeds=[0, 1, 2]"],
     "--set control_seeds=[0, 1, 2]: control_seeds lists the no-pretraining control's initialisations"),
])
def test_bad_control_seeds_are_refused_where_they_are_written(tmp_path, text, overrides, fragment):
    assert fragment in error_of(write(tmp_path, text), preset="tiny", overrides=overrides)


@pytest.mark.parametrize(("text", "fragment"), [
    ("description: x\narms:\n  a: {masking: {mode: static}}\n", "at least two arms"),
    (GOOD.replace("  a:\n", "  no-pretraining:\n"), "cannot name an arm"),
    (in_base("  finetune: {tasks: [sst3]}"), "exp.yaml:4: finetune.tasks: unknown task"),
    (GOOD + "presets: {huge: {}}\n", "exp.yaml:10: presets.huge: unknown preset"),
    (GOOD.replace("masking: {mode: static}", "name: x"), "exp.yaml:6: arms.a.name"),
    (GOOD.replace("masking: {mode: static}", "finetune: {seeds: 2}"),
     "exp.yaml:6: arms.a.finetune: 'finetune' is shared by every arm: set it in base or presets"),
    (GOOD + "pretrain_seeds: 0\n", "exp.yaml:10: pretrain_seeds"),
    (GOOD + "presets: {tiny: {pretrain_seeds: [1, 1]}}\n", "exp.yaml:10: presets.tiny.pretrain_seeds"),
    (in_base("  finetune: {per_task: {sst3: {epochs: 1}}}"),
     "exp.yaml:4: finetune.per_task.sst3: unknown task 'sst3'. did you mean 'sst2'"),
    (in_base("  evaluate: {probes: {tasks: [sst3]}}"), "exp.yaml:4: evaluate.probes.tasks: unknown task"),
    (in_base("  evaluate: {probes: {features: pooled}}"), "exp.yaml:4: evaluate.probes.features"),
    (in_base("  evaluate: {blimp: {per_paradigm: 0}}"), "exp.yaml:4: evaluate.blimp.per_paradigm"),
    (in_base("  evaluate: {blimps: {}}"), "exp.yaml:4: evaluate.blimps: unknown key"),
    # The old forms say where their keys moved.
    (GOOD + "pretrain_seeds: {default: [0], tiny: [0, 1, 2]}\n",
     "exp.yaml:10: pretrain_seeds: pretrain_seeds: {default: ..., NAME: ...} is the old form: write pretrain_seeds: "
     "[...] for every preset and presets: {NAME: {pretrain_seeds: [...]}} for one"),
    (GOOD + "finetune: {tasks: [sst2]}\n",
     "exp.yaml:10: finetune: a top-level 'finetune:' block is the old form: move its keys under base:"),
    (GOOD + "evaluate: {blimp: {per_paradigm: 50}}\n",
     "exp.yaml:10: evaluate: a top-level 'evaluate:' block is the old form: move its keys under base:"),
    (in_base("  finetune: {hparams: {epochs: 2}}"),
     "exp.yaml:4: finetune.hparams: finetune.hparams was removed: put its keys directly under finetune"),
    (in_base("  finetune: {presets: {tiny: {seeds: 2}}}"), "exp.yaml:4: finetune.presets: finetune.presets was "
     "removed: put a preset's fine-tuning settings under presets.NAME.finetune"),
    (in_base("  evaluate: {presets: {tiny: {}}}"), "exp.yaml:4: evaluate.presets: evaluate.presets was removed: put "
     "a preset's evaluation settings under presets.NAME.evaluate"),
    (in_base("  training: {lr: 1.0e-3}"), "exp.yaml:4: training.lr: training.lr was renamed: use "
     "training.learning_rate"),
    (in_base("  data: {nsp: false}"), "exp.yaml:4: data.nsp: data.nsp was replaced by data.sentence_objective: write "
     "data.sentence_objective: nsp (for true) or none (for false)"),
    (GOOD.replace("masking: {mode: static}", "masking: {whole_word: true}"),
     "exp.yaml:6: masking.whole_word (arm 'a'): masking.whole_word was replaced by masking.scheme: write "
     "masking.scheme: whole-word (or token)"),
])
def test_malformed_files_are_refused(tmp_path, text, fragment):
    assert fragment in error_of(write(tmp_path, text))


def test_unknown_experiment_lists_known():
    assert "known experiments: " in error_of("no-such-ablation")


def test_flatten():
    assert flatten({"a": {"b": 1, "c": [1, 2]}, "d": None}) == {"a.b": 1, "a.c": [1, 2], "d": None}
