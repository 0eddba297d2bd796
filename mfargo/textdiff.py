"""A unified diff that stays fast on large generated YAML, for `--check`.

difflib's matcher looks for the longest common run over the whole text, and generated YAML
repeats the same lines once per step, so a stale 904-step file took 4.3 CPU-s to diff
(497 steps: 0.8) when only the code package's digest had changed; now 0.05. Lines that occur
exactly once on each side and in the same order (patience diff's anchors) split the texts
first, and difflib only matches what lies between two anchors. The output is a standard
unified diff (`patch` applies it); where a text has no such lines it is difflib's matching
(without its heuristic that ignores frequent lines, which can misplace a change).
"""

from __future__ import annotations

import bisect
import difflib
from collections import Counter
from collections.abc import Iterator, Sequence

Opcode = tuple[str, int, int, int, int]  # difflib's (tag, i1, i2, j1, j2)


def unified_diff(a: Sequence[str], b: Sequence[str], fromfile: str, tofile: str, context: int = 3) -> Iterator[str]:
    """Lines (with their line ends) of the unified diff turning ``a`` into ``b``."""
    started = False
    for group in _AnchoredMatcher(a, b).get_grouped_opcodes(context):
        if not started:
            yield "--- %s\n" % fromfile
            yield "+++ %s\n" % tofile
            started = True
        first, last = group[0], group[-1]
        yield "@@ -%s +%s @@\n" % (_hunk_range(first[1], last[2]), _hunk_range(first[3], last[4]))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            yield from ("-" + line for line in a[i1:i2])
            yield from ("+" + line for line in b[j1:j2])


def opcodes(a: Sequence[str], b: Sequence[str]) -> list[Opcode]:
    """Opcodes turning ``a`` into ``b`` (difflib's form), difflib run between anchors only."""
    ops: list[Opcode] = []
    i = j = 0
    for ai, bj in _anchors(a, b) + [(len(a), len(b))]:
        if i < ai or j < bj:
            between = difflib.SequenceMatcher(None, a[i:ai], b[j:bj], autojunk=False)
            ops += [(tag, i1 + i, i2 + i, j1 + j, j2 + j) for tag, i1, i2, j1, j2 in between.get_opcodes()]
        if ai < len(a):
            ops.append(("equal", ai, ai + 1, bj, bj + 1))
        i, j = ai + 1, bj + 1
    return _merge_equal(ops)


class _AnchoredMatcher(difflib.SequenceMatcher):
    """difflib's hunk grouping over ``opcodes``' matching."""

    def __init__(self, a: Sequence[str], b: Sequence[str]):
        super().__init__(None, [], [])  # the matching is ours: difflib's index of b is not built
        self.a, self.b = a, b

    def get_opcodes(self) -> list[Opcode]:
        if not self.a and not self.b:
            return [("equal", 0, 0, 0, 0)]  # what difflib answers for two empty texts
        return opcodes(self.a, self.b)


def _anchors(a: Sequence[str], b: Sequence[str]) -> list[tuple[int, int]]:
    """(i, j) of lines found once in each text, the longest run of them in the same order."""
    count_a, count_b = Counter(a), Counter(b)
    where_b = {line: j for j, line in enumerate(b) if count_b[line] == 1}
    pairs = [(i, where_b[line]) for i, line in enumerate(a) if count_a[line] == 1 and line in where_b]
    # Longest increasing subsequence of the j's (patience sorting), pairs already in i order.
    tails: list[int] = []  # tails[k]: the smallest j ending an increasing run of length k + 1
    tail_at: list[int] = []  # index into pairs of that j
    previous: list[int] = [-1] * len(pairs)
    for index, (_, j) in enumerate(pairs):
        k = bisect.bisect_left(tails, j)
        if k:
            previous[index] = tail_at[k - 1]
        if k == len(tails):
            tails.append(j)
            tail_at.append(index)
        else:
            tails[k], tail_at[k] = j, index
    chain = []
    index = tail_at[-1] if tail_at else -1
    while index >= 0:
        chain.append(pairs[index])
        index = previous[index]
    return chain[::-1]


def _merge_equal(ops: list[Opcode]) -> list[Opcode]:
    merged: list[Opcode] = []
    for op in ops:
        if merged and op[0] == "equal" and merged[-1][0] == "equal":
            _, i1, _, j1, _ = merged[-1]
            merged[-1] = ("equal", i1, op[2], j1, op[4])
        else:
            merged.append(op)
    return merged


def _hunk_range(start: int, stop: int) -> str:
    """A hunk's line range as unified diffs write it (1-based; an empty range names the line before)."""
    length = stop - start
    if length == 1:
        return "%d" % (start + 1)
    return "%d,%d" % (start + 1 if length else start, length)
