"""The console's templates: Jinja2 with autoescaping on for every template, and undefined
names as errors (a typo in a template fails its test instead of rendering nothing)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2

from flagstaff.common.clock import minute_text
from flagstaff.console import usage, views

TEMPLATE_DIR = Path(__file__).parent / "templates"


def _when(ms: int | None) -> str:
    if ms is None:
        return "never"
    return minute_text(datetime.fromtimestamp(ms / 1000, UTC))


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATE_DIR),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["when"] = _when
    env.globals.update(
        OPERATOR_LABELS=views.OPERATOR_LABELS,
        PROPERTY_OPERATOR_GROUPS=views.PROPERTY_OPERATOR_GROUPS,
        COHORT_OPERATOR_CHOICES=views.COHORT_OPERATOR_CHOICES,
        FLAG_OPERATOR_CHOICES=views.FLAG_OPERATOR_CHOICES,
        FILTER_TYPES=views.FILTER_TYPES,
        FLAG_TYPES=[t.value for t in views.FlagType],
        sparkline=usage.sparkline,
    )
    return env


_ENV = _environment()


def render(name: str, **context: Any) -> str:
    return _ENV.get_template(name).render(**context)
