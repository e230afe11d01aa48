"""Units of time, defined once."""

DAY_S = 86_400
DAY_MS = DAY_S * 1000
