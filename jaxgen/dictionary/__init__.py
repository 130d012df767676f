"""PADL: dictionary learning with a global penalty on the number of activated atoms.

Columns of ``X`` are samples: ``X`` is (d, N), the dictionary (d, K) and the codes (K, N).
"""

from ._padl import (
    PADLResult as PADLResult,
)
from ._padl import (
    debias_codes as debias_codes,
)
from ._padl import (
    estimate_hyperparameters as estimate_hyperparameters,
)
from ._padl import (
    fit_padl as fit_padl,
)
from ._padl import (
    prune_refit as prune_refit,
)
from ._padl import (
    storage_bits as storage_bits,
)
from ._padl import (
    transform as transform,
)
from ._prox import (
    project_l1_ball as project_l1_ball,
)
from ._prox import (
    prox_row_l1_count as prox_row_l1_count,
)
from ._prox import (
    prox_row_l1_linf as prox_row_l1_linf,
)
from ._prox import (
    soft_threshold as soft_threshold,
)
from ._solvers import (
    dict_update as dict_update,
)
from ._solvers import (
    fista_codes as fista_codes,
)
from ._solvers import (
    lipschitz_constant as lipschitz_constant,
)
from ._solvers import (
    padl_objective as padl_objective,
)
