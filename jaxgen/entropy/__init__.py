"""Match-length (Kontoyiannis) entropy-rate estimators and model-free training-data filters.

`match_lengths` (suffix array, host numpy) and its brute-force reference, the estimators
`entropy_rate` (mean and inverse forms, increasing or sliding window, bits per symbol), per-
document scores, text-diversity metrics and the H_K / log-probability / random filters used
against model collapse; `markov_entropy_rate` and `sample_markov` give ground truth.
"""

from ._filters import (
    FilterResult as FilterResult,
)
from ._filters import (
    diversity_metrics as diversity_metrics,
)
from ._filters import (
    filter_by_entropy as filter_by_entropy,
)
from ._filters import (
    filter_by_logprob as filter_by_logprob,
)
from ._filters import (
    filter_random as filter_random,
)
from ._filters import (
    score_documents as score_documents,
)
from ._kontoyiannis import (
    FORMS as FORMS,
)
from ._kontoyiannis import (
    entropy_rate as entropy_rate,
)
from ._kontoyiannis import (
    markov_entropy_rate as markov_entropy_rate,
)
from ._kontoyiannis import (
    match_lengths as match_lengths,
)
from ._kontoyiannis import (
    match_lengths_bruteforce as match_lengths_bruteforce,
)
from ._kontoyiannis import (
    sample_markov as sample_markov,
)
from ._kontoyiannis import (
    to_symbols as to_symbols,
)
