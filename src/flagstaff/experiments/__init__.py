"""Experiments: definitions and validation, exposure and attribution, statistics, results.

Pure: plain data in, plain data out, no I/O. ``model`` holds the definitions in PostHog's
shapes, ``exposure`` the incremental per-experiment aggregates, ``stats`` the Bayesian and
frequentist comparisons, ``results`` the response the results endpoint returns.
"""
