"""Time-uniform confidence sequences by betting: 1-D wealth processes and multivariate regions.

Bonferroni / max-wealth / portfolio lifts of 1-D hedged betting CSs, the bounding-box and
l_p-ellipsoid outer approximations of the portfolio region, and the PrPl-EB and sub-Gaussian-ball
baselines.
"""

from ._baselines import (
    predmix_eb_bonferroni as predmix_eb_bonferroni,
    subgaussian_ball as subgaussian_ball,
)
from ._betting import (
    agrapa_bets as agrapa_bets,
    log_wealth as log_wealth,
    ons_bets as ons_bets,
    plugin_stats as plugin_stats,
    prpl_bets as prpl_bets,
)
from ._coverage import excluded_path as excluded_path, miscoverage as miscoverage
from ._cs1d import betting_cs as betting_cs
from ._intervals import (
    cs_exact as cs_exact,
    cs_grid as cs_grid,
    wealth_min_lower_bound as wealth_min_lower_bound,
)
from ._regions import (
    KINDS as KINDS,
    ConfidenceRegion as ConfidenceRegion,
    confidence_region as confidence_region,
    region_log_wealth as region_log_wealth,
)
from ._usecases import (
    ABTestResult as ABTestResult,
    ModelComparison as ModelComparison,
    ab_test as ab_test,
    compare_models as compare_models,
    ipw_pseudo_outcomes as ipw_pseudo_outcomes,
)
