"""Linear probes on standardised features: multinomial logistic regression by preconditioned L-BFGS
(:func:`fit_logistic`) and ridge regression from its normal equations (:func:`fit_ridge`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from bvr.tasks.registry import TaskSpec

MAX_ITERATIONS = 500
"""Most L-BFGS iterations of one logistic fit."""
GRAD_TOLERANCE = 1e-5
"""L-BFGS stops when the largest component of the preconditioned gradient is below this. There the Hessian is close
to the identity, so the objective is then within about ``dim * classes * tol**2 / 2`` of its minimum; on CoNLL-2003
the held-out F1 of every grid point agrees to four decimals with that of a 1e-6 tolerance, at 60% of the time."""
CHANGE_TOLERANCE = 1e-12
"""L-BFGS also stops when the loss or the step changes by less than this."""
HISTORY_SIZE = 20
"""L-BFGS curvature pairs kept."""
CURVATURE = 0.25
"""Log-loss curvature the preconditioner assumes per unit of feature variance: ``p (1 - p)`` at its largest."""


@dataclass
class LinearProbe:
    """A fitted probe: standardisation with its training data's statistics, then a linear map, in float64."""

    mean: torch.Tensor  # (dim,)
    scale: torch.Tensor  # (dim,): 1 where a feature is constant
    weight: torch.Tensor  # (dim, outputs): classes, or 1 for regression
    bias: torch.Tensor  # (outputs,)
    l2: float
    iterations: int = 0  # L-BFGS's (0 for ridge's closed form)
    converged: bool = True  # stopped by a tolerance rather than by MAX_ITERATIONS

    def standardise(self, x: torch.Tensor) -> torch.Tensor:
        return (x.double() - self.mean) / self.scale

    def scores(self, x: torch.Tensor) -> torch.Tensor:
        """(rows, dim) features -> (rows, outputs) logits or predicted scores."""
        return self.standardise(x) @ self.weight + self.bias

    def predict(self, x: torch.Tensor, regression: bool) -> torch.Tensor:
        """Predicted class ids (int64), or scores (float64) when ``regression``: (rows,)."""
        scores = self.scores(x)
        return scores[:, 0] if regression else scores.argmax(dim=-1)


@dataclass
class Standardised:
    """Training features standardised, with the eigenbasis of their covariance (L-BFGS's preconditioner)."""

    z: torch.Tensor  # (rows, dim) float64, a sparse CSR matrix when built ``sparse``
    mean: torch.Tensor  # (dim,): zeros when ``sparse``
    scale: torch.Tensor  # (dim,)
    eigenvalues: torch.Tensor  # (dim,) of z^T z / rows, ascending; with eigenvectors None, its diagonal
    eigenvectors: torch.Tensor | None  # (dim, dim), one per column; None for the identity (a diagonal preconditioner)

    @classmethod
    def of(cls, x: torch.Tensor, sparse: bool = False) -> Standardised:
        """Standardise (rows, dim) features and diagonalise their covariance (once for every L2 strength).

        ``sparse``: for wide, mostly zero, nearly uncorrelated features (word counts), whose eigendecomposition would
        cost far more than the fits: scaled but not centred (a sparse CSR matrix), preconditioned by ``z^T z``'s
        diagonal only. The optimum is the centred one's (the unpenalised bias absorbs the means).
        """
        x = x.double()
        mean, scale = x.mean(dim=0), x.std(dim=0, correction=0)  # (dim,) each
        scale = torch.where(scale > 1e-12, scale, torch.ones_like(scale))  # a constant column gets 1
        if sparse:
            z = x / scale
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
                return cls(z.to_sparse_csr(), torch.zeros_like(mean), scale, z.pow(2).mean(dim=0), None)
        z = (x - mean) / scale
        eigenvalues, eigenvectors = torch.linalg.eigh(z.T @ z / len(z))
        return cls(z, mean, scale, eigenvalues.clamp(min=0.0), eigenvectors)

    def rotate(self, m: torch.Tensor) -> torch.Tensor:
        """(…, dim) -> (…, dim) in the eigenbasis: ``m @ V``."""
        return m if self.eigenvectors is None else m @ self.eigenvectors

    def unrotate(self, m: torch.Tensor) -> torch.Tensor:
        """The inverse of :meth:`rotate`: ``m @ V^T``."""
        return m if self.eigenvectors is None else m @ self.eigenvectors.T


def fit_logistic(
    data: Standardised, y: torch.Tensor, num_classes: int, l2: float,
    start: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, int, bool]:
    """Multinomial logistic regression by full-batch L-BFGS: mean cross-entropy + ``l2 / 2 * ||W||^2``.

    Frozen features are strongly correlated (covariance condition numbers of 1e6 to 1e8 are usual), which leaves
    plain L-BFGS hundreds of iterations from the optimum at weak penalties. It therefore works in preconditioned
    coordinates ``C``, ``W^T = (C * p) V^T`` with ``V`` the covariance's eigenvectors and
    ``p = (CURVATURE * eigenvalue + l2) ** -0.5``, where the objective's Hessian is close to the identity; the
    optimum is the same (the problem is strictly convex), reached in a few to a few dozen iterations.
    :data:`GRAD_TOLERANCE` applies to the gradient in these coordinates. The gradient is written out: ``(P - Y)^T Z``
    reads ``Z`` row by row, where autograd's ``Z^T (P - Y)`` runs several times slower on a CPU.

    ``start``: weight (dim, classes) and bias (classes,) to start from (None: zeros). Returns the weight, the bias,
    the iterations run, and whether a tolerance (not :data:`MAX_ITERATIONS`) stopped them.
    """
    z, (n, dim) = data.z, data.z.shape
    p = (CURVATURE * data.eigenvalues + l2).rsqrt()  # (dim,)
    # (classes, dim): the gradient (P - Y)^T Z V * p is then contiguous, as L-BFGS needs.
    coords = data.rotate(start[0].T) / p if start is not None else torch.zeros(num_classes, dim, dtype=z.dtype)
    bias = start[1].clone() if start is not None else torch.zeros(num_classes, dtype=z.dtype)
    targets = F.one_hot(y, num_classes).to(z.dtype)  # (rows, classes)
    optimizer = torch.optim.LBFGS([coords, bias], lr=1.0, max_iter=MAX_ITERATIONS, tolerance_grad=GRAD_TOLERANCE,
                                  tolerance_change=CHANGE_TOLERANCE, history_size=HISTORY_SIZE,
                                  line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        weight = data.unrotate(coords * p)  # (classes, dim)
        log_probs = torch.addmm(bias, z, weight.T).log_softmax(dim=-1)  # (rows, classes)
        loss = -(log_probs * targets).sum() / n + 0.5 * l2 * weight.pow(2).sum()
        residual = (log_probs.exp() - targets) / n  # (rows, classes): d loss / d logits
        coords.grad = data.rotate(residual.T @ z + l2 * weight) * p
        bias.grad = residual.sum(dim=0)
        return loss

    optimizer.step(closure)
    iterations = int(optimizer.state[coords]["n_iter"])
    return data.unrotate(coords * p).T, bias, iterations, iterations < MAX_ITERATIONS


def fit_ridge(z: torch.Tensor, y: torch.Tensor, l2: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Ridge regression, exactly: minimise mean squared error / 2 + ``l2 / 2 * ||w||^2`` (the bias is free), so
    ``(Zc^T Zc / n + l2 I) w = Zc^T (y - mean y) / n`` on the centred data and ``b = mean y - mean z . w``. Returns
    weight (dim, 1) and bias (1,), float64."""
    z, y = z.double(), y.double()
    z_mean, y_mean = z.mean(dim=0), y.mean()
    centred = z - z_mean
    n, dim = z.shape
    gram = centred.T @ centred / n + l2 * torch.eye(dim, dtype=torch.float64)
    weight = torch.linalg.solve(gram, centred.T @ (y - y_mean) / n)  # (dim,)
    return weight[:, None], (y_mean - z_mean @ weight)[None]


def fit_probe(x: torch.Tensor | Standardised, y: torch.Tensor, spec: TaskSpec, l2: float,
              start: LinearProbe | None = None) -> LinearProbe:
    """Fit the task's probe with penalty ``l2`` on (rows, dim) features, standardised here unless they already are;
    ``start`` (logistic probes only) warm-starts L-BFGS from another probe's weights: the same optimum, fewer steps."""
    data = x if isinstance(x, Standardised) else Standardised.of(x)
    if spec.kind == "regression":
        weight, bias = fit_ridge(data.z.to_dense() if data.z.is_sparse_csr else data.z, y, l2)  # it centres z
        return LinearProbe(data.mean, data.scale, weight, bias, l2)
    initial = (start.weight, start.bias) if start is not None else None
    weight, bias, iterations, converged = fit_logistic(data, y, spec.num_labels, l2, initial)
    return LinearProbe(data.mean, data.scale, weight, bias, l2, iterations, converged)
