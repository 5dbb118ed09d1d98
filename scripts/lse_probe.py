"""Does asking FlashInfer for the LSE change the output's bits? (backend sglang records the LSE of SGLang's
wrapper runs by passing return_lse=True where SGLang did not: that must leave the output as SGLang gets it.)

    python3 scripts/lse_probe.py        # on the GPU machine; prints one line per wrapper, exits 1 on a difference
"""

import argparse
import sys


def main() -> int:
    import flashinfer
    import torch

    dev = torch.device("cuda", 0)
    g = torch.Generator(device=dev).manual_seed(0)
    hq, hkv, d, lens = 32, 8, 128, [37, 200, 513]
    n = sum(lens)
    q = torch.randn(n, hq, d, device=dev, dtype=torch.bfloat16, generator=g)
    k = torch.randn(n, hkv, d, device=dev, dtype=torch.bfloat16, generator=g)
    v = torch.randn(n, hkv, d, device=dev, dtype=torch.bfloat16, generator=g)
    indptr = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device=dev)
    ws = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
    bad = 0
    for backend in ("fa2", "fa3"):
        paged = flashinfer.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD", backend=backend)
        paged.plan(indptr, indptr, torch.arange(n, dtype=torch.int32, device=dev),
                   torch.ones(len(lens), dtype=torch.int32, device=dev), hq, hkv, d, 1, causal=True,
                   q_data_type=torch.bfloat16)
        ragged = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(ws, "NHD", backend=backend)
        ragged.plan(indptr, indptr, hq, hkv, d, causal=True, q_data_type=torch.bfloat16)
        cache = (k.unsqueeze(1), v.unsqueeze(1))
        for name, run in (("paged", lambda lse, w=paged, c=cache: w.run(q, c, return_lse=lse)),
                          ("ragged", lambda lse, w=ragged: w.run(q, k, v, return_lse=lse))):
            plain, (with_lse, _) = run(False), run(True)
            same = torch.equal(plain.view(torch.int16), with_lse.view(torch.int16))
            bad += not same
            print(f"lse probe {backend} {name}: output with return_lse=True "
                  f"{'bitwise equal' if same else 'DIFFERS'} ({n} rows)")
    return 1 if bad else 0


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    sys.exit(main())
