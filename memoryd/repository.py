"""Which project a directory belongs to: its git repository, whatever worktree or
sub-directory an agent was started in.

Read from the files on disk, never by running `git`: the nearest `.git` above the
directory is either the repository's own git directory (the main working tree) or a
file `gitdir: <path>` (a linked worktree, made by `git worktree add`, or a submodule).
A linked worktree's git directory holds `commondir`, the path of the repository's
shared git directory; the project is that directory's working tree. Outside any
repository, and when anything cannot be read, the project is the directory itself.
"""

from __future__ import annotations

import os
import stat
from functools import lru_cache

from memoryd.names import project_path

#: Directories climbed at most looking for `.git` (a path deeper than this is odd).
MAX_DEPTH = 64
#: A `.git` file or `commondir` longer than this is not git's.
MAX_POINTER = 4096


def _read_pointer(path: str) -> str | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        data = os.read(fd, MAX_POINTER + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > MAX_POINTER:
        return None
    text = data.decode("utf-8", "replace").strip()
    return text or None


def _main_tree(common: str) -> str:
    """The working tree of a repository's shared git directory: `/r/.git` is `/r`'s; a bare
    repository (`/r.git`) has none, so the git directory itself names the project."""
    common = os.path.normpath(common)
    return os.path.dirname(common) if os.path.basename(common) == ".git" else common


def _linked(dotgit_file: str, tree: str) -> str:
    pointer = _read_pointer(dotgit_file)
    if pointer is None or not pointer.startswith("gitdir:"):
        return tree
    gitdir = pointer[len("gitdir:"):].strip()
    gitdir = gitdir if os.path.isabs(gitdir) else os.path.join(tree, gitdir)
    common = _read_pointer(os.path.join(gitdir, "commondir"))
    if common is None:
        # A submodule (or a work tree with its git directory elsewhere): its own project.
        return tree
    common = common if os.path.isabs(common) else os.path.join(gitdir, common)
    return _main_tree(common)


def project_root(directory: str) -> str:
    """The project `directory` belongs to: the main working tree of its git repository
    (for the repository itself, any sub-directory and any linked worktree alike), or the
    directory itself outside a repository."""
    return _place(project_path(directory))[0]


def working_tree(directory: str) -> str | None:
    """The top of the working tree `directory` lies in (the main tree or a linked
    worktree: where its `.git` is), or None outside a repository."""
    return _place(project_path(directory))[1]


@lru_cache(maxsize=1024)
def _place(clean: str) -> tuple[str, str | None]:
    """(project, working tree) of a clean directory path: one climb to the nearest `.git`.

    Cached: a project's layout does not change under a running session, and ingest asks
    once per batch of lines."""
    current = clean
    for _ in range(MAX_DEPTH):
        dotgit = os.path.join(current, ".git")
        try:
            mode = os.stat(dotgit).st_mode
        except OSError:
            mode = None
        if mode is not None and (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
            # A home directory kept in git (dotfiles) is not every folder's project.
            if current != clean and current in (os.path.expanduser("~"), "/"):
                return clean, None
            root = current if stat.S_ISDIR(mode) else project_path(_linked(dotgit, current))
            return root, current
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return clean, None


def gemini_project(transcript: str) -> str | None:
    """The project of a Gemini CLI transcript (`~/.gemini/tmp/<name>/chats/<file>`): the
    directory Gemini wrote into `<name>/.project_root`, as `project_root` names it; None
    when there is no such file. Gemini's records carry no working directory."""
    chats = os.path.dirname(os.path.abspath(transcript))
    written = _read_pointer(os.path.join(os.path.dirname(chats), ".project_root"))
    if written is None or not os.path.isabs(written) or "\n" in written:
        return None
    return project_root(written)
