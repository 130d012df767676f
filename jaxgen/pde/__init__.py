"""Fokker-Planck residuals and Neural Galerkin normalizing-flow transition densities."""

from ._flow import (
    flow_parameters as flow_parameters,
    from_y as from_y,
    frozen_gaussian_reference as frozen_gaussian_reference,
    log_abs_det_jphi as log_abs_det_jphi,
    to_y as to_y,
    TransitionFlow as TransitionFlow,
)
from ._models import (
    AbstractDiffusionModel as AbstractDiffusionModel,
    cir_transition_params as cir_transition_params,
    CoxIngersollRoss as CoxIngersollRoss,
    exact_log_transition as exact_log_transition,
    Heston as Heston,
    OrnsteinUhlenbeck as OrnsteinUhlenbeck,
    sample_cir_exact as sample_cir_exact,
    simulate_path as simulate_path,
)
from ._ncx2 import log_chi2_pdf as log_chi2_pdf, log_ncx2_pdf as log_ncx2_pdf
from ._residual import fp_log_residual as fp_log_residual, fp_log_rhs as fp_log_rhs
