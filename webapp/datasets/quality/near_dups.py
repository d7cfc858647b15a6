"""Near-duplicate clusters with MinHash LSH (the rensa library), one pass, bounded memory.

Each row's text becomes a set of word shingles and a MinHash signature. A row whose normalised text was
seen before joins that row's cluster at once (no LSH work for exact copies). Otherwise the LSH index
proposes earlier rows that share a band; the row joins the first whose estimated Jaccard similarity
(share of equal signature slots) reaches the threshold, and starts its own cluster when none does.
Only cluster seeds enter the index, so a set with many copies of one text never builds huge buckets,
and memory grows with the number of distinct rows (one signature of num_perm 32-bit slots each), not with
their length.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from rensa import RMinHash, RMinHashLSH

from webapp.datasets.quality.text import shingles, words

NUM_PERM = 128
BANDS = 16  # 8 rows a band: pairs at Jaccard 0.8 share a band with probability 0.95, at 0.5 with 0.06
SHINGLE = 3
THRESHOLD = 0.8
SEED = 7
MAX_CANDIDATES = 50  # candidates verified per row (the index holds seeds only, so buckets stay small)


def rule(threshold: float = THRESHOLD, what: str = "text") -> str:
    return (f"Rows are compared on their {what}, lowercased and cut into words; each row's set of {SHINGLE}-word "
            f"shingles gets a {NUM_PERM}-slot MinHash signature, and an LSH index ({BANDS} bands) proposes "
            f"earlier rows to compare. A row joins the cluster of the first earlier row whose estimated Jaccard "
            f"similarity is at least {threshold:.2f}. Exact copies (after lowercasing) are clustered too.")


class NearDuplicates:
    """Feed rows with `add(indices, texts)` in any number of batches, in row order; read `clusters()`."""

    def __init__(self, threshold: float = THRESHOLD, num_perm: int = NUM_PERM, bands: int = BANDS,
                 shingle: int = SHINGLE, seed: int = SEED):
        if not 0 < threshold <= 1:
            raise ValueError("The near-duplicate threshold must be in (0, 1].")
        self.threshold, self.num_perm, self.shingle, self.seed = threshold, num_perm, shingle, seed
        self.lsh = RMinHashLSH(threshold, num_perm, bands)
        self.seeds: list = []  # seed position -> its MinHash
        self.seed_rows: list[int] = []  # seed position -> row index
        self.exact: dict[int, int] = {}  # hash of the normalised text -> seed position
        self.parent: dict[int, int] = {}  # row index -> the seed row of its cluster (seeds are absent)
        self.compared = 0

    def add(self, indices: Sequence[int], texts: Sequence[str]) -> None:
        fresh_rows, fresh_sets = [], []
        copies: dict[int, list[int]] = {}  # copies of a text first seen in this batch, placed after it
        for index, text in zip(indices, texts, strict=True):
            tokens = words(text)
            key = hash(" ".join(tokens))
            if key in copies:
                copies[key].append(index)
                continue
            pos = self.exact.get(key)
            if pos is not None:
                self.parent[index] = self.seed_rows[pos]
                continue
            copies[key] = []
            fresh_rows.append((index, key))
            fresh_sets.append(list(shingles(tokens, self.shingle)))
        if not fresh_rows:
            return
        minhashes = RMinHash.from_token_sets(fresh_sets, self.num_perm, self.seed)
        for (index, key), minhash in zip(fresh_rows, minhashes, strict=True):
            pos = self._match(minhash)
            if pos is not None:
                self.parent[index] = self.seed_rows[pos]
            else:
                pos = len(self.seed_rows)
                self.seeds.append(minhash)
                self.seed_rows.append(index)
                self.lsh.insert(pos, minhash)
            self.exact[key] = pos
            for copy in copies[key]:
                self.parent[copy] = self.seed_rows[pos]

    def _match(self, minhash) -> int | None:
        candidates = self.lsh.query(minhash)
        if not candidates:
            return None
        for pos in sorted(candidates)[:MAX_CANDIDATES]:  # the earliest seeds first
            self.compared += 1
            if minhash.jaccard(self.seeds[pos]) >= self.threshold:
                return pos
        return None

    def clusters(self) -> list[list[int]]:
        """Clusters of two or more rows, each sorted (its first row is the one cleaning keeps), by first row."""
        groups: dict[int, list[int]] = {}
        for index, seed_row in self.parent.items():
            groups.setdefault(seed_row, [seed_row]).append(index)
        return sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])


def near_duplicate_clusters(texts: Iterable[str], threshold: float = THRESHOLD) -> list[list[int]]:
    """Clusters of the positions of `texts` (a convenience for small inputs and tests)."""
    texts = list(texts)
    finder = NearDuplicates(threshold)
    finder.add(range(len(texts)), texts)
    return finder.clusters()


def drop_all_but_first(clusters: Iterable[Sequence[int]]) -> list[int]:
    """What cleaning drops: every row of each cluster except its first."""
    return sorted(i for cluster in clusters for i in list(cluster)[1:])
