"""lmmbench: how fast and how accurate a model is on your stack, and where the time goes."""

__version__ = "0.1.0"
__all__ = ["__version__"]
