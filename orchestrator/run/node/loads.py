"""Where the kernel's copy loads code from, as its ELF (or a script's `#!`) names it: a folder named
relative to the current one, or one a run may write, makes what runs the run's code, not the
binary's that was hashed and inspected.

The run may not set LD_PRELOAD or LD_LIBRARY_PATH (config/run_command.py), but a build can write the
same into the binary: linked with `-Wl,-rpath,.`, the dynamic loader looked for the kernel's
libraries in its work folder, where the run's other commands had compiled one whose constructor
printed the marker and exited 0, and a kernel that failed its numbers passed (a red-team finding).
A CUDA binary's runtime finds libcuda.so.1 the same way (dlopen reads the executable's RUNPATH).
"""

import os

PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_RPATH, DT_RUNPATH = 0, 1, 5, 15, 29
HEAD_LIMIT = 1 << 16  # bytes of a script read for its `#!` line
STRING_LIMIT = 1 << 16  # bytes of one name read from the string table


def _ints(data, at, fmt, little):
    import struct

    return struct.unpack_from(("<" if little else ">") + fmt, data, at)


def elf_names(path):
    """The folders and files the copy at PATH makes the loader read: its interpreter, each entry of
    its RPATH and RUNPATH (an empty entry is ""), and each library it needs named by a path (linked
    as `./libx.so`, which the loader reads from the current folder), or a script's interpreter. [] for
    anything else (not ELF, unreadable), and None for an ELF this reader cannot follow (a cut
    header, a string table no segment holds): no evidence either way."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return []
    if data[:2] == b"#!":
        words = data[2:HEAD_LIMIT].split(b"\n", 1)[0].split()
        return [os.fsdecode(words[0])] if words else None
    if data[:4] != b"\x7fELF" or len(data) < 64 or data[4] not in (1, 2) or data[5] not in (1, 2):
        return []
    wide, little = data[4] == 2, data[5] == 1
    try:
        if wide:
            phoff, phentsize, phnum = _ints(data, 32, "Q", little)[0], *_ints(data, 54, "HH", little)
            header, dyn = "IIQQQQQQ", "qQ"
        else:
            phoff, phentsize, phnum = _ints(data, 28, "I", little)[0], *_ints(data, 42, "HH", little)
            header, dyn = "IIIIIIII", "iI"
        segments = []
        for index in range(phnum):
            fields = _ints(data, phoff + index * phentsize, header, little)
            # 64-bit: type, flags, offset, vaddr, paddr, filesz; 32-bit: type, offset, vaddr, paddr, filesz
            kind, offset, vaddr, size = (
                (fields[0], fields[2], fields[3], fields[5]) if wide else (fields[0], fields[1], fields[2], fields[4])
            )
            segments.append((kind, offset, vaddr, size))
        names, dynamic = [], None
        for kind, offset, _, size in segments:
            if kind == PT_INTERP:
                names.append(os.fsdecode(data[offset : offset + size].split(b"\0", 1)[0]))
            elif kind == PT_DYNAMIC:
                dynamic = (offset, size)
        if dynamic is None:
            return names
        entries, step = [], 16 if wide else 8
        for at in range(dynamic[0], dynamic[0] + dynamic[1] - step + 1, step):
            tag, value = _ints(data, at, dyn, little)
            if tag == DT_NULL:
                break
            entries.append((tag, value))
        table = next((value for tag, value in entries if tag == DT_STRTAB), None)
        paths = [(tag, value) for tag, value in entries if tag in (DT_RPATH, DT_RUNPATH, DT_NEEDED)]
        if not paths:
            return names
        start = next(
            (off + table - va for kind, off, va, size in segments if kind == PT_LOAD and va <= table < va + size), None
        )
        if start is None:
            return None
        for tag, value in paths:
            text = data[start + value : start + value + STRING_LIMIT].split(b"\0", 1)[0]
            if tag != DT_NEEDED:
                names += [os.fsdecode(entry) for entry in text.split(b":")]
            elif b"/" in text:  # a bare name is looked for in the folders above and the node's
                names.append(os.fsdecode(text))
        return names
    except Exception:  # struct.error, a table past the file's end: a binary cut or made to confuse
        return None


def loads_writable(private, cell, scratch=()):
    """The first folder or file the copy PRIVATE makes the loader read that the run could have
    written (relative to the current folder, or beneath its cell's folder other than the copy's own
    bin/, /tmp, /var/tmp, /dev, /proc, or the node's temporary folder SCRATCH), "" where none is, or
    a word saying its ELF could not be read to the end."""
    names = elf_names(private)
    if names is None:
        return "(an ELF header or dynamic section it cannot follow)"
    own = os.path.dirname(private)
    mine = (own, os.path.realpath(own))
    places = [cell, "/tmp", "/var/tmp", "/dev", "/proc", *scratch]
    places += [os.path.realpath(place) for place in places]
    for name in names:
        path = name.replace("${ORIGIN}", own).replace("$ORIGIN", own)
        if not path.startswith("/"):  # "", ".", "lib": the folder the kernel runs in
            return name or "(an empty entry: the current folder)"
        for found in (os.path.normpath(path), os.path.realpath(path)):
            if found in mine:
                continue  # the copy's own folder: only the runner writes there
            if any(found == place or found.startswith(place.rstrip("/") + "/") for place in places):
                return name
    return ""
