#!/usr/bin/env python3
"""Every relative link in the project's Markdown resolves: the file it names exists inside the
repository (a link that climbs out of it works only on its author's machine), and the #anchor
it names is a heading of that file, slugged as GitHub slugs headings (lower case, punctuation
dropped, spaces to hyphens, a repeated heading suffixed -1, -2, ...).

Run from the repository root: python3 tests/docs/links_test.py [FILE.md ...]
(default: every *.md that git tracks). Exit 1 with one line per broken link."""
import os
import re
import subprocess
import sys

HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
ROOT = os.getcwd()  # the repository root: run from there


def slug(text):
    text = re.sub(r"`([^`]*)`", r"\1", text)        # code spans keep their text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # so do links
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_code(path):
    """(line number, line) of a Markdown file, fenced code blocks left out."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if not fenced:
                yield n, line


def anchors(path, cache={}):
    if path not in cache:
        seen, found = {}, set()
        for _, line in lines_outside_code(path):
            m = HEADING.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            k = seen.get(s, 0)
            found.add(s if k == 0 else "%s-%d" % (s, k))
            seen[s] = k + 1
        cache[path] = found
    return cache[path]


def check(path):
    problems = []
    for n, line in lines_outside_code(path):
        line = re.sub(r"`[^`]*`", "", line)  # a link inside a code span is text
        for m in LINK.finditer(line):
            target = m.group(1)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ...
                continue
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                if file_part else path
            where = "%s:%d: %s" % (path, n, target)
            if os.path.relpath(os.path.abspath(dest), ROOT).startswith(".."):
                # It may resolve on the author's machine; in anyone else's checkout it does not.
                problems.append("%s: points outside the repository" % where)
            elif not os.path.exists(dest):
                problems.append("%s: no such file %s" % (where, dest))
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problems.append("%s: %s has no heading whose anchor is #%s" %
                                (where, dest, anchor))
    return problems


def tracked_markdown():
    """The *.md files git tracks; outside a git checkout, those under the current folder but
    for build folders and node_modules."""
    try:
        return subprocess.run(["git", "ls-files", "*.md"], capture_output=True, text=True,
                              check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        found = []
        for root, dirs, names in os.walk("."):
            dirs[:] = [d for d in dirs if d != "node_modules" and not d.startswith(("build", "."))]
            found += [os.path.relpath(os.path.join(root, n)) for n in names if n.endswith(".md")]
        return sorted(found)


def main(argv):
    files = argv[1:] or tracked_markdown()
    problems = [p for f in files for p in check(f)]
    for p in problems:
        print(p)
    print("%d file(s), %d broken link(s)" % (len(files), len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
