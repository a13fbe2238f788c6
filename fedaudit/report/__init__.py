"""Report output: report.json, PNGs, grid.png and a self-contained report.html, written atomically."""
