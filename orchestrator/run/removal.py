"""Shell removing a folder of the farm's on a node, whatever modes the cell's programs left in it.

Landlock handles no chmod: a confined kernel may take the owner's bits of a folder in its own work
folder (`chmod 000 junk`), and `rm -rf`, as the node's user (not root), then leaves what that folder
holds. A kernel that failed its numbers after filling the disk there kept its files past its cell's
clean-up, and the look after its failure found the node "out of room": infra-error, no verdict, and
every later cell of the node met the full disk (red-team round 164). The node's runner removes as
this does (node/files.py remove).
"""

from __future__ import annotations


def remove_sh(word: str) -> str:
    """Shell removing WORD (a shell word) as `rm -rf`, its status rm's: where rm leaves something, the
    owner's bits are given back to each folder under it that lacks them, and rm tries again. By find,
    which follows no link, WORD included, and gives a folder its bits before it reads it: `chmod -R`
    followed WORD where it was a link (a kernel's TMPDIR made a link to another folder of the node's
    user, its parent 555 so rm could not unlink it) and made every file there u+rwx (review 165)."""
    bits = f"find {word} -type d ! -perm -700 -exec chmod u+rwx {{}} \\; 2>/dev/null"
    return f"{{ rm -rf {word} 2>/dev/null || {{ {bits}; rm -rf {word}; }}; }}"
