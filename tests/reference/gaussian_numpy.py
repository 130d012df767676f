"""Independent numpy/scipy oracles for Gaussian straight-line flows (no jaxgen import)."""

import numpy as np
import scipy.linalg


def random_spd(rng: np.random.Generator, dim: int, jitter: float = 0.3) -> np.ndarray:
    a = rng.normal(size=(dim, dim))
    return a @ a.T + jitter * np.eye(dim)


def geometric_mean(s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
    """P = W^{-T} Lambda^{1/2} W^{-1} from the generalised eigenproblem S1 w = lambda S0 w."""
    evals, w = scipy.linalg.eigh(s1, s0)
    w_inv = np.linalg.inv(w)
    return w_inv.T @ np.diag(np.sqrt(np.clip(evals, 0, None))) @ w_inv


def gaussian_w2(m_a, s_a, m_b, s_b) -> float:
    root = scipy.linalg.sqrtm(s_a)
    cross = scipy.linalg.sqrtm(root @ s_b @ root).real
    return float(np.sqrt(max(np.sum((m_a - m_b) ** 2) + np.trace(s_a + s_b - 2 * cross), 0.0)))
