"""bvr: controlled BERT vs RoBERTa pretraining ablations, fine-tuning and reports."""

__version__ = "0.1.0"
