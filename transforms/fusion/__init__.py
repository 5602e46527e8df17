"""Fusion level: several operators in one pass over the data."""
