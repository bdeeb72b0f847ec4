"""Stored H200 hardware bits (probe vectors, replay set) and the probe-corrected model parameters."""
