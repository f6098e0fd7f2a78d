#!/usr/bin/env python3
"""Checks the relative links of the user's guide.

Every Markdown link [text](target) in README.md, docs/*.md and
bench/RESULTS.md whose target is not a web or mail address must name a file
that exists in the repository, relative to the linking file; a #anchor must be the slug of a
heading in its target (GitHub's rules: lowercase, punctuation other than -
and _ dropped, spaces made -, a repeated slug numbered -1, -2, ...). Links
inside code (fenced blocks and `spans`) are not links.

    scripts/check_links.py [ROOT]

ROOT is the repository (default: this script's parent's parent). Exits 0
when every link resolves, 1 listing the broken ones.
"""
import re
import sys
from pathlib import Path

LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s>]+(?:\([^()\s]*\))?[^()\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//)")


def outside_fences(text):
    """(number, line) for each line outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if fence is None:
            m = re.match(r"(`{3,}|~{3,})", stripped)
            if m:
                fence = m.group(1)
                continue
            yield number, line
        elif stripped.startswith(fence) and set(stripped) == {fence[0]}:
            fence = None


def without_code_spans(line):
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", line)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w keeps letters, digits and _
    return text.replace(" ", "-")


_anchors = {}


def anchors(path):
    """The anchors of a Markdown file's headings."""
    cache = _anchors
    if path not in cache:
        seen = {}
        found = set()
        for _, line in outside_fences(path.read_text(encoding="utf-8")):
            m = HEADING.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            found.add(s if n == 0 else f"{s}-{n}")
        cache[path] = found
    return cache[path]


def check(root):
    files = [root / "README.md", *sorted((root / "docs").glob("*.md")), root / "bench" / "RESULTS.md"]
    broken = []
    checked = 0
    for md in files:
        if not md.exists():
            continue
        for number, line in outside_fences(md.read_text(encoding="utf-8")):
            for m in LINK.finditer(without_code_spans(line)):
                target = m.group(1)
                if EXTERNAL.match(target):
                    continue
                checked += 1
                where = f"{md.relative_to(root)}:{number}: {target}"
                path_part, _, anchor = target.partition("#")
                dest = md if not path_part else (md.parent / path_part).resolve()
                if not dest.is_relative_to(root):
                    broken.append(f"{where}: outside the repository")
                    continue
                if not dest.exists():
                    broken.append(f"{where}: no such file")
                    continue
                if anchor:
                    if dest.is_dir() or dest.suffix.lower() != ".md":
                        broken.append(f"{where}: an anchor into a file that is not Markdown")
                    elif anchor not in anchors(dest):
                        broken.append(f"{where}: no heading #{anchor} in {dest.relative_to(root)}")
    return checked, broken


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent).resolve()
    checked, broken = check(root)
    for b in broken:
        print(b)
    if broken:
        print(f"{len(broken)} of {checked} relative links are broken")
        return 1
    print(f"all {checked} relative links resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
