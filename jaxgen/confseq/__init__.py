"""Time-uniform confidence sequences by betting: 1-D wealth processes and multivariate regions.

Bonferroni / max-wealth / portfolio lifts of 1-D hedged betting CSs, the bounding-box and
l_p-ellipsoid outer approximations of the portfolio region, and the PrPl-EB and sub-Gaussian-ball
baselines.
"""

from ._baselines import (
    predmix_eb_bonferroni as predmix_eb_bonferroni,
)
from ._baselines import (
    subgaussian_ball as subgaussian_ball,
)
from ._betting import (
    agrapa_bets as agrapa_bets,
)
from ._betting import (
    log_wealth as log_wealth,
)
from ._betting import (
    ons_bets as ons_bets,
)
from ._betting import (
    plugin_stats as plugin_stats,
)
from ._betting import (
    prpl_bets as prpl_bets,
)
from ._coverage import excluded_path as excluded_path
from ._cs1d import betting_cs as betting_cs
from ._intervals import (
    cs_exact as cs_exact,
)
from ._intervals import (
    cs_grid as cs_grid,
)
from ._intervals import (
    wealth_min_lower_bound as wealth_min_lower_bound,
)
from ._regions import (
    KINDS as KINDS,
)
from ._regions import (
    ConfidenceRegion as ConfidenceRegion,
)
from ._regions import (
    confidence_region as confidence_region,
)
from ._regions import (
    region_log_wealth as region_log_wealth,
)
from ._usecases import (
    ABTestResult as ABTestResult,
)
from ._usecases import (
    ModelComparison as ModelComparison,
)
from ._usecases import (
    ab_test as ab_test,
)
from ._usecases import (
    compare_models as compare_models,
)
from ._usecases import (
    ipw_pseudo_outcomes as ipw_pseudo_outcomes,
)
