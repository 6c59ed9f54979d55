"""Numbers and names as people read them, shared by the command line, the ablation runner and the reports (no heavy
imports)."""

from __future__ import annotations

import math


def literal(value: object) -> str:
    r"""``value`` (anything a user wrote or named) as Rich markup that prints as itself: its square brackets escaped,
    so that ``out[/]x`` or ``exp[red]y`` is shown as written (a line with no markup of its own is printed with
    ``markup=False`` instead).

    >>> literal("out[/]x"), literal("exp[red]y"), literal("[MASK]"), literal(3)
    ('out\\[/]x', 'exp\\[red]y', '[MASK]', '3')
    """
    from rich.markup import escape

    return escape(str(value))


def duration(seconds: float | None) -> str:
    """'4.2 s', '3 min 05 s', '2 h 04 min'; '—' when unknown.

    >>> duration(4.24), duration(185), duration(7440), duration(None)
    ('4.2 s', '3 min 05 s', '2 h 04 min', '—')
    """
    if seconds is None or math.isnan(seconds):
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes} min {secs:02d} s" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def size(n_bytes: float) -> str:
    """A number of bytes in decimal units: '512 B', '3.4 MB', '12.0 GB'.

    >>> size(512), size(3_400_000), size(12e9), size(2.5e12)
    ('512 B', '3.4 MB', '12.0 GB', '2.5 TB')
    """
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n_bytes) >= scale:
            return f"{n_bytes / scale:.1f} {unit}"
    return f"{int(n_bytes)} B"


def points(score: float | None, scale: float = 100.0) -> str:
    """A score in points, as the reports print it: a fraction times ``scale`` (1 for a score logged in points,
    SQuAD's), one decimal; '—' when unknown.

    >>> points(0.6130), points(81.04, scale=1), points(None)
    ('61.3', '81.0', '—')
    """
    if score is None or math.isnan(score):
        return "—"
    return f"{score * scale:.1f}"


def pretrain_summary(m: dict[str, float]) -> str:
    """A pretraining run's numbers as a sentence: losses in nats, accuracies in points, time and sizes readable.

    >>> pretrain_summary({"steps": 300, "epochs": 1.94, "tokens_seen": 612000, "train/mlm_loss": 6.6123,
    ...                   "val/mlm_loss": 7.2171, "val/perplexity": 1362.8, "val/nsp_acc": 0.613,
    ...                   "wall_seconds": 125.0, "params_total": 1.2e6, "params_non_embedding": 3.1e5,
    ...                   "mask_max_times_seen": 2})
    '300 steps (1.94 epochs, 0.61M tokens); MLM loss 6.612 training, 7.217 validation (perplexity 1363); NSP \
accuracy 61.3; 2 min 05 s; 1.20M parameters, 0.31M without embeddings; each mask seen up to 2 times'
    """
    parts = []
    if "steps" in m:
        extra = [f"{m['epochs']:.2f} epochs" if "epochs" in m else "",
                 f"{m['tokens_seen'] / 1e6:.2f}M tokens" if "tokens_seen" in m else ""]
        extra = [e for e in extra if e]
        parts.append(f"{m['steps']:.0f} steps" + (f" ({', '.join(extra)})" if extra else ""))
    losses = [f"{m[k]:.3f} {name}" for k, name in (("train/mlm_loss", "training"), ("val/mlm_loss", "validation"))
              if k in m]
    if losses:
        perplexity = f" (perplexity {m['val/perplexity']:.0f})" if "val/perplexity" in m else ""
        parts.append("MLM loss " + ", ".join(losses) + perplexity)
    parts += [f"{name} accuracy {points(m[k])}" for k, name in (("val/nsp_acc", "NSP"), ("val/sop_acc", "SOP"))
              if k in m]
    if "wall_seconds" in m:
        parts.append(duration(m["wall_seconds"]))
    if "params_total" in m:
        parts.append(f"{m['params_total'] / 1e6:.2f}M parameters" + (
            f", {m['params_non_embedding'] / 1e6:.2f}M without embeddings" if "params_non_embedding" in m else ""))
    if (times := round(m.get("mask_max_times_seen", 0))) > 0:  # once: dynamic masking, or a single pass
        parts.append(f"each mask seen up to {times} times" if times > 1 else "each mask seen once")
    return "; ".join(parts)
