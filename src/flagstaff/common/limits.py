"""Limits of the contract that more than one part enforces, defined once."""

MAX_GROUP_TYPES = 5
"""Group type indexes 0-4 (contract section 8)."""
MAX_KEY_LENGTH = 400
"""The longest flag (and experiment) key."""
