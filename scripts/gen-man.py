#!/usr/bin/env python3
"""Generate firehose's man pages.

Usage: gen-man.py OUTDIR --settings TSV

Writes
  OUTDIR/man3/NAME.3         one page per function declared in include/firehose.h,
                             from its prototype and the doc comment right above it;
  OUTDIR/man7/firehose.7     man/firehose.7.in with @SETTINGS@ replaced by the table
                             in TSV (NAME, DEFAULT, SCOPE, HELP; tab-separated, no
                             header line; `firehose_info --settings-tsv` prints it);
                             the templates' leading .\\" comment lines are notes
                             for their editors and are not copied;
  OUTDIR/man1/firehose_info.1  man/firehose_info.1.in.
@VERSION@ in the templates becomes FH_VERSION_STRING of the header.

Guarantees
  - Every function of the header gets a page, and OUTDIR/man3 holds no other *.3
    (stale pages of removed functions are deleted).
  - The output is byte-for-byte deterministic: no dates, no paths, pages and
    cross-references in sorted order, pure ASCII (other characters become groff
    escapes).
  - Anything it cannot parse fails loudly (exit status 1, with file and line): a
    declaration it does not recognise, a prototype without a doc comment right above
    it, an unbalanced backtick, a function defined in no src/ffi/*.rs file, a
    malformed settings row, a template placeholder left over.

A function's "header section" is the src/ffi/*.rs file that defines it
(`pub [unsafe] extern "C" fn NAME`); the page's title and SEE ALSO list come from
it. The static inline functions of the header (fh_init) belong to the section of
the function their last `return` calls.
"""

import argparse
import functools
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEADER_REL = "include/firehose.h"
HEADER = ROOT / HEADER_REL
FFI_DIR = ROOT / "src" / "ffi"
TEMPLATE_DIR = ROOT / "man"
LIBRARY = "firehose"
PAGE_WIDTH = 80          # the width check-man.sh renders at (MANWIDTH)
TITLE_MAX = 30           # longer section titles are cut at ':' or an em dash

# groff names for the non-ASCII characters the sources use; others become \[uXXXX].
GLYPHS = {"\u00a7": r"\(sc", "\u2014": r"\(em", "\u2013": r"\(en", "\u2264": r"\(<=",
          "\u2265": r"\(>=", "\u00d7": r"\(mu", "\u2192": r"\(->", "\u00b5": r"\(mc",
          "\u03bb": r"\(*l", "\u2212": r"\-", "\u2248": r"\(~~", "\u221a": r"\(sr"}


class GenError(Exception):
    """A problem in the inputs; main() prints it and exits 1."""


@dataclass
class Function:
    """One function of the header: its prototype lines and doc comment lines."""
    name: str
    ret: str
    proto: list
    doc: list
    line: int
    inline: bool = False
    conditions: list = field(default_factory=list)
    wraps: str = ""


# ---------------------------------------------------------------- the header

def comment_text(lines):
    """The text of a /** ... */ or /* ... */ comment: markers and the ' * ' margin
    removed, indentation after the margin kept, outer blank lines dropped."""
    body = list(lines)
    body[0] = re.sub(r"^\s*/\*\*?", "", body[0])
    body[-1] = re.sub(r"\*/\s*$", "", body[-1])
    out = [re.sub(r"^\s*\*(?!/) ?", "", ln).rstrip() if i else ln.strip()
           for i, ln in enumerate(body)]
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return out


def read_until(lines, i, done):
    """Lines from i up to and including the first for which done(line) holds;
    returns (those lines, index after them)."""
    j = i
    while j < len(lines) and not done(lines[j]):
        j += 1
    if j == len(lines):
        raise GenError(f"{HEADER_REL}:{i + 1}: unterminated construct")
    return lines[i:j + 1], j + 1


def read_braced(lines, i, stop=";"):
    """A statement from line i to where its braces balance and it ends with `stop`
    (the struct bodies of typedefs, the bodies of inline functions)."""
    depth, j = 0, i
    while j < len(lines):
        code = lines[j].strip()
        if not code.startswith(("/*", "*")):
            depth += code.count("{") - code.count("}")
        if depth == 0 and code.endswith(stop):
            return lines[i:j + 1], j + 1
        j += 1
    raise GenError(f"{HEADER_REL}:{i + 1}: unbalanced braces")


PROTO_RE = re.compile(r"^(?P<static>static\s+inline\s+)?(?P<ret>[A-Za-z_][\w\s*]*?)\s*"
                      r"\b(?P<name>[A-Za-z_]\w*)\s*\((?P<args>.*)\)\s*(?P<end>[;{])$")
RET_RE = re.compile(r"^(const |unsigned |signed |struct )*\w+( ?\*+)?$")


def parse_prototype(text, lineno):
    """(name, return type, inline?) of a declaration, or a GenError."""
    flat = " ".join(text.split())
    m = PROTO_RE.match(flat)
    if not m or not RET_RE.match(" ".join(m["ret"].split())):
        raise GenError(f"{HEADER_REL}:{lineno}: cannot parse this declaration: {flat[:70]}")
    inline = bool(m["static"])
    if inline != (m["end"] == "{"):
        raise GenError(f"{HEADER_REL}:{lineno}: only static inline functions may have a body here")
    return m["name"], " ".join(m["ret"].split()), inline


def parse_header(text):
    """(version string, [Function]) of the header text; every top-level construct
    must be one it knows, and every function must have a comment right above it."""
    version = re.search(r'^#define FH_VERSION_STRING "([^"]+)"', text, re.M)
    if not version:
        raise GenError(f"{HEADER_REL}: no #define FH_VERSION_STRING")
    lines = text.split("\n")
    funcs, doc, conds, i = [], None, [], 0
    while i < len(lines):
        line, start = lines[i], i
        s = line.strip()
        if s.startswith("/*"):
            chunk, i = read_until(lines, i, lambda ln: "*/" in ln)
            doc = (s.startswith("/**"), comment_text(chunk))
            continue
        i += 1
        if not s:
            doc = None
        elif s.startswith("#"):
            doc = None
            if re.match(r"#\s*if", s):
                conds.append(s)
            elif re.match(r"#\s*endif", s):
                if not conds:
                    raise GenError(f"{HEADER_REL}:{start + 1}: #endif without #if")
                conds.pop()
        elif s.startswith("//") or s == 'extern "C" {' or re.match(r'^}\s*// extern "C"$', s):
            doc = None
        elif re.match(r"^(typedef|struct|enum|union)\b", s):
            _, i = read_braced(lines, start)
            doc = None
        else:
            funcs.append(read_function(lines, start, doc, conds))
            i = skip_function(lines, start, funcs[-1])
            doc = None
    if conds:
        raise GenError(f"{HEADER_REL}: unterminated #if: {conds[-1]}")
    return version.group(1), funcs


def skip_function(lines, start, fn):
    """Index after the declaration (or inline definition) of fn starting at start."""
    if fn.inline:
        return read_braced(lines, start, stop="}")[1]
    return start + len(fn.proto)


def read_function(lines, start, doc, conds):
    """The Function declared from line start, with its doc comment."""
    decl, _ = read_until(lines, start, lambda ln: ln.rstrip().endswith((";", "{")))
    name, ret, inline = parse_prototype("\n".join(decl), start + 1)
    if doc is None:
        raise GenError(f"{HEADER_REL}:{start + 1}: {name} has no doc comment right above it")
    is_doxygen, text = doc
    if not (is_doxygen or inline):
        raise GenError(f"{HEADER_REL}:{start + 1}: {name} has a /* comment, not a /** doc comment")
    if not any(t.strip() for t in text):
        raise GenError(f"{HEADER_REL}:{start + 1}: {name} has an empty doc comment")
    fn = Function(name, ret, [ln.rstrip() for ln in decl], text, start + 1, inline)
    if inline:
        body, _ = read_braced(lines, start, stop="}")
        calls = re.findall(r"\breturn\s+(?:\([^)]*\)\s*)?(\w+)\s*\(", "\n".join(body))
        if not calls:
            raise GenError(f"{HEADER_REL}:{start + 1}: inline {name} returns no function call")
        fn.wraps = calls[-1]
        fn.proto[-1] = re.sub(r"\s*\{\s*$", ";", fn.proto[-1])
        fn.conditions = [c for c in conds if "FIREHOSE_H" not in c and "__cplusplus" not in c]
    return fn


# ---------------------------------------------------------------- sections

def section_title(first_line):
    """A short title from a file's first //! line: without 'Header section:', its
    first sentence, parenthetical remarks or trailing period; cut at the first ':'
    or em dash when long (keeping the part after it when the part before is just
    the library's name)."""
    t = re.sub(r"^\s*Header section:\s*", "", first_line, flags=re.I)
    t = re.sub(r"\s*\([^()]*\)", "", t)
    t = re.split(r"\.\s", t + " ", maxsplit=1)[0].strip().rstrip(".").strip()
    cut = re.search(r":| \u2014 | -- ", t)
    if len(t) > TITLE_MAX and cut:
        head, tail = t[:cut.start()].strip(), t[cut.end():].strip()
        t = head
        if head.lower() == LIBRARY:
            t = re.sub(r"^(the|a|an)\s+", "", tail, flags=re.I)
    if not t:
        raise GenError(f"cannot derive a section title from: {first_line!r}")
    return t


def ffi_sections():
    """{function name: (file stem, section title)} for every extern "C" function
    defined in src/ffi/*.rs."""
    where = {}
    for path in sorted(FFI_DIR.glob("*.rs")):
        text = path.read_text(encoding="utf-8")
        names = re.findall(r'pub\s+(?:unsafe\s+)?extern\s+"C"\s+fn\s+(\w+)', text)
        if not names:
            continue
        first = re.search(r"^//!(.*)$", text, re.M)
        if not first:
            raise GenError(f"{path.relative_to(ROOT)}: no //! line to take the section title from")
        title = section_title(first.group(1))
        for n in names:
            if n in where and where[n][0] != path.stem:
                raise GenError(f"{n} is defined in both src/ffi/{where[n][0]}.rs and {path.name}")
            where[n] = (path.stem, title)
    return where


def assign_sections(funcs, where):
    """{function name: (stem, title)} for the header's functions; a function found
    in no file fails."""
    out = {}
    for fn in funcs:
        key = fn.wraps if fn.inline else fn.name
        if key not in where:
            what = f"{fn.name} (inline, wrapping {key})" if fn.inline else fn.name
            raise GenError(f"{HEADER_REL}:{fn.line}: {what} is defined in no src/ffi/*.rs file "
                           f'(no `pub extern "C" fn {key}`)')
        out[fn.name] = where[key]
    return out


def fitted_title(title, names):
    """The page header's centre for a section: 'firehose: TITLE', or just TITLE
    where that would not fit between NAME(3) on both sides in PAGE_WIDTH columns
    for the longest name of the section (groff would cut it), or just 'firehose'."""
    longest = max(len(n) for n in names) + len("(3)")
    for center in (f"{LIBRARY}: {title}", title):
        if 2 * longest + len(center) + 4 <= PAGE_WIDTH:
            return center
    return LIBRARY


# ---------------------------------------------------------------- troff text

def glyphs(text):
    """Non-ASCII characters as groff escapes."""
    return "".join(c if ord(c) < 128 else GLYPHS.get(c, f"\\[u{ord(c):04X}]") for c in text)


def escape_prose(text, names):
    """Running text for troff: backslashes, non-ASCII, option dashes; *emphasis* in
    italics; the header's function names and FH_/RPIPE_ constants in bold."""
    text = glyphs(text.replace("\\", r"\e"))
    text = re.sub(r"(?<!\w)-(?=[\w-])", r"\\-", text)
    text = re.sub(r"(?<![\w*\\])\*(?=\w)([^*\n]+?)(?<=\w)\*(?![\w*])", r"\\fI\1\\fR", text)
    return names_re(names).sub(r"\\fB\1\\fR", text)


@functools.lru_cache(maxsize=None)
def names_re(names):
    """A regex matching the function names in names (a frozenset) and FH_/RPIPE_
    constants (FH_ERR_* included) as whole words."""
    longest_first = sorted(names, key=lambda n: (-len(n), n))
    alts = "".join("|" + re.escape(n) + r"(?!\w)" for n in longest_first)
    return re.compile(r"(?<![\w\\])((?:FH|RPIPE)_[A-Z0-9_]*[A-Z0-9_]\*?(?!\w)" + alts + ")")


def escape_code(text):
    """Literal text for troff (every dash a minus)."""
    return glyphs(text.replace("\\", r"\e")).replace("-", r"\-")


def line_safe(text):
    """Each line stripped, and guarded by \\& if it would start a request."""
    out = []
    for ln in text.split("\n"):
        ln = ln.strip()
        out.append("\\&" + ln if ln.startswith((".", "'")) else ln)
    return "\n".join(out)


def inline(text, where, names):
    """Doc text to troff: `code` in bold, the rest as prose; lines kept."""
    parts = text.split("`")
    if len(parts) % 2 == 0:
        raise GenError(f"{where}: unbalanced backtick in: {text.strip()[:70]!r}")
    out = [escape_code(p).join([r"\fB", r"\fR"]) if k % 2 else escape_prose(p, names)
           for k, p in enumerate(parts)]
    return line_safe("".join(out))


def plain(text):
    """Doc text as plain words (for NAME): markup dropped, escaped for troff."""
    text = text.replace("`", "")
    text = re.sub(r"(?<![\w*])\*(?=\w)([^*]+?)(?<=\w)\*(?![\w*])", r"\1", text)
    return line_safe(glyphs(text.replace("\\", r"\e")).replace("-", r"\-"))


def first_sentence(text):
    """The first sentence of text: up to the first '.' followed by a space or the
    end, outside parentheses, not in 'e.g.' or 'i.e.'; without that period."""
    depth = 0
    for k, c in enumerate(text):
        depth += (c in "([") - (c in ")]")
        if c == "." and depth <= 0 and (k + 1 == len(text) or text[k + 1] == " "):
            if not re.search(r"\b(e\.g|i\.e|etc|cf|vs)$", text[:k]):
                return text[:k].strip()
    return text.strip().rstrip(".")


# ---------------------------------------------------------------- doc comments

def paragraphs(doc):
    """The doc's paragraphs (lists of lines), split at blank lines."""
    paras, cur = [], []
    for ln in doc + [""]:
        if ln.strip():
            cur.append(ln)
        elif cur:
            paras.append(cur)
            cur = []
    return paras


def split_threads(paras):
    """(description paragraphs, thread lines): a line starting 'Threads:' and the
    rest of its paragraph go to the THREADS section."""
    desc, threads = [], []
    for p in paras:
        k = next((i for i, ln in enumerate(p) if ln.lstrip().startswith("Threads:")), None)
        if k is None:
            desc.append(p)
            continue
        if p[:k]:
            desc.append(p[:k])
        threads += [re.sub(r"^\s*Threads:\s*", "", p[k])] + p[k + 1:]
    return desc, threads


def blocks(para):
    """A paragraph as ('text', lines) and ('item', lines) blocks: '- ' starts a list
    item, indented lines continue it."""
    out = []
    for ln in para:
        if ln.startswith("- "):
            out.append(("item", [ln[2:]]))
        elif out and out[-1][0] == "item" and ln.startswith(" "):
            out[-1][1].append(ln)
        elif out and out[-1][0] == "text":
            out[-1][1].append(ln)
        else:
            out.append(("text", [ln]))
    return out


def render_paragraphs(paras, where, names):
    """troff for doc paragraphs: .PP between paragraphs, .IP bullets for lists."""
    out, prev = [], None
    for n, para in enumerate(paras):
        for kind, lines in blocks(para):
            if kind == "item":
                out.append(r".IP \(bu 2")
            elif n or prev is not None:
                out.append(".PP")
            out.append(inline("\n".join(lines), where, names))
            prev = kind
    return out


# ---------------------------------------------------------------- pages

def return_value(fn):
    """The RETURN VALUE paragraph, from the return type and what the doc says."""
    doc = " ".join(fn.doc)
    errs = (r"\fBfh_strerror\fR(3) names a status and \fBfh_last_error\fR(3) copies this "
            "thread's detailed message (what failed, with which argument).")
    if fn.ret == "int" and re.search(r"or a negative FH_ERR_", first_paragraph(fn)):
        return [r"The value described above (zero or positive) on success; otherwise a "
                r"negative \fBFH_ERR_*\fR status.", errs]
    if fn.ret == "int":
        out = [r"\fBFH_OK\fR (0) on success."]
        if "FH_NOT_READY" in doc:
            out.append(r"\fBFH_NOT_READY\fR (1) when the operation is not complete yet "
                       "(not an error; call again).")
        out.append(r"Otherwise a negative \fBFH_ERR_*\fR status.")
        return out + [errs]
    if fn.ret == "void":
        out = ["None."]
        if "fh_last_error" in doc:
            out.append(r"Problems are reported by \fBfh_last_error\fR(3).")
        return out
    if fn.ret == "const char *":
        out = [r"A read-only, NUL-terminated string owned by the library; do not modify "
               "or free it."]
        if "Never NULL" in doc:
            out.append("Never NULL.")
        return out
    if fn.ret.endswith("*"):
        out = ["The pointer described above."]
        if "NULL" in doc:
            out.append(r"NULL on error; \fBfh_last_error\fR(3) then gives the detailed message.")
        return out
    return [rf"The \fB{escape_code(fn.ret)}\fR value described above; no status code."]


def first_paragraph(fn):
    """The doc's first description paragraph, as one line."""
    desc, _ = split_threads(paragraphs(fn.doc))
    if not desc:
        raise GenError(f"{HEADER_REL}:{fn.line}: {fn.name}'s doc comment has only a Threads: line")
    return " ".join(ln.strip() for ln in desc[0])


def th_arg(text):
    """A quoted .TH argument."""
    if '"' in text:
        raise GenError(f'a double quote in a page title: {text!r}')
    return f'"{text}"'


def render_page(fn, version, center, peers, names):
    """The troff source of fn's section-3 page."""
    where = f"{HEADER_REL}:{fn.line} ({fn.name})"
    desc, threads = split_threads(paragraphs(fn.doc))
    name_line = first_sentence(first_paragraph(fn))
    th = f"{fn.name.upper()} 3 \"\" {th_arg(LIBRARY + ' ' + version)} {th_arg(glyphs(center))}"
    out = [generated_by(HEADER_REL).rstrip("\n"), ".TH " + th,
           ".nh", ".SH NAME", f"{fn.name} \\- {plain(name_line)}".replace("\n", " "),
           ".SH SYNOPSIS", ".nf"]
    if fn.inline and any("MPI_VERSION" in c for c in fn.conditions):
        out.append(r"\fB#include <mpi.h>\fR")
    out += [r"\fB#include <firehose.h>\fR", ".sp"]
    out += [line_safe_keep(escape_code(ln)) for ln in fn.proto]
    out += [".fi", ".PP",
            r"Link with \fBpkg\-config \-\-libs firehose\fR, or with the CMake target "
            r"\fBfirehose::firehose\fR."]
    out.append(".SH DESCRIPTION")
    out += render_paragraphs(desc, where, names)
    if fn.inline:
        cond = " and ".join(escape_code(re.sub(r"^#\s*if\s+", "", c)) for c in fn.conditions)
        out += [".PP", rf"\fB{fn.name}\fR is a static inline function of \fB<firehose.h>\fR "
                rf"that calls \fB{fn.wraps}\fR(3)" +
                (rf"; it is defined only when \fB{cond}\fR." if cond else ".")]
    if threads:
        threads[0] = threads[0][:1].upper() + threads[0][1:]
        out += [".SH THREADS", inline("\n".join(threads), where, names)]
    out += [".SH RETURN VALUE"] + return_value(fn)
    out += [".SH SEE ALSO"] + [f".BR {p} (3)," for p in peers] + [f".BR {LIBRARY} (7)"]
    return "\n".join(out) + "\n"


def line_safe_keep(ln):
    """A no-fill line: indentation kept, guarded by \\& if it would start a request."""
    return "\\&" + ln if ln.startswith((".", "'")) else ln


# ---------------------------------------------------------------- settings, templates

def read_settings(path):
    """[(name, default, scope, help)] of the settings TSV, in its order."""
    rows, seen = [], set()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise GenError(f"cannot read the settings table {path}: {e.strerror}")
    for k, ln in enumerate(text.split("\n"), 1):
        if not ln.strip():
            continue
        cols = ln.split("\t")
        if len(cols) != 4:
            raise GenError(f"{path}:{k}: expected 4 tab-separated columns "
                           f"(NAME, DEFAULT, SCOPE, HELP), found {len(cols)}")
        name, default, scope, help_ = (c.strip() for c in cols)
        if not re.fullmatch(r"FH_[A-Z0-9_]+", name):
            raise GenError(f"{path}:{k}: bad setting name {name!r}")
        if not re.fullmatch(r"[a-z]+", scope) or not help_:
            raise GenError(f"{path}:{k}: {name}: bad scope {scope!r} or empty help")
        if name in seen:
            raise GenError(f"{path}:{k}: {name} appears twice")
        seen.add(name)
        rows.append((name, default, scope, help_))
    if not rows:
        raise GenError(f"{path}: no settings")
    return rows


def render_settings(rows, names):
    """The settings table as .TP entries."""
    out = []
    for name, default, scope, help_ in rows:
        where = f"settings row {name}"
        dflt = rf"default \fB{escape_code(default)}\fR" if default else "unset by default"
        out += [".TP", f".B {name}", f"{dflt}; {scope}\\-wide. {inline(help_, where, names)}"]
    return "\n".join(out)


def fill_template(name, subst):
    """A template of man/ with its @KEY@ placeholders replaced; @SETTINGS@ must be a
    line of its own; a placeholder left over fails."""
    path = TEMPLATE_DIR / name
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise GenError(f"cannot read {path.relative_to(ROOT)}: {e.strerror}")
    for key, value in sorted(subst.items()):
        token = f"@{key}@"
        if "\n" in value:
            if text.count(f"\n{token}\n") != 1:
                raise GenError(f"man/{name}: {token} must appear once, on a line of its own")
            text = text.replace(f"\n{token}\n", f"\n{value}\n")
        else:
            text = text.replace(token, value)
    left = re.search(r"@[A-Z_]+@", text)
    if left:
        raise GenError(f"man/{name}: unknown placeholder {left.group(0)}")
    lines = text.split("\n")
    while lines and lines[0].startswith('.\\"'):
        lines.pop(0)
    return generated_by(f"man/{name}") + "\n".join(lines)


def generated_by(source):
    """The comment line every generated page starts with."""
    return f'.\\" Generated by scripts/gen-man.py from {source}; do not edit.\n'


# ---------------------------------------------------------------- output

def ascii_bytes(rel, text):
    """text as ASCII bytes, or a GenError naming the page."""
    try:
        return text.encode("ascii")
    except UnicodeEncodeError as e:
        raise GenError(f"{rel}: non-ASCII character {text[e.start]!r} in the output")


def render_all(settings_path):
    """{relative path: page bytes} of every page; nothing is written yet, so a
    failure leaves the output directory as it was."""
    version, funcs = parse_header(HEADER.read_text(encoding="utf-8"))
    dup = sorted({f.name for f in funcs if [g.name for g in funcs].count(f.name) > 1})
    if dup:
        raise GenError(f"{HEADER_REL}: declared twice: {', '.join(dup)}")
    names = frozenset(f.name for f in funcs)
    sections = assign_sections(funcs, ffi_sections())
    members = {}
    for fn in funcs:
        members.setdefault(sections[fn.name], []).append(fn.name)
    pages = {}
    for fn in sorted(funcs, key=lambda f: f.name):
        sec = sections[fn.name]
        peers = sorted(n for n in members[sec] if n != fn.name)
        center = fitted_title(sec[1], members[sec])
        pages[f"man3/{fn.name}.3"] = render_page(fn, version, center, peers, names)
    table = render_settings(read_settings(settings_path), names)
    pages[f"man7/{LIBRARY}.7"] = fill_template(f"{LIBRARY}.7.in",
                                               {"VERSION": version, "SETTINGS": table})
    pages["man1/firehose_info.1"] = fill_template("firehose_info.1.in", {"VERSION": version})
    return {rel: ascii_bytes(rel, text) for rel, text in sorted(pages.items())}


def generate(outdir, settings_path):
    """Write every page below outdir and delete stale section-3 pages; returns the
    number of pages."""
    pages = render_all(settings_path)
    for rel, data in pages.items():
        path = outdir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    for stale in sorted((outdir / "man3").glob("*.3")):
        if f"man3/{stale.name}" not in pages:
            stale.unlink()
            print(f"gen-man: removed {stale} (no such function in the header)", file=sys.stderr)
    return len(pages)


def main(argv):
    """Command line: gen-man.py OUTDIR --settings TSV."""
    ap = argparse.ArgumentParser(prog="gen-man.py", description=__doc__.split("\n")[0])
    ap.add_argument("outdir", type=Path, help="where man1/, man3/ and man7/ go")
    ap.add_argument("--settings", metavar="TSV",
                    help="settings table (firehose_info --settings-tsv) for firehose(7)")
    args = ap.parse_args(argv)
    if not args.settings:
        print("gen-man: --settings TSV is required: firehose(7) lists every setting "
              "(make it with 'firehose_info --settings-tsv > settings.tsv')", file=sys.stderr)
        return 2
    try:
        n = generate(args.outdir, args.settings)
    except GenError as e:
        print(f"gen-man: error: {e}", file=sys.stderr)
        return 1
    print(f"gen-man: {n} pages written below {args.outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
