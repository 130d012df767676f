"""Optimal-transport problems and solvers: the semi-relaxed Gromov-Wasserstein problem."""

from ._srgw import (
    SrgwBarycenterOutput as SrgwBarycenterOutput,
    SrgwOutput as SrgwOutput,
    exact_line_search as exact_line_search,
    lmo_rows as lmo_rows,
    round_argmax as round_argmax,
    round_greedy as round_greedy,
    solve_srgw_coupling as solve_srgw_coupling,
    solve_srgw_couplings as solve_srgw_couplings,
    srgw_barycenter as srgw_barycenter,
    srgw_grad_T as srgw_grad_T,
    srgw_objective as srgw_objective,
    w_step as w_step,
)
