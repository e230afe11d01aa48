"""Accounts: who may call the API (project tokens, personal API keys), kept out of storage."""
