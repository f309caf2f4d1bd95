"""What Kairos shows: the HTML report and its own Prometheus metrics.

- :mod:`planner.report.page`: ``kairos report``, one self-contained HTML page.
- :mod:`planner.report.charts`: the inline-SVG charts and the page style.
- :mod:`planner.report.metrics`: what ``kairos metrics`` exports, read from Kairos' files.
- :mod:`planner.report.exposition`: the Prometheus text exposition format.
"""
