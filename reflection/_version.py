"""The package's version, the one place it is written (hatch reads it from here for the
distribution's metadata). A module of its own so the base layer (telemetry) can name it without
importing the package's face."""

__version__ = "0.1.0"
