"""Asking a human: terminal review, in-band elicitation to the host, refusal when nobody can be asked."""
