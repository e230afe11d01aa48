"""Flagstaff: feature flags and product events, speaking the PostHog public API."""

__version__ = "0.1.0"
