#!/usr/bin/env python3
"""Check include/firehose.f90 against include/firehose.h by SIGNATURE.

Usage: scripts/check-fortran.py [HEADER [F90]]     (defaults: include/firehose.h,
                                                    include/firehose.f90)
       scripts/check-fortran.py --self-test [HEADER [F90]]

For every function the header declares (static inline definitions such as fh_init
are C-only and skipped), the bind(C) interface with that binding label in the
Fortran module must have the same number of arguments, each argument must pass
what C expects (kind, by value or by reference), and the result must match.
Argument names need not match. Also checked: every bind(C) interface names a real
header function; each abstract interface named after a callback typedef (fh_pin_cb
for fh_pin_cb_t) has the callback's signature; each bind(C) derived type named
after a C struct (fh_stats_t, ...) has the struct's fields, in order, with
matching kinds.

One line per mismatch (file:line: function: argument: C type vs Fortran type:
why), exit status 1 if any. On success: "fortran: N interfaces checked by
signature". Standard library only.

--self-test breaks a copy of the Fortran module in memory in several ways (wrong
kind, missing value, value on a by-reference argument, missing argument, wrong
result, subroutine for a function, missing interface) and fails unless every
break is reported.

MAPPING (C type of an argument -> what the Fortran dummy argument must be)
---------------------------------------------------------------------------
  Scalars passed by value: the kind below, WITH `value`, not an array.
    int, unsigned int, enum E             integer(c_int)       | integer(c_int32_t)
    int32_t, uint32_t                     integer(c_int32_t)   | integer(c_int)
    int64_t, uint64_t                     integer(c_int64_t)   | integer(c_long_long)
    long long, unsigned long long         integer(c_long_long) | integer(c_int64_t)
    long, unsigned long                   integer(c_long)
    short, int16_t (and unsigned)         integer(c_short)     | integer(c_int16_t)
    signed/unsigned char, int8_t, uint8_t integer(c_signed_char) | integer(c_int8_t)
                                          | character(kind=c_char)
    char                                  character(kind=c_char)   (len 1)
    size_t                                integer(c_size_t)
    ptrdiff_t                             integer(c_ptrdiff_t)
    intptr_t, uintptr_t                   integer(c_intptr_t)
    float / double / long double          real(c_float) / real(c_double) / real(c_long_double)
    _Bool, bool                           logical(c_bool)
    typedef T X (fh_handle_t, rpipe_addr_t, fh_dtype_t, ...)   as T
    struct S (complete, by value)         type(S), value  (S the tag or typedef name)
    function pointer (fh_am_handler_t, fh_pin_cb_t, R (*)(...))
                                          type(c_funptr), value
  Pointers `T *` / `const T *` (any depth), one of:
    a) type(c_ptr), value                 the address itself (c_loc(x), c_null_ptr)
    b) by reference, NO `value`: a dummy of the pointee's Fortran type (table above,
       scalar or explicit-/assumed-size array):
         T scalar                         integer(c_int64_t), intent(out) :: h_out
         T = char                         character(kind=c_char) :: s(*)   (len 1)
         T = struct S (complete)          type(S)
         T = a pointer (T **: fh_ctx_t **ctx_out, const void **addr_out)
                                          type(c_ptr)            (c_funptr if T is a
                                                                  function pointer)
         T = void                         type(*) only (assumed type)
         T = opaque struct (fh_ctx_t, fh_pin_t, rpipe_t, fh_token_t, ...)
                                          not allowed: handles are type(c_ptr), value
       and if the pointee is const, not intent(out) / intent(inout).
  Never (they pass descriptors, not C pointers): pointer, allocatable, assumed-shape
  (:) or assumed-rank (..) dummies, class(...), character(len=*) or len > 1.
  Results: void -> subroutine; otherwise a function whose result follows the by-value
  rules above (int / status enum -> integer(c_int); size_t -> integer(c_size_t);
  unsigned int -> integer(c_int); any data pointer, const char * included ->
  type(c_ptr); function pointer -> type(c_funptr)), no pointer/allocatable/array.
  Struct fields (bind(C) derived types) follow the by-value rules, without `value`;
  a C array field T x[N] is a Fortran array of N elements.
"""

import os
import re
import sys

# ---------------------------------------------------------------------------
# The mapping tables (see the docstring).

# Canonical C scalar type -> (Fortran type, accepted kinds).
SCALAR_KINDS = {
    "int": ("integer", ("c_int", "c_int32_t")),
    "unsigned int": ("integer", ("c_int", "c_int32_t")),
    "int32_t": ("integer", ("c_int32_t", "c_int")),
    "uint32_t": ("integer", ("c_int32_t", "c_int")),
    "int64_t": ("integer", ("c_int64_t", "c_long_long")),
    "uint64_t": ("integer", ("c_int64_t", "c_long_long")),
    "long long": ("integer", ("c_long_long", "c_int64_t")),
    "unsigned long long": ("integer", ("c_long_long", "c_int64_t")),
    "long": ("integer", ("c_long",)),
    "unsigned long": ("integer", ("c_long",)),
    "short": ("integer", ("c_short", "c_int16_t")),
    "unsigned short": ("integer", ("c_short", "c_int16_t")),
    "int16_t": ("integer", ("c_int16_t", "c_short")),
    "uint16_t": ("integer", ("c_int16_t", "c_short")),
    "signed char": ("integer", ("c_signed_char", "c_int8_t")),
    "unsigned char": ("integer", ("c_signed_char", "c_int8_t")),
    "int8_t": ("integer", ("c_int8_t", "c_signed_char")),
    "uint8_t": ("integer", ("c_int8_t", "c_signed_char")),
    "char": ("character", ("c_char",)),
    "size_t": ("integer", ("c_size_t",)),
    "ptrdiff_t": ("integer", ("c_ptrdiff_t",)),
    "intptr_t": ("integer", ("c_intptr_t",)),
    "uintptr_t": ("integer", ("c_intptr_t",)),
    "float": ("real", ("c_float",)),
    "double": ("real", ("c_double",)),
    "long double": ("real", ("c_long_double",)),
    "_Bool": ("logical", ("c_bool",)),
    "bool": ("logical", ("c_bool",)),
}
# Byte-sized integers may also be bound as characters.
CHAR_ALSO = {"signed char", "unsigned char", "int8_t", "uint8_t"}

# Identifiers that are C types without a typedef in the header (from <stdint.h>,
# <stddef.h>, <stdbool.h>).
STD_TYPEDEFS = {
    "int8_t", "uint8_t", "int16_t", "uint16_t", "int32_t", "uint32_t", "int64_t",
    "uint64_t", "size_t", "ptrdiff_t", "intptr_t", "uintptr_t", "bool",
}

C_QUALIFIERS = {"const", "volatile", "restrict", "__restrict", "__restrict__"}
C_STORAGE = {"extern", "static", "inline", "__inline", "__inline__", "register",
             "_Noreturn", "auto", "typedef"}
C_BASIC = {"void", "char", "short", "int", "long", "float", "double", "signed",
           "unsigned", "_Bool"}
C_ATTRIBUTE_CALLS = {"__attribute__", "__declspec", "__asm__", "__asm", "_Alignas",
                     "__extension__"}


class CheckError(Exception):
    """The checker could not understand its input (a parse error, not a mismatch)."""


# ---------------------------------------------------------------------------
# C types.

class CType:
    pass


class Base(CType):
    def __init__(self, name, const=False, alias=None):
        self.name = name        # canonical: "int", "uint64_t", "struct fh_ctx_t", "enum x"
        self.const = const
        self.alias = alias      # typedef name it was spelled as, for messages

    def qualified(self):
        return Base(self.name, True, self.alias)

    def __str__(self):
        s = self.alias if self.alias else self.name
        if self.alias and self.alias != self.name.split()[-1]:
            s += " (%s)" % self.name
        return ("const " if self.const else "") + s


class Ptr(CType):
    def __init__(self, to, const=False, alias=None):
        self.to = to
        self.const = const
        self.alias = alias

    def qualified(self):
        return Ptr(self.to, True, self.alias)

    def __str__(self):
        if self.alias:
            return ("const " if self.const else "") + self.alias
        if isinstance(self.to, Func):
            return "%s (*)(%s)" % (self.to.ret, ", ".join(str(t) for _, t in self.to.params))
        return str(self.to) + " *" + (" const" if self.const else "")


class Array(CType):
    def __init__(self, of, size):
        self.of = of
        self.size = size        # token list of the size expression, or None

    def qualified(self):
        return Array(self.of.qualified(), self.size)

    def __str__(self):
        return "%s [%s]" % (self.of, " ".join(self.size or []))


class Func(CType):
    def __init__(self, ret, params, variadic):
        self.ret = ret
        self.params = params    # [(name or None, CType)]
        self.variadic = variadic

    def qualified(self):
        return self

    def __str__(self):
        return "%s (%s)" % (self.ret, ", ".join(str(t) for _, t in self.params))


# ---------------------------------------------------------------------------
# C header parsing.

C_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<num>\.?\d(?:[\w.]|[eEpP][+-])*)
  | (?P<str>"(?:\\.|[^"\\\n])*")
  | (?P<chr>'(?:\\.|[^'\\\n])*')
  | (?P<punct>\.\.\.|->|<<|>>|::|[{}()\[\];,*=&|^~!<>?:+\-/%.#])
""", re.VERBOSE)

C_COMMENT_OR_LITERAL = re.compile(
    r"""//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'""", re.DOTALL)


class Tok:
    __slots__ = ("text", "kind", "line")

    def __init__(self, text, kind, line):
        self.text, self.kind, self.line = text, kind, line

    def __repr__(self):
        return self.text


def strip_c_comments(text):
    def repl(m):
        s = m.group(0)
        if s.startswith("/"):
            return " " if s.startswith("//") else re.sub(r"[^\n]", " ", s)
        return s
    return C_COMMENT_OR_LITERAL.sub(repl, text)


def c_tokens(text):
    """Tokens of the header with comments and preprocessor directives removed, and
    the object-like macros it defines ({name: replacement text})."""
    text = strip_c_comments(text)
    lines = text.split("\n")
    macros = {}
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        start = i
        if line.lstrip().startswith("#"):
            while line.endswith("\\") and i + 1 < len(lines):
                i += 1
                line = line[:-1] + " " + lines[i]
            m = re.match(r"\s*#\s*define\s+([A-Za-z_]\w*)(\(?)(.*)$", line)
            if m and not m.group(2):
                macros[m.group(1)] = m.group(3).strip()
            out.append("\n" * (i - start))
        else:
            out.append(line)
        out.append("\n")
        i += 1
    text = "".join(out)
    toks = []
    pos = 0
    line = 1
    while pos < len(text):
        m = C_TOKEN.match(text, pos)
        if not m:
            raise CheckError("header line %d: cannot tokenise %r" % (line, text[pos:pos + 20]))
        kind = m.lastgroup
        if kind != "ws":
            toks.append(Tok(m.group(0), kind, line))
        line += m.group(0).count("\n")
        pos = m.end()
    return toks, macros


class Header:
    def __init__(self, path):
        self.path = path
        with open(path, encoding="utf-8") as f:
            toks, self.macros = c_tokens(f.read())
        # Macros that expand to nothing or to attributes are annotations (FH_EXPORT,
        # FH_DEPRECATED, ...): drop them where they appear in declarations.
        self.annotations = {n for n, v in self.macros.items()
                            if v == "" or re.match(r"(__attribute__|__declspec|\[\[)", v)}
        self.typedefs = {}      # name -> CType
        self.structs = {}       # tag -> None (incomplete) or [(name, CType, line)]
        self.struct_names = {}  # tag -> {tag, typedef names}
        self.functions = {}     # name -> (Func, line)
        self.order = []         # function names in header order
        self.c_only = {}        # name -> line of a static inline / defined function
        for stmt, kind in self.statements(toks):
            self.declaration(stmt, kind)

    # -- statements ---------------------------------------------------------

    def statements(self, toks):
        """Top-level declarations (token lists), skipping extern "C" braces and
        yielding function definitions as ("funcdef", head tokens)."""
        toks = self.drop_annotations(toks)
        cur = []
        extern_blocks = 0
        i = 0
        n = len(toks)
        while i < n:
            t = toks[i]
            if (t.text == "extern" and not cur and i + 2 < n and toks[i + 1].kind == "str"
                    and toks[i + 2].text == "{"):
                extern_blocks += 1
                i += 3
                continue
            if t.text == "extern" and i + 1 < n and toks[i + 1].kind == "str":
                i += 2      # extern "C" int f(void);
                continue
            if t.text == "}" and not cur and extern_blocks:
                extern_blocks -= 1
                i += 1
                continue
            if t.text == "{":
                j = self.skip_group(toks, i, "{", "}")
                if self.is_function_head(cur):
                    yield cur, "funcdef"
                    cur = []
                else:
                    cur.extend(toks[i:j])
                i = j
                continue
            if t.text == ";":
                if cur:
                    yield cur, "decl"
                cur = []
                i += 1
                continue
            cur.append(t)
            i += 1
        if cur:
            raise CheckError("%s:%d: declaration without ';' at end of file"
                             % (self.path, cur[0].line))

    def drop_annotations(self, toks):
        out = []
        i = 0
        while i < len(toks):
            t = toks[i]
            if t.kind == "id" and t.text in self.annotations:
                i += 1
                continue
            if t.kind == "id" and t.text in C_ATTRIBUTE_CALLS and i + 1 < len(toks) \
                    and toks[i + 1].text == "(":
                i = self.skip_parens(toks, i + 1)
                continue
            if t.text == "[" and i + 1 < len(toks) and toks[i + 1].text == "[":
                i = self.skip_group(toks, i, "[", "]")     # [[attribute]]
                continue
            out.append(t)
            i += 1
        return out

    @staticmethod
    def skip_parens(toks, i):
        """Index after the parenthesised group starting at toks[i] == '('."""
        return Header.skip_group(toks, i, "(", ")")

    @staticmethod
    def skip_group(toks, i, open_, close):
        """Index after the group starting at toks[i] == open_, nested groups included."""
        depth = 0
        while i < len(toks):
            if toks[i].text == open_:
                depth += 1
            elif toks[i].text == close:
                depth -= 1
                if depth == 0:
                    return i + 1
            i += 1
        raise CheckError("unbalanced %s%s" % (open_, close))

    @staticmethod
    def is_function_head(toks):
        if not toks or toks[-1].text != ")":
            return False
        first = toks[0].text
        if first == "typedef":
            return False
        if first in ("struct", "union", "enum") and len(toks) > 2 and toks[2].text == "{":
            return False
        return any(t.text == "(" for t in toks)

    # -- declarations -------------------------------------------------------

    def declaration(self, toks, kind):
        if kind == "funcdef":
            # Only the name matters (the body is C-only); its types may come from
            # headers this one does not include (MPI_Comm of fh_init).
            k = next(k for k, t in enumerate(toks) if t.text == "(")
            if k == 0 or toks[k - 1].kind != "id":
                raise CheckError("%s:%d: cannot find the name of this function definition"
                                 % (self.path, toks[0].line))
            self.c_only[toks[k - 1].text] = toks[0].line
            return
        is_typedef = toks[0].text == "typedef"
        if is_typedef:
            toks = toks[1:]
        base, i = self.parse_specifiers(toks, 0)
        if i == len(toks):
            return          # struct X; / struct X {...}; / enum X {...};
        for name, t in self.parse_init_declarators(toks, i, base):
            if is_typedef:
                if name is None:
                    raise CheckError("%s:%d: typedef without a name" % (self.path, toks[0].line))
                self.typedefs[name] = t
                tag = self.struct_tag(t)
                if tag:
                    self.struct_names.setdefault(tag, {tag}).add(name)
            elif isinstance(t, Func):
                if name is None:
                    raise CheckError("%s:%d: function without a name" % (self.path, toks[0].line))
                if name not in self.functions:
                    self.order.append(name)
                self.functions[name] = (t, toks[0].line)
            # else: a variable declaration; nothing to bind

    @staticmethod
    def struct_tag(t):
        if isinstance(t, Base) and t.name.startswith(("struct ", "union ")):
            return t.name.split()[1]
        return None

    def parse_full(self, toks):
        base, i = self.parse_specifiers(toks, 0)
        name, build, i = self.parse_declarator(toks, i)
        return name, build(base)

    def parse_init_declarators(self, toks, i, base):
        out = []
        while True:
            name, build, i = self.parse_declarator(toks, i)
            out.append((name, build(base)))
            if i < len(toks) and toks[i].text == "=":
                depth = 0
                while i < len(toks) and not (depth == 0 and toks[i].text == ","):
                    if toks[i].text in "([{":
                        depth += 1
                    elif toks[i].text in ")]}":
                        depth -= 1
                    i += 1
            if i < len(toks) and toks[i].text == ",":
                i += 1
                continue
            if i != len(toks):
                raise CheckError("%s:%d: cannot parse declaration near %r"
                                 % (self.path, toks[i].line, toks[i].text))
            return out

    def is_type_start(self, t):
        return (t.kind == "id" and (t.text in C_BASIC or t.text in C_QUALIFIERS
                                    or t.text in C_STORAGE or t.text in self.typedefs
                                    or t.text in STD_TYPEDEFS
                                    or t.text in ("struct", "union", "enum")))

    def parse_specifiers(self, toks, i):
        const = False
        basic = []
        named = None
        while i < len(toks):
            t = toks[i]
            x = t.text
            if x in C_QUALIFIERS:
                const |= x == "const"
            elif x in C_STORAGE:
                pass
            elif x in C_BASIC:
                basic.append(x)
            elif x in ("struct", "union", "enum"):
                if named or basic:
                    break
                tag = None
                i += 1
                if i < len(toks) and toks[i].kind == "id":
                    tag = toks[i].text
                    i += 1
                if i < len(toks) and toks[i].text == "{":
                    j = i
                    depth = 0
                    while j < len(toks):
                        if toks[j].text == "{":
                            depth += 1
                        elif toks[j].text == "}":
                            depth -= 1
                            if depth == 0:
                                break
                        j += 1
                    body = toks[i + 1:j]
                    if tag is None:
                        tag = "<anonymous@%d>" % toks[i].line
                    if x != "enum":
                        self.structs[tag] = self.parse_fields(body)
                        self.struct_names.setdefault(tag, {tag})
                    i = j + 1
                elif tag is None:
                    raise CheckError("%s:%d: %s without a tag or body" % (self.path, t.line, x))
                elif x != "enum":
                    self.structs.setdefault(tag, None)
                    self.struct_names.setdefault(tag, {tag})
                named = Base("%s %s" % (x, tag))
                continue        # i is already past the tag or the body
            elif t.kind == "id" and not named and not basic and (
                    x in self.typedefs or x in STD_TYPEDEFS):
                if x in self.typedefs:
                    named = aliased(self.typedefs[x], x)
                else:
                    named = Base(x)
            else:
                break
            i += 1
        if named and basic:
            raise CheckError("%s:%d: conflicting type specifiers"
                             % (self.path, toks[min(i, len(toks) - 1)].line))
        if named:
            t = named
        elif basic:
            t = Base(canonical_basic(basic))
        else:
            where = toks[min(i, len(toks) - 1)]
            raise CheckError("%s:%d: unknown type %r (not a C type or a typedef of the header)"
                             % (self.path, where.line, where.text))
        return (t.qualified() if const else t), i

    def parse_fields(self, body):
        fields = []
        cur = []
        for t in body:
            if t.text == ";":
                if cur:
                    base, i = self.parse_specifiers(cur, 0)
                    for name, ft in self.parse_init_declarators(cur, i, base):
                        fields.append((name, ft, cur[0].line))
                cur = []
            elif t.text == ":" and cur:
                raise CheckError("%s:%d: bit-fields cannot be bound to Fortran"
                                 % (self.path, t.line))
            else:
                cur.append(t)
        return fields

    def parse_declarator(self, toks, i):
        """C declarator at toks[i]: (name or None, builder(base) -> CType, next i)."""
        ptrs = []
        while i < len(toks) and toks[i].text == "*":
            i += 1
            c = False
            while i < len(toks) and toks[i].text in C_QUALIFIERS:
                c |= toks[i].text == "const"
                i += 1
            ptrs.append(c)
        name = None
        inner = None
        if (i < len(toks) and toks[i].text == "(" and i + 1 < len(toks)
                and (toks[i + 1].text in ("*", "(") or
                     (toks[i + 1].kind == "id" and not self.is_type_start(toks[i + 1])))):
            name, inner, i = self.parse_declarator(toks, i + 1)
            if i >= len(toks) or toks[i].text != ")":
                raise CheckError("%s:%d: expected ')' in declarator" % (self.path, toks[i - 1].line))
            i += 1
        elif i < len(toks) and toks[i].kind == "id" and not self.is_type_start(toks[i]):
            name = toks[i].text
            i += 1
        suffixes = []
        while i < len(toks) and toks[i].text in ("[", "("):
            if toks[i].text == "[":
                j = i + 1
                while j < len(toks) and toks[j].text != "]":
                    j += 1
                suffixes.append(("array", [t.text for t in toks[i + 1:j]] or None))
                i = j + 1
            else:
                j = self.skip_parens(toks, i)
                suffixes.append(("func", self.parse_params(toks[i + 1:j - 1])))
                i = j

        def build(base):
            t = base
            for c in ptrs:
                t = Ptr(t, c)
            for kind, arg in reversed(suffixes):
                if kind == "array":
                    t = Array(t, arg)
                else:
                    t = Func(t, arg[0], arg[1])
            return inner(t) if inner else t
        return name, build, i

    def parse_params(self, toks):
        if not toks or (len(toks) == 1 and toks[0].text == "void"):
            return [], False
        params = []
        variadic = False
        cur = []
        depth = 0
        for t in toks + [Tok(",", "punct", toks[-1].line)]:
            if t.text in "([{":
                depth += 1
            elif t.text in ")]}":
                depth -= 1
            if t.text == "," and depth == 0:
                if len(cur) == 1 and cur[0].text == "...":
                    variadic = True
                else:
                    name, t2 = self.parse_full(cur)
                    params.append((name, decay(t2)))
                cur = []
            else:
                cur.append(t)
        return params, variadic


def canonical_basic(words):
    longs = words.count("long")
    unsigned = "unsigned" in words
    signed = "signed" in words
    rest = [w for w in words if w not in ("long", "unsigned", "signed", "int")]
    if rest == ["char"]:
        return "unsigned char" if unsigned else "signed char" if signed else "char"
    if rest == ["short"]:
        return "unsigned short" if unsigned else "short"
    if rest == ["double"]:
        return "long double" if longs else "double"
    if rest in (["float"], ["void"], ["_Bool"]):
        return rest[0]
    if rest:
        raise CheckError("unsupported C type %r" % " ".join(words))
    base = {0: "int", 1: "long", 2: "long long"}[min(longs, 2)]
    return ("unsigned " + base) if unsigned else base


def aliased(t, name):
    """t as spelled through the typedef `name` (for messages)."""
    if isinstance(t, Base):
        return Base(t.name, t.const, name)
    if isinstance(t, Ptr):
        return Ptr(t.to, t.const, name)
    return t


def decay(t):
    if isinstance(t, Array):
        return Ptr(t.of)
    if isinstance(t, Func):
        return Ptr(t)
    return t


# ---------------------------------------------------------------------------
# Fortran parsing.

class FArg:
    """A dummy argument, function result or derived-type component."""

    def __init__(self, name, line):
        self.name = name
        self.line = line
        self.declared = False
        self.ftype = None       # integer real complex logical character type class procedure
        self.kind = None        # c_int, ..., derived type name, "*" for type(*), "default"
        self.char_len = None    # text of character len, None if absent
        self.dims = None        # text of the array spec, None for a scalar
        self.attrs = set()      # value pointer allocatable target optional asynchronous ...
        self.intent = None

    def describe(self):
        if not self.declared:
            return "(undeclared)"
        if self.ftype == "character":
            parts = ["kind=" + self.kind]
            if self.char_len is not None:
                parts.append("len=" + self.char_len)
            s = "character(%s)" % ", ".join(parts)
        elif self.ftype in ("double precision",):
            s = self.ftype
        else:
            s = "%s(%s)" % (self.ftype, self.kind)
        extra = []
        if "value" in self.attrs:
            extra.append("value")
        if self.intent:
            extra.append("intent(%s)" % self.intent)
        for a in sorted(self.attrs - {"value"}):
            extra.append(a)
        if self.dims is not None:
            extra.append("dimension(%s)" % self.dims)
        return ", ".join([s] + extra)


class FProc:
    def __init__(self, name, is_function, args, line, abstract):
        self.name = name
        self.is_function = is_function
        self.arg_names = args
        self.line = line
        self.abstract = abstract
        self.bind = False
        self.label = None       # binding label, None if none
        self.result_name = name if is_function else None
        self.prefix_type = None  # type spec text from "integer(c_int) function f(...)"
        self.decls = {}         # lower name -> FArg

    def arg(self, i):
        return self.decls[self.arg_names[i]]

    def result(self):
        return self.decls.get(self.result_name)


class FType:
    def __init__(self, name, line):
        self.name = name
        self.line = line
        self.bind = False
        self.components = []    # [FArg]


FTYPE_START = re.compile(
    r"(integer|real|complex|logical|character|double\s*precision|double\s*complex|"
    r"type|class|procedure)\b\s*", re.I)
ATTR_STMT = re.compile(
    r"(value|intent\s*\(\s*(?:in\s*out|in|out)\s*\)|dimension|asynchronous|target|"
    r"optional|pointer|allocatable|volatile|contiguous)\b", re.I)


def fortran_statements(text):
    """(line number, statement) of free-form source: comments removed, & continuations
    joined, ';' separated statements split. Statement text keeps its case."""
    out = []
    buf = ""
    start = None
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = strip_f_comment(raw).rstrip()
        if buf and line.lstrip().startswith("&"):
            line = line.lstrip()[1:]
        elif buf:
            line = " " + line.lstrip()
        if start is None:
            start = lineno
        if line.endswith("&"):
            buf += line[:-1]
            continue
        buf += line
        for part in split_outside_quotes(buf, ";"):
            if part.strip():
                out.append((start, part.strip()))
        buf = ""
        start = None
    return out


def strip_f_comment(line):
    q = None
    for i, ch in enumerate(line):
        if q:
            if ch == q:
                q = None
        elif ch in "'\"":
            q = ch
        elif ch == "!":
            return line[:i]
    return line


def unquoted(s, start=0):
    """(index, character, parenthesis depth) of the characters of s from start that
    are outside quoted strings; the depth counts a '(' from itself on, a ')' up to
    before itself."""
    q = None
    depth = 0
    for j in range(start, len(s)):
        ch = s[j]
        if q:
            if ch == q:
                q = None
            continue
        if ch in "'\"":
            q = ch
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        yield j, ch, depth


def split_outside_quotes(s, sep):
    parts = []
    begin = 0
    for j, ch, depth in unquoted(s):
        if ch == sep and depth == 0:
            parts.append(s[begin:j])
            begin = j + 1
    parts.append(s[begin:])
    return parts


def paren_group(s, i):
    """s[i] == '(': (contents, index after the closing ')')."""
    for j, ch, depth in unquoted(s, i):
        if ch == ")" and depth == 0:
            return s[i + 1:j], j + 1
    raise CheckError("unbalanced parentheses in %r" % s)


class Module:
    def __init__(self, path, text=None):
        self.path = path
        if text is None:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        self.procs = []         # interface bodies (FProc), abstract ones included
        self.types = {}         # lower name -> FType
        self.kind_alias = {}    # integer parameter -> kind it names
        self.parse(fortran_statements(text))

    def err(self, line, msg):
        return CheckError("%s:%d: %s" % (self.path, line, msg))

    def parse(self, stmts):
        iface = None            # None, or True/False: inside an (abstract) interface block
        proc = None
        dtype = None
        for line, s in stmts:
            low = s.lower()
            if proc is not None:
                if re.match(r"end\s*((function|subroutine)(\s+\w+)?)?\s*$", low):
                    self.procs.append(proc)
                    proc = None
                else:
                    self.proc_statement(proc, line, s)
                continue
            if dtype is not None:
                if re.match(r"end\s*type\b", low):
                    self.types[dtype.name] = dtype
                    dtype = None
                elif re.match(r"(sequence|private|public|contains)\b", low):
                    pass
                else:
                    for a in self.declaration(line, s):
                        dtype.components.append(a)
                continue
            m = re.match(r"(abstract\s+)?interface\b", low)
            if m:
                iface = bool(m.group(1))
                continue
            if re.match(r"end\s*interface\b", low):
                iface = None
                continue
            if iface is not None:
                p = self.proc_header(line, s, iface)
                if p:
                    proc = p
                continue
            m = re.match(r"type\s*(?:,\s*(.*?))?\s*(?:::)?\s*([a-z_]\w*)\s*$", low)
            if m and not low.startswith("type("):
                dtype = FType(m.group(2), line)
                dtype.bind = bool(m.group(1) and re.search(r"bind\s*\(\s*c\s*\)", m.group(1)))
                continue
            m = re.match(r"integer\s*(?:\(.*?\))?\s*,\s*parameter\s*::\s*(.*)$", low)
            if m:
                for ent in split_outside_quotes(m.group(1), ","):
                    m2 = re.match(r"\s*([a-z_]\w*)\s*=\s*(?:kind\s*\(\s*\w+\s*\)\s*)?(c_\w+)\s*$", ent)
                    if m2:
                        self.kind_alias[m2.group(1)] = m2.group(2)

    def proc_header(self, line, s, abstract):
        low = s.lower()
        if re.match(r"(module\s+procedure|procedure\s*::|import\b|use\b|implicit\b)", low):
            return None
        m = re.match(r"(?P<prefix>.*?)\b(?P<kw>function|subroutine)\s+(?P<name>[a-z_]\w*)\s*", low)
        if not m:
            raise self.err(line, "unexpected statement in an interface block: %s" % s)
        prefix = m.group("prefix").strip()
        rest = s[m.end():]
        args = []
        if rest.startswith("("):
            inner, k = paren_group(rest, 0)
            args = [a.strip().lower() for a in inner.split(",") if a.strip()]
            rest = rest[k:]
        p = FProc(m.group("name"), m.group("kw") == "function", args, line, abstract)
        for prefix_word in re.findall(r"\b(pure|impure|elemental|recursive|module|non_recursive)\b", prefix):
            prefix = re.sub(r"\b%s\b" % prefix_word, "", prefix).strip()
        if prefix:
            p.prefix_type = prefix
        low_rest = rest.lower()
        mb = re.search(r"\bbind\s*\(\s*c\s*(?:,\s*name\s*=\s*(['\"])(.*?)\1\s*)?\)", rest, re.I)
        if mb:
            p.bind = True
            if mb.group(1) is None:
                p.label = None if abstract else p.name
            else:
                p.label = mb.group(2).strip() or None
        mr = re.search(r"\bresult\s*\(\s*([a-z_]\w*)\s*\)", low_rest)
        if mr:
            p.result_name = mr.group(1)
        for a in args:
            p.decls[a] = FArg(a, line)
        if p.is_function:
            p.decls.setdefault(p.result_name, FArg(p.result_name, line))
            if p.prefix_type:
                self.apply_type(p.decls[p.result_name], p.prefix_type, line)
        return p

    def proc_statement(self, p, line, s):
        low = s.lower()
        if re.match(r"(import|use|implicit)\b", low):
            return
        m = ATTR_STMT.match(low)
        if m and not FTYPE_START.match(low):
            attr = m.group(0)
            rest = low[m.end():]
            dims = None
            if attr == "dimension" and rest.lstrip().startswith("("):
                rest = rest.lstrip()
                dims, k = paren_group(rest, 0)
                rest = rest[k:]
            rest = re.sub(r"^\s*::", "", rest)
            for ent in split_outside_quotes(rest, ","):
                name, edims, _ = self.entity(ent, line)
                a = p.decls.get(name)
                if a is None:
                    continue
                self.apply_attr(a, attr, dims or edims)
            return
        for a in self.declaration(line, s):
            if a.name in p.decls:
                old = p.decls[a.name]
                old.declared = True
                old.ftype, old.kind, old.char_len = a.ftype, a.kind, a.char_len
                old.attrs |= a.attrs
                old.intent = a.intent or old.intent
                old.dims = a.dims if a.dims is not None else old.dims
                old.line = line

    def declaration(self, line, s):
        """FArgs of a type declaration statement (typespec [, attrs] :: entities)."""
        low = s.lower()
        m = FTYPE_START.match(low)
        if not m:
            raise self.err(line, "cannot parse declaration: %s" % s)
        i = m.end()
        spec = m.group(1)
        if i < len(low) and low[i] == "(":
            inner, i = paren_group(low, i)
            spec += "(" + inner + ")"
        elif low[i:].startswith("*"):
            mm = re.match(r"\*\s*(\d+)", low[i:])
            spec += "*" + mm.group(1)
            i += mm.end()
        rest = low[i:].strip()
        attrs = []
        if "::" in rest:
            head, ents = rest.split("::", 1)
            attrs = [a.strip() for a in split_outside_quotes(head, ",") if a.strip()]
        else:
            ents = rest
        out = []
        for ent in split_outside_quotes(ents, ","):
            if not ent.strip():
                continue
            name, edims, elen = self.entity(ent, line)
            a = FArg(name, line)
            a.declared = True
            self.apply_type(a, spec, line)
            if elen is not None:
                a.char_len = elen
            for at in attrs:
                atn = re.match(r"[a-z_]+", at).group(0)
                dims = None
                if atn == "dimension":
                    dims, _ = paren_group(at, at.index("("))
                self.apply_attr(a, at if atn != "dimension" else "dimension", dims)
            if edims is not None:
                a.dims = edims
            out.append(a)
        return out

    def entity(self, ent, line):
        ent = ent.strip()
        m = re.match(r"([a-z_]\w*)\s*", ent)
        if not m:
            raise self.err(line, "cannot parse entity %r" % ent)
        name = m.group(1)
        i = m.end()
        dims = None
        clen = None
        if i < len(ent) and ent[i] == "(":
            dims, i = paren_group(ent, i)
            dims = re.sub(r"\s+", "", dims)
        mm = re.match(r"\s*\*\s*(\(.*?\)|\d+)", ent[i:])
        if mm:
            clen = mm.group(1).strip("()")
        return name, dims, clen

    def apply_attr(self, a, attr, dims):
        attr = re.sub(r"\s+", "", attr)
        if attr.startswith("intent"):
            a.intent = attr[attr.index("(") + 1:-1]
        elif attr == "dimension":
            a.dims = re.sub(r"\s+", "", dims)
        else:
            a.attrs.add(attr)

    def apply_type(self, a, spec, line):
        spec = re.sub(r"\s+", " ", spec.lower()).strip()
        m = re.match(r"(integer|real|complex|logical|character|type|class|procedure|"
                     r"double ?precision|double ?complex)\s*(.*)$", spec)
        if not m:
            raise self.err(line, "cannot parse type %r" % spec)
        ftype, rest = m.group(1), m.group(2).strip()
        a.declared = True
        if ftype.startswith("double"):
            a.ftype = "double precision" if "precision" in ftype else "double complex"
            a.kind = "default"
            return
        a.ftype = ftype
        a.kind = "default"
        if rest.startswith("*"):
            a.kind = "*" + rest[1:].strip()    # integer*8: not a C kind
            return
        if not rest:
            return
        inner = rest[1:-1] if rest.startswith("(") and rest.endswith(")") else rest
        items = [x.strip() for x in split_outside_quotes(inner, ",")]
        if ftype == "character":
            pos = 0
            for it in items:
                mk = re.match(r"(kind|len)\s*=\s*(.*)$", it)
                if mk:
                    key, val = mk.group(1), mk.group(2)
                else:
                    key, val = ("len", "kind")[min(pos, 1)], it
                    pos += 1
                if key == "kind":
                    a.kind = self.kind_alias.get(val, val)
                else:
                    a.char_len = re.sub(r"\s+", "", val)
            return
        val = items[0]
        val = re.sub(r"^kind\s*=\s*", "", val)
        a.kind = self.kind_alias.get(val, val)


# ---------------------------------------------------------------------------
# The comparison.

class Checker:
    def __init__(self, header, module):
        self.h = header
        self.m = module
        self.problems = []

    def report(self, line, who, what, c, f, why):
        loc = "%s:%d: " % (self.m.path, line) if line else ""
        self.problems.append("%s%s: %s: C '%s' vs Fortran '%s': %s" % (loc, who, what, c, f, why))

    def note(self, line, who, msg):
        loc = "%s:%d: " % (self.m.path, line) if line else ""
        self.problems.append("%s%s: %s" % (loc, who, msg))

    # -- C type classification ---------------------------------------------

    def classify(self, t):
        """('scalar', cname) | ('struct', tag) | ('opaque', tag) | ('void',) |
        ('funptr', Func) | ('ptr', CType) | ('array', CType)"""
        if isinstance(t, Ptr):
            if isinstance(t.to, Func):
                return ("funptr", t.to)
            return ("ptr", t.to)
        if isinstance(t, Array):
            return ("array", t.of)
        if isinstance(t, Func):
            return ("funptr", t)
        name = t.name
        if name == "void":
            return ("void",)
        if name.startswith("enum "):
            return ("scalar", "int")
        if name.startswith(("struct ", "union ")):
            tag = name.split()[1]
            if self.h.structs.get(tag) is None:
                return ("opaque", tag)
            return ("struct", tag)
        if name in SCALAR_KINDS:
            return ("scalar", name)
        raise CheckError("no Fortran mapping for C type %r" % name)

    def scalar_ok(self, cname, f):
        ftype, kinds = SCALAR_KINDS[cname]
        if f.ftype == ftype and f.kind in kinds:
            return True
        if cname in CHAR_ALSO and f.ftype == "character" and f.kind == "c_char":
            return True
        return False

    def scalar_expect(self, cname):
        ftype, kinds = SCALAR_KINDS[cname]
        s = " or ".join("%s(%s)" % (ftype, k) for k in kinds)
        if cname in CHAR_ALSO:
            s += " or character(kind=c_char)"
        return s

    def struct_ok(self, tag, f):
        return f.ftype == "type" and f.kind in {n.lower() for n in self.h.struct_names.get(tag, {tag})}

    def struct_expect(self, tag):
        return " or ".join("type(%s)" % n for n in sorted(self.h.struct_names.get(tag, {tag})))

    @staticmethod
    def descriptor_problem(f):
        """Why f is passed as a descriptor rather than a plain address, or None."""
        if "pointer" in f.attrs or "allocatable" in f.attrs:
            return "pointer/allocatable dummies pass a descriptor, not a C pointer"
        if f.dims is not None and (f.dims == ".." or any(
                d.endswith(":") for d in f.dims.split(","))):
            return "assumed-shape/-rank arrays pass a descriptor, not a C pointer"
        if f.ftype == "class":
            return "class(...) dummies are not interoperable"
        if f.ftype == "character" and f.char_len not in (None, "1"):
            return "character len must be 1 (len=* passes a descriptor)"
        return None

    def by_value_expect(self, t):
        """(ok(f) -> bool, text of what is expected) for a C type passed by value
        (an argument without a pointer, a result, or a struct field)."""
        cls = self.classify(t)
        if cls[0] == "scalar":
            return (lambda f: self.scalar_ok(cls[1], f)), self.scalar_expect(cls[1])
        if cls[0] == "struct":
            return (lambda f: self.struct_ok(cls[1], f)), self.struct_expect(cls[1])
        if cls[0] == "funptr":
            return (lambda f: f.ftype == "type" and f.kind == "c_funptr"), "type(c_funptr)"
        if cls[0] == "ptr":
            return (lambda f: f.ftype == "type" and f.kind == "c_ptr"), "type(c_ptr)"
        raise CheckError("C type %s cannot be passed by value" % t)

    def by_ref_expect(self, to):
        """(ok(f), expectation) for a by-reference (no value) dummy bound to a C
        pointer to `to`; ok is None when by-reference is not allowed at all."""
        while isinstance(to, Array):
            to = to.of
        cls = self.classify(to)
        if cls[0] == "void":
            return (lambda f: f.ftype == "type" and f.kind == "*"), "type(*)"
        if cls[0] == "opaque":
            return None, "handles (opaque %s *) are type(c_ptr), value" % cls[1]
        if cls[0] == "scalar":
            return (lambda f: self.scalar_ok(cls[1], f)), self.scalar_expect(cls[1])
        if cls[0] == "struct":
            return (lambda f: self.struct_ok(cls[1], f)), self.struct_expect(cls[1])
        if cls[0] == "funptr":
            return (lambda f: f.ftype == "type" and f.kind == "c_funptr"), "type(c_funptr)"
        if cls[0] == "ptr":
            return (lambda f: f.ftype == "type" and f.kind == "c_ptr"), "type(c_ptr)"
        raise CheckError("cannot bind a pointer to %s" % to)

    # -- arguments, results, fields -----------------------------------------

    def check_arg(self, who, pos, cname, ct, f):
        what = "arg %d (%s)" % (pos, cname or f.name) if (cname or f.name) == f.name \
            else "arg %d (C %s, Fortran %s)" % (pos, cname, f.name)
        if not f.declared:
            self.report(f.line, who, what, ct, f.describe(), "argument not declared")
            return
        has_value = "value" in f.attrs
        cls = self.classify(ct)
        why = []
        desc = self.descriptor_problem(f)
        if cls[0] == "ptr":
            if has_value:
                if not (f.ftype == "type" and f.kind == "c_ptr" and f.dims is None):
                    ok, exp = self.by_ref_expect(cls[1])
                    alt = "; or %s without value" % exp if ok else ""
                    why.append("C passes a pointer: expected type(c_ptr), value%s" % alt)
            else:
                ok, exp = self.by_ref_expect(cls[1])
                if ok is None:
                    why.append("missing value: %s" % exp)
                elif desc:
                    why.append(desc)
                elif not ok(f):
                    why.append("by reference the pointee needs %s without value "
                               "(or type(c_ptr), value)" % exp)
                elif getattr(cls[1], "const", False) and f.intent in ("out", "inout"):
                    why.append("C pointee is const but Fortran says intent(%s)" % f.intent)
        else:
            ok, exp = self.by_value_expect(ct)
            if not has_value:
                why.append("missing value: C passes %s by value (expected %s, value)"
                           % (ct, exp))
            elif f.dims is not None:
                why.append("a by-value argument cannot be an array")
            elif desc:
                why.append(desc)
            elif not ok(f):
                why.append("expected %s, value" % exp)
        if why:
            self.report(f.line, who, what, ct, f.describe(), "; ".join(why))

    def check_result(self, who, p, ret):
        is_void = isinstance(ret, Base) and ret.name == "void"
        if is_void:
            if p.is_function:
                self.report(p.line, who, "result", ret, "function",
                            "C returns void: expected a subroutine")
            return
        ok, exp = self.by_value_expect(ret)
        if not p.is_function:
            self.report(p.line, who, "result", ret, "subroutine",
                        "C returns a value: expected a function with result %s" % exp)
            return
        r = p.result()
        if r is None or not r.declared:
            self.report(p.line, who, "result", ret, "(undeclared)", "result type not declared")
            return
        bad = r.dims is not None or "pointer" in r.attrs or "allocatable" in r.attrs
        if bad or not ok(r) or "value" in r.attrs:
            self.report(r.line, who, "result", ret, r.describe(), "expected %s" % exp)

    def check_proc(self, who, func, p):
        if not p.bind:
            self.note(p.line, who, "interface is not bind(C)")
        n_c, n_f = len(func.params), len(p.arg_names)
        if func.variadic:
            self.note(p.line, who, "C function is variadic: it cannot be bound from Fortran")
        if n_c != n_f:
            self.note(p.line, who, "argument count: C has %d (%s), Fortran has %d (%s)" % (
                n_c, ", ".join(str(n) for n, _ in func.params), n_f, ", ".join(p.arg_names)))
        else:
            for k, ((cname, ct), fname) in enumerate(zip(func.params, p.arg_names), 1):
                self.check_arg(who, k, cname, ct, p.decls[fname])
        self.check_result(who, p, func.ret)

    def check_struct(self, tag, ftype):
        who = "type %s" % ftype.name
        fields = self.h.structs[tag]
        if not ftype.bind:
            self.note(ftype.line, who, "derived type mirrors C struct %s but is not bind(C)" % tag)
        if len(fields) != len(ftype.components):
            self.note(ftype.line, who, "field count: C struct %s has %d (%s), Fortran has %d (%s)" % (
                tag, len(fields), ", ".join(n for n, _, _ in fields),
                len(ftype.components), ", ".join(c.name for c in ftype.components)))
            return
        for k, ((cname, ct, _), comp) in enumerate(zip(fields, ftype.components), 1):
            what = "field %d (%s)" % (k, cname) if cname == comp.name else \
                "field %d (C %s, Fortran %s)" % (k, cname, comp.name)
            elem, count = ct, 1
            while isinstance(elem, Array):
                n = array_count(elem.size, self.h.macros)
                count = None if (count is None or n is None) else count * n
                elem = elem.of
            ok, exp = self.by_value_expect(elem)
            why = []
            if not ok(comp) or "pointer" in comp.attrs or "allocatable" in comp.attrs:
                why.append("expected %s" % exp)
            if isinstance(ct, Array):
                fcount = array_count_f(comp.dims)
                if comp.dims is None:
                    why.append("C field is an array of %s elements" % (count or "?"))
                elif count is not None and fcount is not None and fcount != count:
                    why.append("C array has %d elements, Fortran %d" % (count, fcount))
            elif comp.dims is not None:
                why.append("C field is not an array")
            if why:
                self.report(comp.line, who, what, ct, comp.describe(), "; ".join(why))

    def run(self):
        h, m = self.h, self.m
        bound = {}
        for p in m.procs:
            if not p.abstract and p.label:
                bound.setdefault(p.label, []).append(p)
        checked = 0
        for name in h.order:
            func, _ = h.functions[name]
            if name in h.c_only:
                continue
            procs = bound.get(name)
            if not procs:
                self.note(0, name, "no bind(C) interface in %s" % m.path)
                continue
            for p in procs:
                self.check_proc(name, func, p)
                checked += 1
        for label, procs in sorted(bound.items()):
            if label in h.functions and label not in h.c_only:
                continue
            why = ("is a static inline C function (no symbol in the library)"
                   if label in h.c_only else "is not declared in %s" % h.path)
            for p in procs:
                self.note(p.line, label, "bind(C) interface, but %s" % why)
        # Callback interfaces: abstract interface X or X_t for a function pointer
        # typedef X_t.
        abstract = {p.name: p for p in m.procs if p.abstract}
        callbacks = 0
        for tname, t in sorted(h.typedefs.items()):
            if not (isinstance(t, Ptr) and isinstance(t.to, Func)):
                continue
            for cand in (tname.lower(), re.sub(r"_t$", "", tname.lower())):
                if cand in abstract:
                    p = abstract[cand]
                    if not p.bind:
                        self.note(p.line, "callback %s" % p.name,
                                  "abstract interface for %s is not bind(C)" % tname)
                    self.check_proc("callback %s" % p.name, t.to, p)
                    callbacks += 1
                    break
        types = 0
        for tag, fields in sorted(h.structs.items()):
            if fields is None:
                continue
            for n in sorted(h.struct_names.get(tag, {tag})):
                if n.lower() in m.types:
                    self.check_struct(tag, m.types[n.lower()])
                    types += 1
                    break
        return checked, callbacks, types


def array_count(size_toks, macros):
    if not size_toks:
        return None
    expr = " ".join(macros.get(t, t) for t in size_toks)
    if not re.fullmatch(r"[\d\s()+\-*/<>]+", expr):
        return None
    try:
        return int(eval(expr, {"__builtins__": {}}))   # digits and operators only
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None


def array_count_f(dims):
    if dims is None:
        return None
    total = 1
    for d in dims.split(","):
        if ":" in d:
            lo, hi = d.split(":", 1)
        else:
            lo, hi = "1", d
        if not (re.fullmatch(r"-?\d+", lo) and re.fullmatch(r"-?\d+", hi)):
            return None
        total *= int(hi) - int(lo) + 1
    return total


def check(header_path, f90_path, f90_text=None):
    h = Header(header_path)
    m = Module(f90_path, f90_text)
    c = Checker(h, m)
    counts = c.run()
    return c.problems, counts


# ---------------------------------------------------------------------------
# Self-test: each break of the module must be reported.

def self_test(header_path, f90_path):
    with open(f90_path, encoding="utf-8") as f:
        text = f.read()
    lines = text.split("\n")

    def first(pattern, after=0):
        for k in range(after, len(lines)):
            if re.search(pattern, lines[k], re.I):
                return k
        raise CheckError("self-test: no line matches %r in %s" % (pattern, f90_path))

    start = first(r"^\s*interface\s*$")

    def edit(k, old, new):
        out = list(lines)
        if not re.search(old, out[k], re.I):
            raise CheckError("self-test: %r not on line %d" % (old, k + 1))
        out[k] = re.sub(old, new, out[k], count=1, flags=re.I)
        return out, k

    def drop(k):
        out = list(lines)
        del out[k]
        return out, k

    cases = []
    k = first(r"integer\(c_size_t\),\s*value\s*::", start)
    cases.append(("wrong kind (c_size_t -> c_int)", edit(k, r"c_size_t\)", "c_int)"),
                  r"expected integer\(c_size_t\)"))
    k = first(r"integer\(c_int\),\s*value\s*::", start)
    cases.append(("missing value on an int", edit(k, r",\s*value", ""), r"missing value"))
    k = first(r"type\(c_ptr\),\s*value\s*::\s*ctx", start)
    cases.append(("missing value on a handle", edit(k, r",\s*value", ""), r"missing value"))
    k = first(r"integer\(c_int64_t\),\s*intent\(out\)\s*::", start)
    cases.append(("value on a by-reference out argument",
                  edit(k, r"intent\(out\)", "value"), r"C passes a pointer"))
    k = first(r"integer\(c_int64_t\),\s*intent\(in\)\s*::\s*\w+\(\*\)", start)
    cases.append(("intent(out) on a const pointee", edit(k, r"intent\(in\)", "intent(out)"),
                  r"pointee is const"))
    k = first(r"^\s*function\s+\w+\(\s*\w+\s*,\s*\w+.*\)\s*bind", start)
    cases.append(("missing argument", edit(k, r"\(\s*(\w+)\s*,\s*", "("), r"argument count"))
    k = first(r"^\s*integer\(c_size_t\)\s*::\s*\w+\s*$", start)
    cases.append(("wrong result kind", edit(k, r"c_size_t", "c_int"), r"\bresult\b"))
    k = first(r"^\s*integer\(c_int64_t\)\s*::\s*\w+\s*$", first(r"type,\s*bind\(c\)"))
    cases.append(("wrong struct field kind", edit(k, r"c_int64_t", "c_int"), r"\bfield\b"))
    k = first(r"bind\(C,\s*name=\"fh_poll\"\)", start)
    cases.append(("missing interface", edit(k, r"fh_poll\"", "fh_poll_gone\""),
                  r"fh_poll: no bind\(C\) interface"))
    baseline = set(check(header_path, f90_path, text)[0])
    failed = 0
    for title, (out, k), expect in cases:
        problems, _ = check(header_path, f90_path, "\n".join(out))
        hit = [p for p in problems if p not in baseline and re.search(expect, p)]
        if not hit:
            failed += 1
            print("self-test FAILED: %s (line %d) not reported; got: %s"
                  % (title, k + 1, problems or "nothing"), file=sys.stderr)
    if failed:
        return 1
    print("fortran: self-test caught all %d broken interfaces" % len(cases))
    return 0


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = argv[1:]
    selftest = "--self-test" in args
    args = [a for a in args if a != "--self-test"]
    if len(args) > 2 or any(a.startswith("-") for a in args):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    header = args[0] if len(args) > 0 else os.path.relpath(os.path.join(root, "include/firehose.h"))
    f90 = args[1] if len(args) > 1 else os.path.relpath(os.path.join(root, "include/firehose.f90"))
    try:
        if selftest:
            return self_test(header, f90)
        problems, (n, callbacks, types) = check(header, f90)
    except CheckError as e:
        print("check-fortran: %s" % e, file=sys.stderr)
        return 2
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print("fortran: %d mismatch%s between %s and %s"
              % (len(problems), "" if len(problems) == 1 else "es", header, f90), file=sys.stderr)
        return 1
    print("fortran: %d interfaces checked by signature" % n)
    print("fortran: also %d callback interface%s and %d bind(C) type%s"
          % (callbacks, "" if callbacks == 1 else "s", types, "" if types == 1 else "s"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
