"""Near-duplicate clusters: MinHash signatures (the rensa library) and LSH banding, in bounded memory.

Each row's text is lowercased and cut into words; its set of word shingles gets a MinHash signature
from rensa (Rust). Rows whose normalised text was already seen are exact copies: they join that row
without a signature. The banding is LSH's: the signature is cut into bands, and rows sharing a whole
band become candidates. It runs on numpy arrays once every row is in (a sort per band), because an
index of Python or Rust objects costs over a kilobyte a row where these arrays cost about 260 bytes
(one 8-byte key per band, one byte per signature slot). Each candidate pair is verified by its
estimated Jaccard similarity (the share of equal slots; comparing one byte of each slot adds at most
(1 - J)/256 to it), and the verified pairs are joined into clusters (connected components).
"""
from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence

import numpy as np
from rensa import RMinHash

from webapp.datasets.quality.text import shingles, words

NUM_PERM = 128
BANDS = 16  # 8 slots a band: pairs at Jaccard 0.8 share a band with probability 0.95, at 0.5 with 0.06
SHINGLE = 3
THRESHOLD = 0.8
SEED = 7
_VERIFY_CHUNK = 50_000


def rule(threshold: float = THRESHOLD, what: str = "text") -> str:
    return (f"Rows are compared on their {what}, lowercased and cut into words. Each row's set of {SHINGLE}-word "
            f"shingles gets a {NUM_PERM}-slot MinHash signature (rensa); rows that share one of {BANDS} bands of "
            f"{NUM_PERM // BANDS} slots are candidates (LSH), and a candidate pair counts when its estimated Jaccard "
            f"similarity is at least {threshold:.2f}. Clusters are the connected groups of such pairs; exact copies "
            "(after lowercasing) join their original. Cleaning keeps the first row of each cluster.")


def _band_keys(signatures: np.ndarray, bands: int) -> np.ndarray:
    """One 64-bit key per band: a weighted sum of the band's slots with odd multipliers (wrapping)."""
    n, width = signatures.shape
    slots = signatures.reshape(n, bands, width // bands).astype(np.uint64)
    weights = (np.arange(1, width // bands + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1)
    return (slots * weights).sum(axis=2, dtype=np.uint64)


class NearDuplicates:
    """Feed rows with `add(indices, texts)` in any number of batches, in row order; then read `clusters()`."""

    def __init__(self, threshold: float = THRESHOLD, num_perm: int = NUM_PERM, bands: int = BANDS,
                 shingle: int = SHINGLE, seed: int = SEED):
        if not 0 < threshold <= 1:
            raise ValueError("The near-duplicate threshold must be in (0, 1].")
        if num_perm % bands:
            raise ValueError("The signature length must be a multiple of the number of bands.")
        self.threshold, self.num_perm, self.bands, self.shingle, self.seed = threshold, num_perm, bands, shingle, seed
        self._keys: list[np.ndarray] = []  # per batch: (rows, bands) uint64
        self._sigs: list[np.ndarray] = []  # per batch: (rows, num_perm) uint8, the low byte of each slot
        self._rows = array("q")  # position of a signed row -> its row index
        self._exact: dict[int, int] = {}  # hash of the normalised text -> position of its first row
        self._copy_rows, self._copy_of = array("q"), array("q")  # exact copies: row index, position of the original
        self.compared = 0

    def add(self, indices: Sequence[int], texts: Sequence[str]) -> None:
        fresh = []
        for index, text in zip(indices, texts, strict=True):
            tokens = words(text)
            key = hash(" ".join(tokens))
            pos = self._exact.get(key)
            if pos is not None:
                self._copy_rows.append(index)
                self._copy_of.append(pos)
                continue
            self._exact[key] = len(self._rows)
            self._rows.append(index)
            fresh.append(list(shingles(tokens, self.shingle)))
        if fresh:
            signatures = np.asarray(RMinHash.digests_from_token_sets(fresh, self.num_perm, self.seed), dtype=np.uint32)
            self._keys.append(_band_keys(signatures, self.bands))
            self._sigs.append((signatures & 0xFF).astype(np.uint8))

    def _candidates(self, keys: np.ndarray) -> np.ndarray:
        """(first, second) positions that share a band: each row with its bucket's first row and its neighbour."""
        pairs = []
        for band in range(keys.shape[1]):
            order = np.argsort(keys[:, band], kind="stable")  # stable: positions ascend within a bucket
            ordered = keys[order, band]
            same = ordered[1:] == ordered[:-1]
            if not same.any():
                continue
            new_run = np.concatenate(([True], ~same))
            first = order[np.flatnonzero(new_run)[np.cumsum(new_run) - 1]]
            star = first != order
            pairs.append(np.stack([first[star], order[star]], axis=1))
            pairs.append(np.stack([order[:-1][same], order[1:][same]], axis=1))
        if not pairs:
            return np.zeros((0, 2), dtype=np.int64)
        return np.unique(np.concatenate(pairs), axis=0)

    def clusters(self) -> list[list[int]]:
        """Clusters of two or more rows, each sorted (its first row is the one cleaning keeps), by first row."""
        n = len(self._rows)
        parent = list(range(n))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        if n > 1:
            keys = np.concatenate(self._keys)
            signatures = np.concatenate(self._sigs)
            candidates = self._candidates(keys)
            del keys
            self.compared = int(len(candidates))
            for start in range(0, len(candidates), _VERIFY_CHUNK):
                chunk = candidates[start:start + _VERIFY_CHUNK]
                similar = (signatures[chunk[:, 0]] == signatures[chunk[:, 1]]).mean(axis=1) >= self.threshold
                for a, b in chunk[similar].tolist():
                    ra, rb = find(a), find(b)
                    if ra != rb:
                        parent[max(ra, rb)] = min(ra, rb)
        groups: dict[int, list[int]] = {}
        for pos in range(n):
            groups.setdefault(find(pos), []).append(self._rows[pos])
        for row, pos in zip(self._copy_rows, self._copy_of, strict=True):
            groups[find(pos)].append(row)
        return sorted((sorted(g) for g in groups.values() if len(g) > 1), key=lambda g: g[0])


def near_duplicate_clusters(texts: Iterable[str], threshold: float = THRESHOLD) -> list[list[int]]:
    """Clusters of the positions of `texts` (a convenience for small inputs and tests)."""
    texts = list(texts)
    finder = NearDuplicates(threshold)
    finder.add(range(len(texts)), texts)
    return finder.clusters()


def drop_all_but_first(clusters: Iterable[Sequence[int]]) -> list[int]:
    """What cleaning drops: every row of each cluster except its first."""
    return sorted(i for cluster in clusters for i in list(cluster)[1:])
