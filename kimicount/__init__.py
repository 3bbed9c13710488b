"""kimicount: exact parameter and KV-cache accounting for Kimi K2 and the DeepSeek-V3 family."""

from kimicount import _moved  # noqa: F401  (the planner's old import paths, for one release)

__version__ = "0.1.0"
