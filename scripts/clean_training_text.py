#!/usr/bin/env python3
"""Turns the documentation unpacked by scripts/get_training_text.sh into plain
English text for the default model (standard library only).

    clean_training_text.py ROOT OUT_DIR

ROOT holds one folder per Debian package (dpkg -x). Every document becomes
paragraphs, one per line, separated by a blank line; documents are separated
by two blank lines. Code blocks, tables, navigation and markup are dropped:
the model is meant to learn prose. One document in 50 (by a hash of its
name) is held out; heldout_excerpt.txt is the start of the held-out public
domain text (the perplexity golden test's input).
"""
import glob
import gzip
import hashlib
import html
import html.parser
import os
import re
import sys

WORD = re.compile(r"[A-Za-z]+")


def good_paragraph(p):
    """Prose-like: enough words, mostly letters, ASCII-ish English."""
    words = p.split()
    if len(words) < 6:
        return False
    letters = sum(c.isalpha() for c in p)
    if letters < 0.6 * len(p):
        return False
    if sum(ord(c) > 127 for c in p) > 0.05 * len(p):
        return False
    # Mostly real words (not identifiers, paths or tables of numbers).
    plain = sum(1 for w in words if WORD.fullmatch(w.strip(".,;:!?()'\"")))
    return plain >= 0.5 * len(words)


def normalise(p):
    p = p.replace("\u00a0", " ").replace("\u2019", "'").replace("\u2018", "'")
    p = p.replace("\u201c", '"').replace("\u201d", '"').replace("\u2014", " - ")
    p = p.replace("\u2013", "-").replace("\u2026", "...").replace("\u00b6", "")
    return re.sub(r"\s+", " ", p).strip()


# --- HTML ------------------------------------------------------------------
PROSE = {"p", "li", "dd", "dt", "h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "figcaption"}
SKIP = {"pre", "script", "style", "nav", "head", "title", "table", "header", "footer",
        "aside", "form", "button", "select", "svg", "math", "kbd"}
BLOCK = PROSE | {"div", "section", "article", "main", "ul", "ol", "dl", "tr", "td", "th",
                 "br", "hr", "body", "html", "table", "pre"}
SKIP_CLASSES = ("navheader", "navfooter", "sphinxsidebar", "related", "toc", "footer",
                "header", "breadcrumb", "sidebar", "menu", "nav", "highlight", "admonition-title",
                "headerlink", "fancy_toc", "codeblock", "mobile-nav", "skip", "copyright")


class HtmlText(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.skip_stack = []  # tags that opened a skipped region
        self.prose = 0
        self.buf = []
        self.out = []
        self.stack = []

    def flush(self):
        if self.buf:
            p = normalise("".join(self.buf))
            if p:
                self.out.append(p)
            self.buf = []

    def handle_starttag(self, tag, attrs):
        if tag in ("br", "hr", "img", "meta", "link", "input", "wbr", "col", "area", "source"):
            if tag in ("br", "hr"):
                self.buf.append(" ")
            return
        cls = dict(attrs).get("class") or ""
        skipped = tag in SKIP or any(c in cls.split() for c in SKIP_CLASSES)
        self.stack.append((tag, skipped, tag in PROSE))
        if tag in BLOCK:
            self.flush()
        if skipped:
            self.skip_stack.append(tag)
        if tag in PROSE:
            self.prose += 1

    def handle_endtag(self, tag):
        # Pop to the matching tag (HTML in the wild leaves tags open).
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                for t, skipped, prose in reversed(self.stack[i:]):
                    if skipped:
                        self.skip_stack.pop()
                    if prose:
                        self.prose -= 1
                del self.stack[i:]
                break
        else:
            return
        if tag in BLOCK:
            self.flush()

    def handle_data(self, data):
        if self.prose > 0 and not self.skip_stack:
            self.buf.append(data)


def html_paragraphs(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    parser = HtmlText()
    try:
        parser.feed(text)
        parser.close()
    except Exception:  # malformed page: keep what was read
        pass
    parser.flush()
    return parser.out


# --- reStructuredText (the Python documentation's _sources) ----------------
DROP_DIRECTIVES = {"code-block", "sourcecode", "code", "literalinclude", "productionlist",
                   "doctest", "testcode", "testoutput", "testsetup", "testcleanup", "toctree",
                   "index", "highlight", "image", "figure", "raw", "csv-table", "list-table",
                   "table", "tabularcolumns", "include", "moduleauthor", "sectionauthor",
                   "opcode", "cmdoption", "option", "envvar", "productionlist", "grammar-snippet",
                   "program", "currentmodule", "module", "c:macro", "impl-detail", "audit-event",
                   "availability", "only", "seealso", "rubric", "autosummary", "graphviz", "math"}
ROLE = re.compile(r":[\w:+-]+:`([^`]*)`")
REF = re.compile(r"`([^`<]*?)\s*<[^>]*>`_{1,2}")
LITERAL = re.compile(r"``([^`]*)``")
INTERP = re.compile(r"`([^`]*)`_{0,2}")


def rst_inline(p):
    def role(m):
        t = m.group(1)
        t = re.sub(r"\s*<[^>]*>$", "", t)
        return t.lstrip("~!.")
    p = ROLE.sub(role, p)
    p = REF.sub(r"\1", p)
    p = LITERAL.sub(r"\1", p)
    p = INTERP.sub(r"\1", p)
    p = re.sub(r"\*\*([^*]+)\*\*", r"\1", p)
    p = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\1", p)
    p = re.sub(r"\|([\w-]+)\|", r"\1", p)
    p = re.sub(r"\[#?\w*\]_", "", p)
    return p


def indent_of(line):
    return len(line) - len(line.lstrip(" "))


def rst_paragraphs(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().expandtabs(8).split("\n")
    out, para = [], []
    drop_indent = None  # lines indented deeper than this are dropped

    def flush():
        if para:
            p = " ".join(s.strip() for s in para)
            para.clear()
            p = re.sub(r"^([*+-]|#\.|\d+\.|\(\d+\))\s+", "", p)
            out.append(normalise(rst_inline(p)))

    prev_literal = False
    for line in lines:
        stripped = line.strip()
        ind = indent_of(line)
        if drop_indent is not None:
            if not stripped or ind > drop_indent:
                continue
            drop_indent = None
        if not stripped:
            flush()
            continue
        if re.fullmatch(r"([=\-~^\"'`#*+.:_])\1{2,}", stripped):  # section underline / rule
            para.clear()  # the title line above it
            continue
        m = re.match(r"\.\.\s+([\w:-]+)::(.*)$", stripped)
        if m or stripped.startswith(".. ") or stripped == "..":
            flush()
            name = m.group(1) if m else ""
            if not m or name in DROP_DIRECTIVES:
                drop_indent = ind  # a comment, a target or a dropped directive
            prev_literal = False
            continue
        if stripped.startswith(">>>") or stripped.startswith("... ") or stripped.startswith("$ "):
            flush()
            continue
        if re.match(r":[\w -]+:", stripped) and not para:  # directive options, field lists
            continue
        if para and ind != indent_of(para[0]) and ind > indent_of(para[0]) + 1:
            # A deeper block under a paragraph: a definition body or a quote.
            flush()
        para.append(line)
        if stripped.endswith("::"):
            # A literal block follows: keep the sentence, drop the code.
            para[-1] = line.rstrip()[:-1] if not stripped == "::" else ""
            flush()
            drop_indent = ind
            prev_literal = True
    flush()
    return out


# --- dictd databases (Jargon File, The Devil's Dictionary) ------------------
def dict_paragraphs(path):
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    paras = []
    for block in re.split(r"\n\s*\n", text):
        lines = [l.strip() for l in block.split("\n")]
        p = " ".join(l for l in lines if l)
        p = re.sub(r"\{([^}]*)\}", r"\1", p)  # dictd cross references
        paras.append(normalise(p))
    return paras


# --- sources ---------------------------------------------------------------
def sources(root):
    """(source name, document name, reader, path) for every document."""
    py = os.path.join(root, "python3.11-doc/usr/share/doc/python3.11/html/_sources")
    for path in sorted(glob.glob(py + "/**/*.rst.txt", recursive=True)):
        rel = os.path.relpath(path, py)
        if rel.startswith(("whatsnew/changelog", "library/2to3")):
            continue
        yield "python", rel, rst_paragraphs, path
    dj = os.path.join(root, "python-django-doc/usr/share/doc/python-django-doc/html")
    for path in sorted(glob.glob(dj + "/**/*.html", recursive=True)):
        rel = os.path.relpath(path, dj)
        if rel.startswith(("_modules", "genindex", "py-modindex", "search", "_static")):
            continue
        yield "django", rel, html_paragraphs, path
    node = os.path.join(root, "nodejs-doc/usr/share/doc/nodejs/api")
    for path in sorted(glob.glob(node + "/*.html") + glob.glob(node + "/*.html.gz")):
        rel = os.path.basename(path)
        if rel.startswith(("all.html", "index.html")):
            continue
        yield "node", rel, html_paragraphs, path
    rust = os.path.join(root, "rust-doc/usr/share/doc/rust-doc/html")
    for book in ("book", "reference", "nomicon", "rust-by-example", "edition-guide",
                 "embedded-book", "rustc", "cargo", "rustdoc"):
        path = os.path.join(rust, book, "print.html")
        if os.path.exists(path):
            yield "rust", book, html_paragraphs, path
    sq = os.path.join(root, "sqlite3-doc/usr/share/doc/sqlite3")
    for path in sorted(glob.glob(sq + "/**/*.html", recursive=True)):
        yield "sqlite", os.path.relpath(path, sq), html_paragraphs, path
    pg = os.path.join(root, "postgresql-doc-15/usr/share/doc/postgresql-doc-15/html")
    for path in sorted(glob.glob(pg + "/*.html")):
        yield "postgresql", os.path.basename(path), html_paragraphs, path
    # Sphinx, Doxygen, QuickBook and Erlang documentation, every page.
    for source, base, skip in (
            ("erlang", "erlang-doc/usr/share/doc/erlang-doc", ()),
            ("cmake", "cmake-doc/usr/share/doc/cmake-data/html", ("genindex", "search")),
            ("boost", "libboost1.74-doc/usr/share/doc/libboost1.74-doc", ()),
            ("sqlalchemy", "python-sqlalchemy-doc/usr/share/doc/python-sqlalchemy-doc/html",
             ("genindex", "search", "_modules")),
            ("flask", "python-flask-doc/usr/share/doc/python-flask-doc/html",
             ("genindex", "search", "_modules")),
            ("werkzeug", "python-werkzeug-doc/usr/share/doc/python-werkzeug-doc/html",
             ("genindex", "search", "_modules")),
            ("sphinx", "sphinx-doc/usr/share/doc/sphinx-doc/html", ("genindex", "search")),
            ("llvm", "llvm-15-doc/usr/share/doc/llvm-15-doc/html", ("genindex", "search")),
            ("clang", "clang-15-doc/usr/share/doc/clang-15/html", ("genindex", "search")),
            ("pandas", "python-pandas-doc/usr/share/doc/python-pandas-doc/html",
             ("genindex", "search", "_modules", "reference/api"))):
        top = os.path.join(root, base)
        for path in sorted(glob.glob(top + "/**/*.html", recursive=True)):
            rel = os.path.relpath(path, top)
            if rel.startswith(skip) or "/_static/" in path:
                continue
            yield source, rel, html_paragraphs, path
    for name, rel in (("jargon", "dict-jargon/usr/share/dictd/jargon.dict.dz"),
                      ("devil", "dict-devil/usr/share/dictd/devil.dict.dz")):
        path = os.path.join(root, rel)
        if os.path.exists(path):
            yield name, rel, dict_paragraphs, path


PUBLIC_DOMAIN = ("sqlite", "jargon", "devil")


def main():
    root, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    seen = set()
    train, held = [], []
    held_pd = []
    stats = {}
    for source, name, reader, path in sources(root):
        paras = []
        for p in reader(path):
            if not good_paragraph(p):
                continue
            key = hashlib.sha1(p.encode()).digest()[:12]
            if key in seen:  # navigation, boilerplate, the same page twice
                continue
            seen.add(key)
            paras.append(p)
        if not paras:
            continue
        doc = "\n\n".join(paras)
        h = int(hashlib.sha1(f"{source}/{name}".encode()).hexdigest(), 16)
        # The dictionaries are one document each: hold out one part of them.
        if reader is dict_paragraphs:
            cut = len(paras) * 49 // 50
            train.append("\n\n".join(paras[:cut]))
            held.append("\n\n".join(paras[cut:]))
            held_pd.append("\n\n".join(paras[cut:]))
        elif h % 50 == 0:
            held.append(doc)
            if source in PUBLIC_DOMAIN:
                held_pd.append(doc)
        else:
            train.append(doc)
        s = stats.setdefault(source, [0, 0])
        s[0] += 1
        s[1] += len(doc)
    sep = "\n\n\n"
    train_text = sep.join(train) + "\n"
    held_text = sep.join(held) + "\n"
    with gzip.open(os.path.join(out_dir, "train.txt.gz"), "wt", encoding="utf-8") as f:
        f.write(train_text)
    with gzip.open(os.path.join(out_dir, "heldout.txt.gz"), "wt", encoding="utf-8") as f:
        f.write(held_text)
    # About 12 KB of held-out public-domain text, cut at a paragraph.
    excerpt, size = [], 0
    for para in sep.join(held_pd).split("\n\n"):
        if size > 12000:
            break
        excerpt.append(para.strip("\n"))
        size += len(para) + 2
    with open(os.path.join(out_dir, "heldout_excerpt.txt"), "w", encoding="utf-8") as f:
        f.write("\n\n".join(excerpt) + "\n")
    with open(os.path.join(out_dir, "stats.txt"), "w") as f:
        for source, (docs, chars) in sorted(stats.items()):
            f.write(f"{source}\t{docs} documents\t{chars} characters\n")
        f.write(f"train\t{len(train)} documents\t{len(train_text)} characters\n")
        f.write(f"heldout\t{len(held)} documents\t{len(held_text)} characters\n")
    print(open(os.path.join(out_dir, "stats.txt")).read(), end="")


if __name__ == "__main__":
    main()
