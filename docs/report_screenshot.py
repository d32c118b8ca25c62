"""Make docs/report.png, the README's picture of `reflection report --html`.

The shipped examples/calls.jsonl plus 36 synthetic rows (a third of them with a city the user
never mentioned) go through `reflection batch` against the local stand-in judge, with a price
so the cost columns have numbers; then `reflection report --html` and headless Chromium
(Debian's `chromium`) take the picture, with the failing rows filtered to the hallucination
check. Run from the repository root:

    python docs/report_screenshot.py
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from reflection.batch._synthetic import synthetic_rows, write_jsonl
from reflection.testing.server import StandInJudge

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    browser = shutil.which("chromium")
    if browser is None:
        sys.exit("needs headless Chromium: apt-get install chromium")
    cli = str(Path(sys.executable).with_name("reflection"))  # the console script of this environment
    with tempfile.TemporaryDirectory() as tmp, StandInJudge(latency=0.02, seed=3) as server:
        folder = Path(tmp)
        rows = [line for line in (ROOT / "examples" / "calls.jsonl").read_text().splitlines() if line.strip()]
        dataset = write_jsonl(folder / "calls.jsonl", synthetic_rows(36))
        dataset.write_text("\n".join(rows) + "\n" + dataset.read_text(), encoding="utf-8")
        config = folder / "config.yaml"
        config.write_text(
            f"judge:\n  base_url: {server.base_url}\n  model: stand-in\n  api_key: sk-none\n"
            "  prices:\n    stand-in: {prompt: 0.15, completion: 0.60}\n",
            encoding="utf-8",
        )
        out, page = folder / "out.jsonl", folder / "report.html"
        subprocess.run(
            [cli, "batch", str(dataset), "-o", str(out), "--config", str(config), "--no-cache", "--no-progress"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        subprocess.run([cli, "report", str(out), "--html", str(page)], check=True, stdout=subprocess.DEVNULL)
        text = page.read_text(encoding="utf-8").replace(str(out), "out.jsonl")  # no temporary path in the picture
        page.write_text(text, encoding="utf-8")
        # Open it filtered to the hallucination check, to show judge explanations in the failing rows.
        key = re.search(r'data-check="(c\d+)" data-name="semantic_general_hallucination_check"', text)
        address = page.as_uri() + (f"#check={key.group(1)}" if key else "")
        subprocess.run(
            [
                browser,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                f"--user-data-dir={folder / 'profile'}",
                "--hide-scrollbars",
                "--window-size=1280,1500",
                f"--screenshot={ROOT / 'docs' / 'report.png'}",
                address,
            ],
            check=True,
            capture_output=True,
        )
    print(ROOT / "docs" / "report.png")


if __name__ == "__main__":
    main()
