#!/usr/bin/env python3
"""Checks the Markdown links of README.md, docs/**/*.md and every module's README.md (or the files given).

Every relative link must name a file or folder of the repository, and every #anchor must name a heading
(GitHub's anchor for it) or an explicit <a name/id> of the Markdown file it points into; a link into any
other file may carry only a GitHub line anchor (#L12, #L12-L20). External http(s) links are not fetched
(CI has no network): only their form is checked. Links inside code blocks and code spans are not links.
Prints each broken link as file:line and exits 1 if there is one. Python 3 standard library only.

    python3 .ci/check-links.py [FILE.md ...]
"""
import os
import re
import sys
import unicodedata
from urllib.parse import unquote, urlsplit

ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(.+?)(?<!`)\1(?!`)", re.S)
INLINE_LINK = re.compile(
    r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]"            # [text], one level of nested brackets
    r"\(\s*(<[^<>\n]*>|[^\s()<>]*(?:\([^\s()]*\)[^\s()<>]*)*)"  # (target  — <...> or balanced parens
    r"(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^()\n]*\)))?\s*\)"  # optional "title")
)
REF_DEF = re.compile(r"^ {0,3}\[([^\]\n]+)\]:\s*(<[^<>\n]*>|\S+)", re.M)
AUTOLINK = re.compile(r"<((?:https?|mailto):[^<>\s]*)>")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:name|id)\s*=\s*[\"']([^\"']+)[\"']", re.I)
LINE_ANCHOR = re.compile(r"^L\d+(?:C\d+)?(?:-L\d+(?:C\d+)?)?$")


def default_files():
    files = [os.path.join(ROOT, "README.md")]
    for d, dirs, names in os.walk(os.path.join(ROOT, "docs")):
        dirs.sort()
        files += [os.path.join(d, n) for n in sorted(names) if n.endswith(".md")]
    for entry in sorted(os.listdir(ROOT)):
        readme = os.path.join(ROOT, entry, "README.md")
        if entry != "docs" and not entry.startswith(".") and os.path.isfile(readme):
            files.append(readme)
        module_docs = os.path.join(ROOT, entry, "docs")
        if entry != "docs" and not entry.startswith(".") and os.path.isdir(module_docs):
            files += [os.path.join(module_docs, n) for n in sorted(os.listdir(module_docs)) if n.endswith(".md")]
    return [f for f in files if os.path.isfile(f)]


def blank(text):
    """The text with fenced code blocks and code spans replaced by spaces, newlines kept (offsets hold)."""
    lines = text.split("\n")
    out, fence = [], None
    for line in lines:
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append(" " * len(line))
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip(" `~"):
                fence = None
            out.append(" " * len(line))
        else:
            out.append(line)
    prose = "\n".join(out)
    return CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), prose)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    t = re.sub(r"<[^>]+>", "", t)                              # inline HTML tags
    t = t.strip().lower()
    t = "".join(c for c in t if c in " -_" or unicodedata.category(c)[0] in "LNM")
    return t.replace(" ", "-")


_anchors = {}


def anchors(path):
    """Every anchor GitHub gives the Markdown file at path: its headings' slugs, numbered when repeated."""
    if path not in _anchors:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        lines = blank_fences_only(text).split("\n")
        found, seen = set(), {}
        for i, line in enumerate(lines):
            m = ATX.match(line)
            heading = (m.group(2) or "") if m else None
            if heading is None and i > 0 and SETEXT.match(line) and lines[i - 1].strip() \
                    and not ATX.match(lines[i - 1]) and not lines[i - 1].lstrip().startswith(("|", "-", "*", ">")):
                heading = lines[i - 1].strip()
            if heading is not None:
                s = slug(heading)
                n = seen.get(s, 0)
                seen[s] = n + 1
                found.add(s if n == 0 else f"{s}-{n}")
        found.update(HTML_ANCHOR.findall(text))
        _anchors[path] = found
    return _anchors[path]


def blank_fences_only(text):
    out, fence = [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append("")
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not line.strip(" `~"):
                fence = None
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def check_external(target):
    u = urlsplit(target)
    if u.scheme == "mailto":
        return None if re.fullmatch(r"mailto:[^@\s]+@[^@\s]+\.[^@\s]+", target) else "malformed mailto link"
    if not u.netloc or not re.fullmatch(r"[A-Za-z0-9.-]+(?::\d+)?", u.netloc) or ("." not in u.hostname and u.hostname != "localhost"):
        return "malformed URL (no valid host)"
    if re.search(r"[\s<>\"{}|\\^`]", target):
        return "malformed URL (a character that must be escaped)"
    return None


def check(source, target):
    """None if target, linked from the Markdown file source, resolves; else why not."""
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1]
    if not target:
        return "empty link target"
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*):", target)
    if scheme:
        if scheme.group(1).lower() in ("http", "https", "mailto"):
            return check_external(target)
        return f"unexpected link scheme '{scheme.group(1)}:'"
    if target.startswith("//"):
        return "protocol-relative URL; write https://"
    path, _, anchor = target.partition("#")
    path = unquote(path.partition("?")[0])
    if path.startswith("/"):
        return "absolute path; link relative to this file"
    resolved = os.path.realpath(os.path.join(os.path.dirname(source), path)) if path else source
    if resolved != ROOT and not resolved.startswith(ROOT + os.sep):
        return f"'{path}' leaves the repository"
    if not os.path.exists(resolved):
        return f"'{path}' does not exist"
    if not anchor:
        return None if "#" not in target or path else "empty anchor"
    anchor = unquote(anchor)
    if os.path.isfile(resolved) and resolved.endswith(".md"):
        if anchor not in anchors(resolved):
            where = os.path.relpath(resolved, ROOT)
            return f"no heading with anchor '#{anchor}' in {where}"
        return None
    if os.path.isfile(resolved) and LINE_ANCHOR.match(anchor):
        return None
    return f"anchor '#{anchor}' into a file that is not Markdown"


def links(text):
    """(offset, target) of every link in the Markdown text, outside code."""
    prose = blank(text)
    for m in INLINE_LINK.finditer(prose):
        yield m.start(2), m.group(2)
    for m in REF_DEF.finditer(prose):
        yield m.start(2), m.group(2)
    for m in AUTOLINK.finditer(prose):
        yield m.start(1), m.group(1)


def main(argv):
    files = [os.path.realpath(a) for a in argv] or default_files()
    broken = checked = 0
    for f in files:
        with open(f, encoding="utf-8") as fh:
            text = fh.read()
        for offset, target in links(text):
            checked += 1
            why = check(f, target)
            if why:
                broken += 1
                line = text.count("\n", 0, offset) + 1
                print(f"{os.path.relpath(f, ROOT)}:{line}: broken link ({target}): {why}")
    if broken:
        print(f"check-links: {broken} broken link(s) of {checked} in {len(files)} file(s)")
        return 1
    print(f"check-links: {checked} links in {len(files)} Markdown files, none broken")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
