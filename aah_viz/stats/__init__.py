"""Statistics on plain numbers, in one place (numpy and scipy, no run, no table, no torch).

- ``resampling``: seeded bootstrap intervals: of a statistic of the values (mean, median), of a difference
  of means, of each column's mean resampling whole clusters; the percentile interval they all end in.
- ``significance``: Welch's t-test, permutation and sign-flip tests, the p-value against a null, Holm.
- ``ranks``: ranks (scipy's), Spearman's rho row by row, within strata with a null and an interval,
  and the Mantel test.
- ``proportions``: a share of successes with Wilson's interval.

Every random draw comes from ``numpy.random.default_rng``: a seed, or the generator a caller hands in.
"""
