"""Gaussian heatmaps the way old detection heads draw them: Python loops."""

import math


def gaussian_2d(shape, sigma=1.0):
    rows, cols = shape
    cy, cx = (rows - 1) / 2.0, (cols - 1) / 2.0
    return [
        [math.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * sigma * sigma)) for x in range(cols)]
        for y in range(rows)
    ]


class Heatmap:
    def __init__(self, cells):
        self.cells = cells

    @property
    def peak(self):
        return max(max(row) for row in self.cells)

    @staticmethod
    def normalize(cells):
        top = max(max(row) for row in cells)
        return [[v / top for v in row] for row in cells]
