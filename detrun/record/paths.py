"""The wrapper paths a row says it took (its `path` column): the backends record them, the judge's kernel
audit checks them."""

PATH_PAGED = "paged"
PATH_RAGGED = "ragged"
PATH_RAGGED_PREFIX = "ragged+paged-prefix"  # ragged over new tokens + paged over the cached prefix, merged
PATH_DECODE = "decode"  # one new token per request over its whole paged cache (forward_decode)
