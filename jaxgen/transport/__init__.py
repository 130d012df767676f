"""Optimal-transport problems and solvers: the semi-relaxed Gromov-Wasserstein problem."""

from ._srgw import (
    SrgwBarycenterOutput as SrgwBarycenterOutput,
)
from ._srgw import (
    SrgwOutput as SrgwOutput,
)
from ._srgw import (
    exact_line_search as exact_line_search,
)
from ._srgw import (
    lmo_rows as lmo_rows,
)
from ._srgw import (
    round_argmax as round_argmax,
)
from ._srgw import (
    round_greedy as round_greedy,
)
from ._srgw import (
    solve_srgw_coupling as solve_srgw_coupling,
)
from ._srgw import (
    srgw_barycenter as srgw_barycenter,
)
from ._srgw import (
    srgw_grad_T as srgw_grad_T,
)
from ._srgw import (
    srgw_objective as srgw_objective,
)
from ._srgw import (
    w_step as w_step,
)
