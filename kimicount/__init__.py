"""kimicount: exact parameter and KV-cache accounting for Kimi K2 and the DeepSeek-V3 family."""

__version__ = "0.1.0"
