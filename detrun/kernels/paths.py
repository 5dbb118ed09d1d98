"""The wrapper paths a row says it took: the backends record them, the judge's kernel audit checks them.

No torch: judge/audit.py imports this module."""

PATH_PAGED = "paged"
PATH_RAGGED = "ragged"
PATH_RAGGED_PREFIX = "ragged+paged-prefix"  # ragged over new tokens + paged over the cached prefix, merged
PATH_DECODE = "decode"  # one new token per request over its whole paged cache (forward_decode)
