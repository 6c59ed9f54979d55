"""All configuration of bvr: typed sections, THE YAML loader, the layering, presets and ``--set`` overrides. The
``model`` section is the encoder's own :class:`~bvr.model.encoder_config.ModelConfig`."""

from bvr.config.finetune import (
    HYPERPARAMETERS,
    NOT_HASHED,
    PROBE_KINDS,
    SENTENCE_FEATURES,
    TOKEN_FEATURES,
    DataSettings,
    EvaluateConfig,
    FinetuneConfig,
    GridPoint,
    check_task_block,
    check_task_names,
)
from bvr.config.layering import Layer, at, flatten, mapping, override_layer, parse_override, sub_origins
from bvr.config.loading import (
    PRESETS_DIR,
    Config,
    build_config,
    config_hash,
    dump_config,
    load_config,
    preset_names,
    preset_path,
    resolve_finetune,
)
from bvr.config.pretraining import (
    CORPUS_SOURCES,
    INPUT_FORMATS,
    MASKING_MODES,
    MASKING_SCHEMES,
    PRECISIONS,
    DataConfig,
    TrainingConfig,
)
from bvr.config.yaml import node_lines, parse_yaml, read_yaml
from bvr.model.encoder_config import FAMILIES, ModelConfig

__all__ = [
    "CORPUS_SOURCES", "FAMILIES", "HYPERPARAMETERS", "INPUT_FORMATS", "MASKING_MODES", "MASKING_SCHEMES", "NOT_HASHED",
    "PRECISIONS", "PRESETS_DIR", "PROBE_KINDS", "SENTENCE_FEATURES", "TOKEN_FEATURES", "Config", "DataConfig",
    "DataSettings", "EvaluateConfig", "FinetuneConfig", "GridPoint", "Layer", "ModelConfig", "TrainingConfig", "at",
    "build_config", "check_task_block", "check_task_names", "config_hash", "dump_config", "flatten", "load_config",
    "mapping", "node_lines", "override_layer", "parse_override", "parse_yaml", "preset_names", "preset_path",
    "read_yaml", "resolve_finetune", "sub_origins",
]
