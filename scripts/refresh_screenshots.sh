#!/usr/bin/env bash
# Re-take the app's screenshots in headless Chromium (the browser tests save them to
# test-artifacts/screenshots/) and refresh the committed gallery in docs/screenshots/: PNGs reduced to a
# 256-colour palette (modest size in git) and an index page, docs/screenshots/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_browser.sh
rm -rf test-artifacts/screenshots
status=0
.venv/bin/python -m pytest tests/browser -q "$@" || status=$?  # a failing page still leaves the others' shots
.venv/bin/python - <<'PY'
from pathlib import Path

from PIL import Image

from ui.course import COURSE

src, dst = Path("test-artifacts/screenshots"), Path("docs/screenshots")
dst.mkdir(parents=True, exist_ok=True)
order = [p.id.replace("_", "-") for p in COURSE]  # screenshot names slug the page's URL: golden_rules -> golden-rules


def rank(path: Path) -> tuple[int, bool, str]:
    hits = [i for i, word in enumerate(order) if word in path.stem]
    return (hits[0] if hits else len(order), not path.stem.startswith("page-"), path.stem)


lines = ["# KV Lab screenshots", "", "Captured from the running app by the browser tests "
         "(`scripts/refresh_screenshots.sh`).", ""]
for png in sorted(src.glob("*.png"), key=rank):
    with Image.open(png) as im:
        im.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(dst / png.name, optimize=True)
    title = png.stem.replace("page-", "page: ").replace("lesson-", "lesson in use: ").replace("-", " ")
    lines += [f"## {title}", "", f"![{title}]({png.name})", ""]
(dst / "README.md").write_text("\n".join(lines))
print(f"refreshed {len(list(src.glob('*.png')))} screenshots in {dst}")
PY
exit "$status"
