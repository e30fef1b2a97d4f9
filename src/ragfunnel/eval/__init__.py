"""Evaluation: metrics and offline construction of long-context test sets."""
