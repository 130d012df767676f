"""Fokker-Planck residuals and Neural Galerkin normalizing-flow transition densities."""

from ._flow import (
    TransitionFlow as TransitionFlow,
    flow_parameters as flow_parameters,
    from_y as from_y,
    frozen_gaussian_reference as frozen_gaussian_reference,
    log_abs_det_jphi as log_abs_det_jphi,
    to_y as to_y,
)
from ._galerkin import (
    ThetaPath as ThetaPath,
    cir_condition_sampler as cir_condition_sampler,
    fit_spacetime as fit_spacetime,
    flow_at as flow_at,
    heston_condition_sampler as heston_condition_sampler,
    integrate_ng as integrate_ng,
    ng_velocity as ng_velocity,
    spacetime_loss as spacetime_loss,
)
from ._inference import (
    DelayedAcceptanceResult as DelayedAcceptanceResult,
    DelayedAcceptanceRun as DelayedAcceptanceRun,
    NutsResult as NutsResult,
    box_inverse as box_inverse,
    box_transform as box_transform,
    delayed_acceptance_hmc as delayed_acceptance_hmc,
    run_delayed_acceptance as run_delayed_acceptance,
    run_nuts as run_nuts,
)
from ._likelihood import (
    euler_path_loglik as euler_path_loglik,
    exact_path_loglik as exact_path_loglik,
    surrogate_path_loglik as surrogate_path_loglik,
)
from ._models import (
    AbstractDiffusionModel as AbstractDiffusionModel,
    CoxIngersollRoss as CoxIngersollRoss,
    Heston as Heston,
    OrnsteinUhlenbeck as OrnsteinUhlenbeck,
    cir_transition_params as cir_transition_params,
    exact_log_transition as exact_log_transition,
    sample_cir_exact as sample_cir_exact,
    simulate_path as simulate_path,
)
from ._ncx2 import log_chi2_pdf as log_chi2_pdf, log_ncx2_pdf as log_ncx2_pdf
from ._residual import fp_log_residual as fp_log_residual, fp_log_rhs as fp_log_rhs
