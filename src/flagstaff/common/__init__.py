"""Pure definitions every part shares: units of time, the contract's shared limits, a rejected
definition's problems, the stores' errors."""
