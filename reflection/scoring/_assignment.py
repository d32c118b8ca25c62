"""Optimal one-to-one assignment (the Hungarian method), so scoring needs no scipy.

Trajectories are short (tens of calls), so an O(n^2 m) pure-Python solver is fast enough;
the tests check it against brute force over every assignment.
"""

from __future__ import annotations

import math


def max_weight_assignment(weights: list[list[float]]) -> list[tuple[int, int]]:
    """Pairs (row, column) that maximise the summed weight, each row and column used at most once.

    `weights` is a rectangular matrix (rows x columns) of finite numbers. Every row is paired
    when there are at least as many columns, and vice versa; pairs of weight 0 are included,
    the caller decides what a zero pair means.
    """
    rows = len(weights)
    cols = len(weights[0]) if rows else 0
    if rows == 0 or cols == 0:
        return []
    if rows > cols:
        transposed = [[weights[r][c] for r in range(rows)] for c in range(cols)]
        return sorted((r, c) for c, r in max_weight_assignment(transposed))
    # Minimise cost = -weight with potentials (rows <= cols), 1-based as in the classic form.
    cost = [[0.0] * (cols + 1)] + [[0.0] + [-w for w in row] for row in weights]
    u = [0.0] * (rows + 1)
    v = [0.0] * (cols + 1)
    owner = [0] * (cols + 1)  # owner[j]: row assigned to column j (0 = none)
    way = [0] * (cols + 1)
    for i in range(1, rows + 1):
        owner[0] = i
        j0 = 0
        minv = [math.inf] * (cols + 1)
        used = [False] * (cols + 1)
        while True:
            used[j0] = True
            i0 = owner[j0]
            delta = math.inf
            j1 = 0
            for j in range(1, cols + 1):
                if not used[j]:
                    reduced = cost[i0][j] - u[i0] - v[j]
                    if reduced < minv[j]:
                        minv[j] = reduced
                        way[j] = j0
                    if minv[j] < delta:
                        delta = minv[j]
                        j1 = j
            for j in range(cols + 1):
                if used[j]:
                    u[owner[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    return sorted((owner[j] - 1, j - 1) for j in range(1, cols + 1) if owner[j])
