"""Build corun: compiled with mypyc by default, pure Python on request or without a compiler.

``CORUN_PURE=1`` at install time, or a machine without a C compiler, gives the
pure-Python build of the same sources; ``corun.COMPILED`` says which one is
loaded. Everything else about the package lives in pyproject.toml.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import sysconfig
from typing import Any, Final

from setuptools import Extension, setup

# The folder is the rule: every module of the engine is compiled to C, except
# those named interpreted_* (see src/corun/runtime/engine/__init__.py).
ENGINE: Final = "src/corun/runtime/engine"


# Written in C, with a pure-Python equivalent beside each (its docstring says why).
C_EXTENSIONS: Final = (
    Extension(
        "corun.runtime.transports._sockio",
        ["src/corun/runtime/transports/_sockio.c"],
        extra_compile_args=["-O2"],
    ),
)


def compiled_modules() -> list[str]:
    """The engine's modules that mypyc compiles, in a stable order."""
    return sorted(
        os.path.join(ENGINE, name)
        for name in os.listdir(ENGINE)
        if name.endswith(".py") and name != "__init__.py" and not name.startswith("interpreted_")
    )


# Compiled classes whose instances take weak references, as asyncio's Future
# and Handle do, and with them every compiled subclass. mypyc (2.4) has no way
# to say so: it ignores __weakref__ in __slots__, and its only weakref-capable
# layout (a class with a Python base) never clears the references when an
# instance is freed, which crashes (mypyc issue 1102). So the C it generates
# is extended here, in the way CPython's own C types do it: a weak reference
# list field in the instance struct, tp_weaklistoffset pointing at it, and a
# dealloc that clears the list (calling the callbacks, making ref() return
# None) after the finalizer and before the fields are cleared. The cost: one
# pointer per instance and one test per free. Interpreted subclasses (Task)
# inherit the slot, and CPython's subtype_dealloc leaves it to this dealloc.
WEAKLY_REFERENCED: Final = (
    "corun.runtime.engine.futures.Future",
    "corun.runtime.engine.handles.Handle",
)
WEAKLIST_FIELD: Final = "corun_weakreflist"
_STRUCT: Final = re.compile(r"typedef struct \{\n(?P<body>.*?)\n\} (?P<name>\w+);", re.DOTALL)


class GeneratedCError(RuntimeError):
    """mypyc generated C that the edits below do not recognise (a newer mypyc?)."""


def _weakref_structs(header: str, marked: tuple[str, ...]) -> dict[str, int]:
    """Every struct laid out as a marked one, or as its extension: name -> field index.

    A compiled subclass's struct starts with its base's fields, so a struct is
    patched when it starts with a marked struct's fields: the weak reference
    list goes right after them, where it is for the base too. Found by layout,
    not listed by name, so that a new subclass cannot be missed.
    """
    bodies = {
        m["name"]: [line.strip() for line in m["body"].split("\n")]
        for m in _STRUCT.finditer(header)
    }
    found: dict[str, int] = {}
    for base in marked:
        prefix = bodies.get(base)
        if prefix is None:
            continue
        if f"PyObject *{WEAKLIST_FIELD};" in prefix:
            prefix = prefix[: prefix.index(f"PyObject *{WEAKLIST_FIELD};")]
        for name, body in bodies.items():
            if body[: len(prefix)] == prefix:
                if name in found:
                    raise GeneratedCError(f"{name} extends two weakly referenced classes")
                found[name] = len(prefix)
    return found


def _patch_struct(header: str, name: str, index: int) -> str:
    field = f"PyObject *{WEAKLIST_FIELD};"
    for m in _STRUCT.finditer(header):
        if m["name"] != name:
            continue
        lines = m["body"].split("\n")
        if field in (line.strip() for line in lines):
            return header
        indent = lines[index - 1][: len(lines[index - 1]) - len(lines[index - 1].lstrip())]
        lines.insert(index, indent + field)
        return header[: m.start("body")] + "\n".join(lines) + header[m.end("body") :]
    raise GeneratedCError(f"struct {name} not found")


def _patch_dealloc(code: str, struct: str) -> str:
    """Clear the weak references once the finalizer ran (it may resurrect)."""
    m = re.search(rf"\w+_dealloc\({struct} \*self\)\n", code)
    if m is None:
        raise GeneratedCError(f"no dealloc for {struct}")
    end = code.find("done: ;", m.end())
    untrack = code.find("PyObject_GC_UnTrack(self);", m.end(), end)
    if end < 0 or untrack < 0:
        raise GeneratedCError(f"the dealloc of {struct} has no PyObject_GC_UnTrack")
    line_start = code.rfind("\n", 0, untrack) + 1
    indent = code[line_start:untrack]
    after = code.find("\n", untrack) + 1
    clear = f"if (self->{WEAKLIST_FIELD} != NULL) PyObject_ClearWeakRefs((PyObject *)self);"
    if code[after:end].lstrip().startswith(clear):
        return code
    return code[:after] + indent + clear + "\n" + code[after:]


def _patch_template(code: str, struct: str) -> str:
    basicsize = f".tp_basicsize = sizeof({struct}),"
    at = code.find(basicsize)
    if at < 0:
        raise GeneratedCError(f"no type template for {struct}")
    start = code.rfind("static PyTypeObject ", 0, at)
    end = code.find("};", at)
    offset = f".tp_weaklistoffset = offsetof({struct}, {WEAKLIST_FIELD}),"
    block = code[start:end]
    if offset in block:
        return code
    if ".tp_weaklistoffset" in block:
        raise GeneratedCError(f"the type of {struct} has a weak reference list already")
    line_start = code.rfind("\n", 0, at) + 1
    after = code.find("\n", at) + 1
    return code[:after] + code[line_start:at] + offset + "\n" + code[after:]


def add_weakref_support(texts: dict[str, str]) -> None:
    """Give the WEAKLY_REFERENCED classes weak reference support in mypyc's generated C.

    ``texts`` maps each generated file to its text, edited in place. Editing
    text it edited already changes nothing. Raises GeneratedCError when the
    C does not look as expected (a newer mypyc), rather than building classes
    that crash.
    """
    from mypyc.namegen import exported_name

    marked = tuple(f"{exported_name(name)}Object" for name in WEAKLY_REFERENCED)
    structs: dict[str, int] = {}
    for path, text in texts.items():
        if path.endswith(".h"):
            found = _weakref_structs(text, marked)
            for name, index in found.items():
                text = _patch_struct(text, name, index)
            texts[path] = text
            structs.update(found)
    missing = set(marked) - set(structs)
    if missing:
        raise GeneratedCError(f"structs not found: {sorted(missing)}")
    for struct in structs:
        for patch in (_patch_dealloc, _patch_template):
            hits = [path for path, text in texts.items() if path.endswith(".c") and struct in text]
            done = False
            for path in hits:
                try:
                    texts[path] = patch(texts[path], struct)
                except GeneratedCError:
                    continue
                done = True
            if not done:
                raise GeneratedCError(f"{patch.__name__} found nothing to patch for {struct}")


# ``await future`` on the compiled build. CPython resumes an awaited iterator
# through its am_send slot when it has one (PyIter_Send), and takes the value
# it returns; without the slot, tp_iternext has to raise StopIteration(value),
# which mypyc's C does with a traceback entry: about 3,000 instructions per
# await, a tenth of a stream echo request. asyncio's C Future has the slot for
# the same reason. mypyc cannot declare it, so it is added to the generated C:
# a few lines that call FutureIter._advance() and read its ``_future`` field.
SEND_ITERATOR: Final = "corun.runtime.engine.futures.FutureIter"
_SEND_FUNCTION: Final = "corun_future_iter_am_send"
_SEND_SHIM: Final = """\
/* corun (setup.py): FutureIter's am_send slot. */
static PySendResult
{function}(PyObject *self, PyObject *arg, PyObject **presult)
{{
    {struct} *it = ({struct} *)self;
    PyObject *value;
    if (it->__future == Py_None) {{
        Py_INCREF(Py_None);
        *presult = Py_None;
        return PYGEN_RETURN;
    }}
    value = {advance}(self);
    *presult = value;
    if (value == NULL)
        return PYGEN_ERROR;
    return it->__future == Py_None ? PYGEN_RETURN : PYGEN_NEXT;
}}

static PyAsyncMethods {function}_slots = {{ .am_send = {function} }};

"""


def add_send_slot(texts: dict[str, str]) -> None:
    """Give SEND_ITERATOR an am_send slot that calls its ``_advance()`` (see above)."""
    from mypyc.namegen import exported_name

    struct = f"{exported_name(SEND_ITERATOR)}Object"
    short = SEND_ITERATOR.rsplit(".", 2)[-2:]
    advance = re.compile(rf"PyObject \*(CPyDef_\w*{short[0]}___{short[1]}____advance)\(")
    field = re.compile(rf"PyObject \*__future;\n\}} {struct};")
    header = "".join(text for path, text in texts.items() if path.endswith(".h"))
    found = advance.search(header)
    if found is None or field.search(header) is None:
        raise GeneratedCError(f"{SEND_ITERATOR}: _advance() or its _future field not found")
    basicsize = f".tp_basicsize = sizeof({struct}),"
    for path, code in texts.items():
        at = code.find(basicsize)
        if not path.endswith(".c") or at < 0:
            continue
        if _SEND_FUNCTION in code:
            return
        start = code.rfind("static PyTypeObject ", 0, at)
        end = code.find("};", at)
        if ".tp_as_async" in code[start:end]:
            raise GeneratedCError(f"{SEND_ITERATOR} has async slots already")
        shim = _SEND_SHIM.format(function=_SEND_FUNCTION, struct=struct, advance=found[1])
        line_start = code.rfind("\n", 0, at) + 1
        slot = code[line_start:at] + f".tp_as_async = &{_SEND_FUNCTION}_slots,\n"
        texts[path] = code[:start] + shim + code[start:line_start] + slot + code[line_start:]
        return
    raise GeneratedCError(f"no type template for {struct}")


def patch_generated_c(extensions: list[Any]) -> None:
    """Edit mypyc's generated C in place before it is compiled (see above)."""
    files = sorted(
        {
            path
            for ext in extensions
            for path in [*ext.sources, *getattr(ext, "depends", [])]
            if os.path.basename(path).startswith("__native") and path.endswith((".c", ".h"))
        }
    )
    texts = {}
    for path in files:
        with open(path, encoding="utf-8") as f:
            texts[path] = f.read()
    add_weakref_support(texts)
    add_send_slot(texts)
    for path, text in texts.items():
        with open(path, encoding="utf-8") as f:
            unchanged = f.read() == text
        if not unchanged:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)


def _pure_requested() -> bool:
    return os.environ.get("CORUN_PURE", "").strip().lower() not in ("", "0", "false", "no")


def _have_compiler() -> bool:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(compiler) is not None


def _ext_modules() -> list[object]:
    if _pure_requested():
        print("corun: CORUN_PURE is set: building pure Python", file=sys.stderr)
        return []
    if not _have_compiler():
        print("corun: no C compiler found: building pure Python", file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("corun: mypyc is not available: building pure Python", file=sys.stderr)
        return []
    extensions = list(mypycify(compiled_modules(), opt_level="3", debug_level="1"))
    patch_generated_c(extensions)
    return [*extensions, *C_EXTENSIONS]


setup(ext_modules=_ext_modules())
