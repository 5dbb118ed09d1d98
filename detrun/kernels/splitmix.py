"""The constants of the digest's mixing (splitmix64's finaliser and the two lanes' salts), shared by the
torch path (digest.py) and the Triton kernel (digest_triton.py), which must give the same bits."""

C1, C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # splitmix64's finaliser multipliers
SALTS = (0x9E3779B97F4A7C15, 0xD1B54A32D192ED03)  # one per lane, added to the element index
