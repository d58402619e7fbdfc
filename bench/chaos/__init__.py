"""Fault injection under load: `trilemma bench chaos`."""
