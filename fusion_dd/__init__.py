"""fusion-dd: find the fusion rules that break a network's accuracy by delta debugging."""

__version__ = "0.1.0"
