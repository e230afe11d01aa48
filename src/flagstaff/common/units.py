"""Units of time, defined once."""

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_S = 86_400
DAY_MS = DAY_S * 1000
