#!/usr/bin/env python3
"""Checks the links of Quartermaster's documentation.

    docs/check-links.py [--root DIR]            the Markdown sources
    docs/check-links.py [--root DIR] --html DIR  the rendered book's HTML
    docs/check-links.py --self-test              this checker, on a small tree

Sources are README.md at the repository root and every docs/**/*.md. Each
relative link (inline, image, reference definition, an HTML href or src,
an mdBook {{#include}}) must name a file that exists relative to the file
that links; `file.md#anchor` and `#anchor` must name a heading of that file
(GitHub and mdBook slugs: lowercase, punctuation other than - and _
dropped, each space a -, a repeated heading gets -1, -2, ...) or an
explicit id. With --html, every relative href and src in every HTML file
under DIR must name a file that exists, and `#id` an id= in it.

Links with a scheme (http:, https:, mailto:, ...) are not checked, nor
anything inside code blocks or inline code. Every broken link is printed
as `file:line: link -> reason` and the exit status is 1; otherwise one
line says how many links were checked. Standard library only.
"""

import argparse
import html.parser
import os
import re
import sys
import tempfile
import urllib.parse

SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HEADING_ID = re.compile(r"[ \t]*\{[^}]*#([A-Za-z0-9_:.-]+)[^}]*\}[ \t]*$")
HTML_ID = re.compile(r"""<[A-Za-z][^>]*?\s(?:id|name)\s*=\s*["']([^"']+)["']""")
HTML_REF = re.compile(r"""<[A-Za-z][^>]*?\s(?:href|src)\s*=\s*["']([^"']*)["']""")
REF_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:[ \t]*<?([^\s>]+)>?")
INCLUDE = re.compile(r"\{\{#(?:include|rustdoc_include|playground)\s+([^\s}:]+)")


def slug(text):
    """A heading's anchor, as GitHub and mdBook make it."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").strip().lower()
    out = []
    for ch in text:
        if ch.isalnum() or ch in "-_":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def strip_code_spans(line):
    """The line with every inline code span blanked (same length)."""
    out, i = [], 0
    while i < len(line):
        if line[i] == "`":
            j = i
            while j < len(line) and line[j] == "`":
                j += 1
            ticks = line[i:j]
            end = line.find(ticks, j)
            while end != -1 and end + len(ticks) < len(line) and line[end + len(ticks)] == "`":
                end = line.find(ticks, end + len(ticks) + 1)
            if end == -1:
                out.append(line[i:j])
                i = j
                continue
            out.append(" " * (end + len(ticks) - i))
            i = end + len(ticks)
        else:
            out.append(line[i])
            i += 1
    return "".join(out)


def markdown_lines(text):
    """(line number, line, in_code) for each line; fenced blocks are code."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            yield n, line, True
        elif fence is not None:
            if m and m.group(1).startswith(fence) and line.strip() == m.group(1):
                fence = None
            yield n, line, True
        else:
            yield n, line, False


def inline_links(line):
    """Targets of [text](target) and ![alt](target) in a line."""
    targets = []
    i = 0
    while True:
        i = line.find("](", i)
        if i == -1:
            return targets
        j, depth = i + 2, 0
        while j < len(line):
            c = line[j]
            if c == "\\":
                j += 2
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                if depth == 0:
                    break
                depth -= 1
            j += 1
        inner = line[i + 2 : j].strip()
        if inner.startswith("<") and ">" in inner:
            target = inner[1 : inner.index(">")]
        else:
            target = inner.split()[0] if inner else ""
        targets.append(target)
        i = j


class Sources:
    """Markdown files: their links and their anchors."""

    def __init__(self):
        self.anchor_cache = {}

    def anchors(self, path):
        if path in self.anchor_cache:
            return self.anchor_cache[path]
        found = set()
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError:
            self.anchor_cache[path] = found
            return found
        if not path.endswith(".md"):
            found.update(html_ids(text))
            self.anchor_cache[path] = found
            return found
        seen = {}
        prev = None
        for _, line, code in markdown_lines(text):
            heading = None
            if not code:
                m = ATX.match(line)
                if m:
                    heading = re.sub(r"[ \t]+#+[ \t]*$", "", m.group(2) or "")
                elif prev and prev.strip() and SETEXT.match(line) and not ATX.match(prev):
                    if not (line.strip().startswith("-") and prev.lstrip().startswith(("- ", "* ", "|"))):
                        heading = prev.strip()
                for a in HTML_ID.findall(strip_code_spans(line)):
                    found.add(a)
            if heading is not None:
                custom = HEADING_ID.search(heading)
                if custom:
                    found.add(custom.group(1))
                    heading = heading[: custom.start()]
                base = slug(heading)
                k = seen.get(base, 0)
                seen[base] = k + 1
                found.add(base if k == 0 else f"{base}-{k}")
            prev = None if code else line
        self.anchor_cache[path] = found
        return found

    def links(self, path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for n, line, code in markdown_lines(text):
            if code:
                # an mdBook include inside a code block still names a file
                for t in INCLUDE.findall(line):
                    yield n, t, True
                continue
            plain = strip_code_spans(line)
            for t in inline_links(plain):
                yield n, t, False
            m = REF_DEF.match(plain)
            if m:
                yield n, m.group(2), False
            for t in HTML_REF.findall(plain):
                yield n, t, False
            for t in INCLUDE.findall(plain):
                yield n, t, True

    def check(self, files, root):
        broken, count = [], 0
        for path in files:
            here = os.path.dirname(path)
            for n, target, include in self.links(path):
                if not target or SCHEME.match(target) or target.startswith("//"):
                    continue
                count += 1
                reason = self.problem(path, here, target, include)
                if reason:
                    broken.append(f"{os.path.relpath(path, root)}:{n}: {target} -> {reason}")
        return broken, count

    def problem(self, path, here, target, include):
        file_part, _, anchor = target.partition("#")
        file_part = urllib.parse.unquote(file_part.split("?")[0])
        if include:
            return None if os.path.isfile(os.path.join(here, file_part)) else "no such file"
        dest = os.path.normpath(os.path.join(here, file_part)) if file_part else path
        if not os.path.exists(dest):
            return "no such file"
        if anchor and os.path.isfile(dest) and dest.endswith((".md", ".html", ".htm")):
            if urllib.parse.unquote(anchor) not in self.anchors(dest):
                return f"no heading or id #{anchor} in {os.path.basename(dest)}"
        return None


def html_ids(text):
    collector = HtmlCollector()
    collector.feed(text)
    return collector.ids


class HtmlCollector(html.parser.HTMLParser):
    """The ids of an HTML file, its relative references and its base."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids, self.refs, self.base = set(), [], None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        if tag == "base" and a.get("href") is not None:
            self.base = a["href"]
            return
        for key in ("href", "src"):
            value = a.get(key)
            if value is not None and not (tag == "link" and a.get("rel") in ("preconnect", "dns-prefetch")):
                self.refs.append((self.getpos()[0], value.strip()))

    handle_startendtag = handle_starttag


def check_html(book, root):
    pages = {}
    for d, _, names in os.walk(book):
        for name in names:
            if name.endswith((".html", ".htm")):
                p = os.path.join(d, name)
                c = HtmlCollector()
                with open(p, encoding="utf-8", errors="replace") as f:
                    c.feed(f.read())
                pages[os.path.normpath(p)] = c
    broken, count = [], 0
    for path, page in sorted(pages.items()):
        base_dir = os.path.dirname(path)
        if page.base is not None:
            b = page.base
            base_dir = os.path.normpath(os.path.join(book, b.lstrip("/")) if b.startswith("/") else os.path.join(base_dir, b))
            if not b.endswith("/") and b:
                base_dir = os.path.dirname(base_dir)
        for line, ref in page.refs:
            if not ref or SCHEME.match(ref) or ref.startswith("//"):
                continue
            count += 1
            file_part, _, anchor = ref.partition("#")
            file_part = urllib.parse.unquote(file_part.split("?")[0])
            if not file_part:
                dest = path if page.base is None else os.path.join(base_dir, "index.html")
            elif file_part.startswith("/"):
                dest = os.path.normpath(os.path.join(book, file_part.lstrip("/")))
            else:
                dest = os.path.normpath(os.path.join(base_dir, file_part))
            if os.path.isdir(dest):
                dest = os.path.join(dest, "index.html")
            rel = os.path.relpath(path, root)
            if not os.path.exists(dest):
                broken.append(f"{rel}:{line}: {ref} -> no such file")
                continue
            if anchor:
                ids = pages[dest].ids if dest in pages else set()
                if dest in pages and urllib.parse.unquote(anchor) not in ids:
                    broken.append(f"{rel}:{line}: {ref} -> no id {anchor} in {os.path.basename(dest)}")
    return broken, count, len(pages)


def source_files(root):
    files = []
    readme = os.path.join(root, "README.md")
    if os.path.isfile(readme):
        files.append(readme)
    for d, dirs, names in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        files.extend(os.path.join(d, n) for n in sorted(names) if n.endswith(".md"))
    return files


def run(root, book):
    if book:
        broken, count, npages = check_html(book, root)
        what = f"{count} links in {npages} HTML files"
    else:
        files = source_files(root)
        broken, count = Sources().check(files, root)
        what = f"{count} links in {len(files)} Markdown files"
    for b in broken:
        print(b)
    if broken:
        print(f"check-links: {len(broken)} broken of {what}", file=sys.stderr)
        return 1, what
    print(f"check-links: {what}, none broken")
    return 0, what


def self_test():
    """One good and one broken link of each kind, each classified right."""
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "docs", "sub"))
        files = {
            "README.md": "\n".join([
                "# Top heading",
                "[good file](docs/a.md) [bad file](docs/missing.md)",
                "[good anchor](docs/a.md#section-one) [bad anchor](docs/a.md#nope)",
                "[good local](#top-heading) [bad local](#nope-local)",
                "`[in code](docs/code-missing.md)` and <https://example.com>",
                "[web](https://example.com/x.md) [mail](mailto:someone@example.com)",
                "```sh",
                "[in block](docs/block-missing.md)",
                "```",
                "",
            ]),
            "docs/a.md": "\n".join([
                "# A page",
                "## Section one",
                "## `qm simulate`: a tool",
                "## Section one",
                "[good up](../README.md) [bad sibling](b.md)",
                "![good image](sub/pic.svg) ![bad image](sub/nope.svg)",
                "[good dup](#section-one-1) [bad dup](#section-one-2)",
                "[good code heading](#qm-simulate-a-tool)",
                "[good ref]: sub/c.md",
                "[bad ref]: sub/gone.md",
                "<a href=\"sub/c.md#c-title\">ok</a> <a href=\"sub/c.md#c-nope\">bad</a>",
                "```yaml",
                "{{#include sub/data.yaml}}",
                "{{#include sub/nodata.yaml}}",
                "```",
                "",
            ]),
            "docs/sub/c.md": "# C title\nSee [back](../a.md#a-page).\n",
            "docs/sub/pic.svg": "<svg/>",
            "docs/sub/data.yaml": "a: 1\n",
        }
        for name, text in files.items():
            with open(os.path.join(t, name), "w", encoding="utf-8") as f:
                f.write(text)
        broken, _ = Sources().check(source_files(t), t)
        targets = {b.split(": ", 1)[1].split(" -> ")[0] for b in broken}
        expect = {
            "docs/missing.md", "docs/a.md#nope", "#nope-local", "b.md",
            "sub/nope.svg", "#section-one-2", "sub/gone.md", "sub/c.md#c-nope",
            "sub/nodata.yaml",
        }
        assert targets == expect, f"sources: expected {sorted(expect)}, got {sorted(targets)}"
        assert all(":" in b.split(": ")[0] for b in broken), broken

        book = os.path.join(t, "book")
        os.makedirs(os.path.join(book, "css"))
        pages = {
            "index.html": "\n".join([
                '<html><head><link rel="stylesheet" href="css/site.css">',
                '<link rel="stylesheet" href="css/gone.css"></head><body>',
                '<h1 id="top">Top</h1>',
                '<a href="a.html">good</a> <a href="missing.html">bad</a>',
                '<a href="a.html#here">good</a> <a href="a.html#nope">bad</a>',
                '<a href="#top">good</a> <a href="#nope">bad</a>',
                '<img src="css/pic.png"> <img src="css/nopic.png">',
                '<a href="https://example.com/">web</a> <a href="mailto:x@example.com">mail</a>',
                "</body></html>",
            ]),
            "a.html": '<h2 id="here">Here</h2><a href="index.html#top">back</a>',
            "404.html": '<base href="/"><a href="a.html#here">good</a><a href="sub/none.html">bad</a>',
            "css/site.css": "",
            "css/pic.png": "",
        }
        for name, text in pages.items():
            with open(os.path.join(book, name), "w", encoding="utf-8") as f:
                f.write(text)
        broken, _, _ = check_html(book, t)
        targets = {b.split(": ", 1)[1].split(" -> ")[0] for b in broken}
        expect = {"css/gone.css", "missing.html", "a.html#nope", "#nope", "css/nopic.png", "sub/none.html"}
        assert targets == expect, f"html: expected {sorted(expect)}, got {sorted(targets)}"
    print("check-links: self-test passed")
    return 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=os.path.dirname(here), help="the repository root (default: above docs/)")
    p.add_argument("--html", metavar="DIR", help="check the rendered HTML under DIR instead of the sources")
    p.add_argument("--self-test", action="store_true", help="check this checker and exit")
    args = p.parse_args()
    if args.self_test:
        try:
            return self_test()
        except AssertionError as e:
            print(f"check-links: self-test FAILED: {e}", file=sys.stderr)
            return 1
    root = os.path.abspath(args.root)
    book = os.path.abspath(args.html) if args.html else None
    if book and not os.path.isdir(book):
        print(f"check-links: {book}: no such directory", file=sys.stderr)
        return 2
    return run(root, book)[0]


if __name__ == "__main__":
    sys.exit(main())
