"""Helpers shared by test modules: imported from here, never from another test module."""
