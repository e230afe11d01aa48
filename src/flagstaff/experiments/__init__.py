"""Experiments: definitions and validation, exposure and attribution, statistics, results.

Pure: plain data in, plain data out, no I/O. ``model`` holds the definitions in PostHog's
shapes, ``exposure`` the incremental per-experiment aggregates, ``stats`` the Bayesian and
frequentist comparisons, ``results`` the response the results endpoint returns.

``model`` and ``exposure`` import neither numpy nor scipy, so the ingest path can use them
freely; ``stats`` and ``results`` import scipy (about a second of CPU and 100 MB on first
import here): import them where results are computed, not at a worker's start.
"""
