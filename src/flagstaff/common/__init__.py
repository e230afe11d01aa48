"""Pure definitions every product shares: units of time, a rejected definition's problems."""
