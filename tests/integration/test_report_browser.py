"""kairos report in a real headless browser: the page renders, is not blank, and has its plots."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from planner.cli import main
from tests.unit.test_report import write_synthetic_inputs

CHROMIUM = Path("/usr/bin/chromium")

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="chromium is not installed (make setup)"),
]


def chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless Chromium with networking and background services off."""
    return subprocess.run(
        [
            str(CHROMIUM),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("report")
    files = write_synthetic_inputs(d / "inputs")
    out = d / "report.html"
    rc = main(["report", "--trace", str(files["trace"]), "--plan", str(files["plan"]),
               "--forecast", str(files["forecast"]), "--model-track", str(files["track"]),
               "--out", str(out)])
    assert rc == 0
    return out


def test_screenshot_is_not_blank(report: Path, tmp_path: Path) -> None:
    from PIL import Image, ImageStat

    png = tmp_path / "report.png"
    proc = chromium(tmp_path, f"--screenshot={png}", "--window-size=1280,2400",
                    report.as_uri())
    assert png.exists(), proc.stderr[-2000:]
    with Image.open(png) as img:
        assert img.size == (1280, 2400)
        rgb = img.convert("RGB")
        stat = ImageStat.Stat(rgb)
        # a blank (all white or all one colour) page has ~zero variance
        assert min(stat.var) > 500, stat.var
        colours = rgb.quantize(colors=64).getcolors(maxcolors=64) or []
        # the header, the plots' palette and the text: many distinct colours in use
        assert len([c for c, _ in colours if c > 200]) >= 12
        # the workload chart sits in the upper part: it must not be empty background
        band = rgb.crop((100, 250, 1200, 560))
        assert min(ImageStat.Stat(band).var) > 200


def test_dom_has_the_plots(report: Path, tmp_path: Path) -> None:
    proc = chromium(tmp_path, "--dump-dom", report.as_uri())
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = proc.stdout
    charts = re.findall(r'<svg[^>]*data-chart="([^"]+)"[^>]*data-points="(\d+)"', dom)
    assert dict(charts).keys() == {"workload", "mix", "expected-vs-observed", "rollout-s1",
                                   "rollout-s2"}
    assert all(int(n) > 0 for _, n in charts)
    assert dom.count("<svg") == 5
    for series in ("observed", "forecast", "forecast-interval"):
        assert f'data-series="{series}"' in dom
    assert len(re.findall(r'<rect data-series="(drain|stop|start|sync)"', dom)) == 16
    assert "No data" not in dom
