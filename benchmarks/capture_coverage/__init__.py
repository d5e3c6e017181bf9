"""Capture coverage: which test programs torchkiln captures in one graph where torch.compile does.

Run ``python -m benchmarks.capture_coverage --help``. ``corpus/`` holds the
programs, ``check.py`` runs and classifies one, ``report.py`` summarizes.
"""
