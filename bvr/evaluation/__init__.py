"""Evaluations of pretrained encoders without fine-tuning, what pretraining alone put in them: BLiMP by
pseudo-log-likelihood (:mod:`bvr.evaluation.blimp`), linear probes on frozen features (:mod:`bvr.evaluation.probe`),
and one of either inside an ablation, cached and logged (:mod:`bvr.evaluation.run`). Importing it loads no torch.
"""
