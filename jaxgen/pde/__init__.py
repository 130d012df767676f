"""Fokker-Planck residuals and Neural Galerkin normalizing-flow transition densities."""

from ._flow import (
    TransitionFlow as TransitionFlow,
)
from ._flow import (
    flow_parameters as flow_parameters,
)
from ._flow import (
    from_y as from_y,
)
from ._flow import (
    frozen_gaussian_reference as frozen_gaussian_reference,
)
from ._flow import (
    log_abs_det_jphi as log_abs_det_jphi,
)
from ._flow import (
    to_y as to_y,
)
from ._galerkin import (
    ThetaPath as ThetaPath,
)
from ._galerkin import (
    cir_condition_sampler as cir_condition_sampler,
)
from ._galerkin import (
    flow_at as flow_at,
)
from ._galerkin import (
    heston_condition_sampler as heston_condition_sampler,
)
from ._galerkin import (
    integrate_ng as integrate_ng,
)
from ._galerkin import (
    ng_velocity as ng_velocity,
)
from ._galerkin import (
    spacetime_loss as spacetime_loss,
)
from ._galerkin import (
    spacetime_train as spacetime_train,
)
from ._inference import (
    NutsResult as NutsResult,
)
from ._inference import (
    box_inverse as box_inverse,
)
from ._inference import (
    box_transform as box_transform,
)
from ._inference import (
    run_nuts as run_nuts,
)
from ._likelihood import (
    euler_path_loglik as euler_path_loglik,
)
from ._likelihood import (
    exact_path_loglik as exact_path_loglik,
)
from ._likelihood import (
    surrogate_path_loglik as surrogate_path_loglik,
)
from ._models import (
    AbstractDiffusionModel as AbstractDiffusionModel,
)
from ._models import (
    CoxIngersollRoss as CoxIngersollRoss,
)
from ._models import (
    Heston as Heston,
)
from ._models import (
    OrnsteinUhlenbeck as OrnsteinUhlenbeck,
)
from ._models import (
    cir_transition_params as cir_transition_params,
)
from ._models import (
    exact_log_transition as exact_log_transition,
)
from ._models import (
    sample_cir_exact as sample_cir_exact,
)
from ._models import (
    simulate_path as simulate_path,
)
from ._ncx2 import log_chi2_pdf as log_chi2_pdf
from ._ncx2 import log_ncx2_pdf as log_ncx2_pdf
from ._residual import fp_log_residual as fp_log_residual
from ._residual import fp_log_rhs as fp_log_rhs
