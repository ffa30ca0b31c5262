"""Definitions of the sample submissions, one module per lab."""
