"""The package version, in a leaf module: modules that record it import it from here, never from the package."""

__version__ = "0.1.0"
