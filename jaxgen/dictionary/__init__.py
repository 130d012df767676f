"""PADL: dictionary learning with a global penalty on the number of activated atoms.

Columns of ``X`` are samples: ``X`` is (d, N), the dictionary (d, K) and the codes (K, N).
"""

from ._padl import (
    PADLResult as PADLResult,
    debias_codes as debias_codes,
    estimate_hyperparameters as estimate_hyperparameters,
    fit_padl as fit_padl,
    pca_noise_floor as pca_noise_floor,
    prune_refit as prune_refit,
    storage_bits as storage_bits,
    transform as transform,
)
from ._prox import (
    project_l1_ball as project_l1_ball,
    prox_row_l1_count as prox_row_l1_count,
    prox_row_l1_linf as prox_row_l1_linf,
    soft_threshold as soft_threshold,
)
from ._solvers import (
    dict_update as dict_update,
    fista_codes as fista_codes,
    lipschitz_constant as lipschitz_constant,
    padl_objective as padl_objective,
)
