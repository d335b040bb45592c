"""What a confined command may read where the farm's own secrets are on its machine (a `local` node:
the farm's user runs its kernels). Landlock allows, never denies: to keep a kernel from the farm's
secret files (another node's `key_file`, `~/.pgpass`, `~/.ssh`) every other entry beside each one and
beside each of its folders up to / is allowed reads, and the secrets' own branches are not."""

import os


def read_rules(secrets):
    """(path, is a folder) pairs whose reads a ruleset allows (beneath a folder): every entry of each
    folder on the way from / to a secret of SECRETS (as resolved: Landlock judges the file, not the
    name a link gave it), but those ways themselves and the secrets. A file made later in one of
    those folders has no rule, so it is not readable: the safe side. A folder that cannot be listed
    opens nothing of its own."""
    hidden = set()
    ways = set()
    for secret in secrets:
        real = os.path.realpath(secret)
        if real == "/":
            continue
        hidden.add(real)
        folder = os.path.dirname(real)
        while True:
            ways.add(folder)
            if folder == "/":
                break
            folder = os.path.dirname(folder)
    # a folder inside a secret (another secret's way, ~/.ssh beside ~/.ssh/id) is hidden whole
    ways = {way for way in ways if not any(way == h or way.startswith(h.rstrip("/") + "/") for h in hidden)}
    rules = []
    for folder in sorted(ways):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in sorted(names):
            path = os.path.join(folder, name)
            if path in hidden or path in ways or os.path.islink(path):  # a link's target has its own rule
                continue
            rules.append((path, os.path.isdir(path)))
    return rules
