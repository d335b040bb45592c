"""What the kernel's copy imports through its dynamic symbol table and needs as libraries: code
the run may execute that no dump of the binary holds (NVRTC's compile, a cubin the driver's module
loaders take at run time, a library's own fatbin), and the CUDA variables of the node's login that
change which of the binary's embedded codes the card runs. The farm judges what is said
(runtime_code.runtime_loads); the shell path says the same through readelf (stages/inspect.py)."""

import os

SHT_DYNAMIC, SHT_DYNSYM, PT_DYNAMIC = 6, 11, 2
NAME_LIMIT = 4096  # bytes of one symbol's or library's name read from a string table


def _fields(data, at, fmt, little):
    import struct

    return struct.unpack_from(("<" if little else ">") + fmt, data, at)


def _string(data, table, value):
    text = data[table + value : table + value + NAME_LIMIT].split(b"\0", 1)[0]
    return os.fsdecode(text)


def dynamic_imports(path):
    """(the libraries the ELF at PATH needs, the symbols it leaves undefined in its dynamic symbol
    table, its RPATH's and RUNPATH's folders), read from its section headers; None where it is no
    ELF this reader can follow (a script, a cut header, sections stripped): no evidence either way."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    if data[:4] != b"\x7fELF" or len(data) < 64 or data[4] not in (1, 2) or data[5] not in (1, 2):
        return None
    wide, little = data[4] == 2, data[5] == 1
    try:
        if wide:
            shoff, (shentsize, shnum) = _fields(data, 40, "Q", little)[0], _fields(data, 58, "HH", little)
            phoff, (phentsize, phnum) = _fields(data, 32, "Q", little)[0], _fields(data, 54, "HH", little)
            header, sym, dyn = "IIQQQQIIQQ", ("IBBHQQ", 24), ("qQ", 16)
        else:
            shoff, (shentsize, shnum) = _fields(data, 32, "I", little)[0], _fields(data, 46, "HH", little)
            phoff, (phentsize, phnum) = _fields(data, 28, "I", little)[0], _fields(data, 42, "HH", little)
            header, sym, dyn = "IIIIIIIIII", ("IIIBBH", 16), ("iI", 8)
        # the loader links through the PT_DYNAMIC segment, whatever the section headers say
        linked = any(_fields(data, phoff + i * phentsize, "I", little)[0] == PT_DYNAMIC for i in range(phnum))
        # each section: (type, offset, size, link)
        sections = []
        for index in range(shnum):
            f = _fields(data, shoff + index * shentsize, header, little)
            sections.append((f[1], f[4], f[5], f[6]))
        kinds = [kind for kind, _, _, _ in sections]
        if not sections or ((linked or SHT_DYNAMIC in kinds) and SHT_DYNSYM not in kinds):
            # its section headers stripped, or its .dynsym's retyped: the loader still resolves its
            # imports (cuModuleLoadData's among them), which no section here names (a review finding)
            return None
        if not linked and SHT_DYNAMIC not in kinds:
            return [], [], []  # a static binary: it imports nothing
        needs, imports, paths = [], [], []
        for kind, offset, size, link in sections:
            if kind not in (SHT_DYNAMIC, SHT_DYNSYM):
                continue
            table = sections[link][1]
            if kind == SHT_DYNAMIC:
                for at in range(offset, offset + size - dyn[1] + 1, dyn[1]):
                    tag, value = _fields(data, at, dyn[0], little)
                    if tag == 0:
                        break
                    if tag == 1:  # DT_NEEDED
                        needs.append(_string(data, table, value))
                    elif tag in (15, 29):  # DT_RPATH, DT_RUNPATH: looked in before the system's folders
                        paths += _string(data, table, value).split(":")
                continue
            for at in range(offset + sym[1], offset + size - sym[1] + 1, sym[1]):  # entry 0 is the null one
                f = _fields(data, at, sym[0], little)
                name, shndx = f[0], f[3] if wide else f[5]
                if shndx == 0 and name:  # SHN_UNDEF: the loader finds it in a library
                    imports.append(_string(data, table, name))
        return needs, imports, paths
    except Exception:  # struct.error, an index past the table: a binary cut or made to confuse
        return None


def say_imports(out, private, prefixes, env):
    """`@@farm needs LIB` per library the copy needs, `@@farm imports SYMBOL` per undefined
    symbol of its dynamic table that opens with one of PREFIXES (the loaders and compilers of
    CUDA code: runtime_code.RUNTIME_LOADERS), `@@farm runpath FOLDER` per RPATH or RUNPATH entry,
    `@@farm imports-unread` where it could not be read,
    and `@@farm cuda-env NAME=VALUE` for each of CUDA's JIT variables the login sets."""
    found = dynamic_imports(private)
    if found is None:
        out.say("@@farm imports-unread")
    else:
        # a library's name with a space or an unprintable byte is still one the loader opens: said
        # with "?" for each, never dropped (dropped, `libmy gpu.so` passed: a review finding), as
        # the shell's awk says it
        for name in sorted({"".join(c if 32 < ord(c) < 127 else "?" for c in n) for n in found[0]}):
            out.say("@@farm needs " + name)
        # where the loader looks first: a `libcudart.so.13` of the build's own there is no ordinary
        # one (runtime_code.runtime_loads); an empty entry (the current folder) said as "(empty)"
        for folder in sorted({"".join(c if 32 < ord(c) < 127 else "?" for c in f) or "(empty)" for f in found[2]}):
            out.say("@@farm runpath " + folder)
        printable = [n for n in found[1] if n.isprintable() and " " not in n]
        for name in sorted(set(printable)):
            if name.split("@", 1)[0].startswith(tuple(prefixes)):
                out.say("@@farm imports " + name.split("@", 1)[0])
    # runtime_code.JIT_NAMES: CUDA_FORCE_JIT is read as CUDA_FORCE_PTX_JIT is (round 177)
    for name in ("CUDA_FORCE_PTX_JIT", "CUDA_DISABLE_PTX_JIT", "CUDA_FORCE_JIT", "CUDA_DISABLE_JIT"):
        if env.get(name):
            out.say("@@farm cuda-env " + name + "=" + " ".join(env[name].split())[:64])
