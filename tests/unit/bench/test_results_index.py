"""The index of bench/results/, made from the studies' READMEs, and the links of the docs that
point into the results: the committed index must be what the READMEs give, and no relative link
may name a file that is not there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.results_index import ResultsIndexError, main, read_studies, render_index

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "bench" / "results"


def _study(root: Path, name: str, date: str = "2026-12-01", *, drop: str | None = None) -> None:
    sections = {
        "Question": "Does the thing hold?",
        "Command": "```sh\ntrilemma bench run --name x\n```",
        "Result": "It held: 1.07x, see [the table](x.md).",
        "Conclusion": "Keep it.",
    }
    body = "\n\n".join(f"## {k}\n\n{v}" for k, v in sections.items() if k != drop)
    (root / name).mkdir()
    (root / name / "README.md").write_text(f"# {name} title\n\nDate: {date}. A 2-core CPU.\n\n{body}\n")


def test_the_index_has_a_row_per_study_newest_first(tmp_path):
    _study(tmp_path, "older", "2026-11-30")
    _study(tmp_path, "newer", "2026-12-05")
    studies = read_studies(tmp_path)
    assert [s.name for s in studies] == ["newer", "older"]
    assert studies[0].question == "Does the thing hold?"
    index = render_index(studies)
    # A study's relative link is made relative to the index.
    assert ("| [newer](newer/README.md) | 2026-12-05 | Does the thing hold? | "
            "It held: 1.07x, see [the table](newer/x.md). |") in index


@pytest.mark.parametrize("missing", ["Question", "Command", "Result", "Conclusion"])
def test_a_missing_heading_is_an_error_naming_the_file(tmp_path, missing):
    _study(tmp_path, "study", drop=missing)
    with pytest.raises(ResultsIndexError, match=rf"study/README.md: no '## {missing}' heading"):
        read_studies(tmp_path)


def test_a_missing_date_or_readme_is_an_error(tmp_path):
    (tmp_path / "bare").mkdir()
    with pytest.raises(ResultsIndexError, match="a study folder without README.md"):
        read_studies(tmp_path)
    (tmp_path / "bare" / "README.md").write_text("# bare\n\n## Question\n\nq\n")
    with pytest.raises(ResultsIndexError, match="no 'Date: YYYY-MM-DD' line"):
        read_studies(tmp_path)


def test_a_result_that_opens_with_a_table_is_refused(tmp_path):
    _study(tmp_path, "study")
    readme = tmp_path / "study" / "README.md"
    readme.write_text(readme.read_text().replace("It held", "| a | b |\n| --- | --- |\n| It held"))
    with pytest.raises(ResultsIndexError, match="must open with a sentence"):
        read_studies(tmp_path)


def test_check_tells_a_stale_index(tmp_path, capsys):
    _study(tmp_path, "study")
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert main(["--root", str(tmp_path)]) == 0
    assert main(["--root", str(tmp_path), "--check"]) == 0
    _study(tmp_path, "another")
    assert main(["--root", str(tmp_path), "--check"]) == 1
    assert "is stale" in capsys.readouterr().err


def test_the_committed_index_is_up_to_date():
    assert (RESULTS / "README.md").read_text() == render_index(read_studies(RESULTS)), (
        "bench/results/README.md is stale: run `python -m bench.results_index`")


def test_no_result_name_says_rerun_or_try():
    names = [p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("*")]
    assert not [n for n in names if re.search(r"-rerun|-try\d", n)]


_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(RESULTS.rglob("*.md"))]


def test_every_relative_link_of_the_docs_resolves():
    broken = []
    for doc in _documents():
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:|#|/", target):
                continue
            path = (doc.parent / target.split("#")[0]).resolve()
            if not path.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, "\n".join(broken)
