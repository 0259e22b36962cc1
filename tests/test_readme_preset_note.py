"""README step 3 says why a preset can exceed the plain P95 x 1.5 (new-user finding 3)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_readme_explains_the_kaplan_meier_preset_next_to_p95_times_1_5_and_stays_short():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    step = text[text.index("3. **Presets.**") : text.index("4. **Hit rate.**")]
    assert "P95 x 1.5" in step and "Kaplan–Meier" in step
    assert "docs/analysis-and-presets.md#censoring-aware-baselines-kaplanmeier" in step
    assert "### Censoring-aware baselines (Kaplan–Meier)" in (
        ROOT / "docs/analysis-and-presets.md"
    ).read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
