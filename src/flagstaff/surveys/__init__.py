"""Surveys and early access features: pure (no I/O).

``model`` (the survey record and the rules of a save), ``validation`` (bodies -> surveys,
errors per field), ``flags`` (the targeting and internal targeting flags a survey maintains),
``public`` (what posthog-js reads), ``management`` (the management API's shape), ``stats``
(counts and answer summaries, kept up to date one event at a time), ``early_access``.
"""
