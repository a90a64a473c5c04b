"""Where the shared real data lives: ``$TITANS_SHARED_DATA``, else ``../shared/data`` beside
the repository (or beside the folder holding a worktree). Tests skip when it is absent."""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def shared_data() -> Path:
    candidates = [ROOT.parent / "shared" / "data", ROOT.parent.parent / "shared" / "data"]
    if os.environ.get("TITANS_SHARED_DATA"):
        candidates.insert(0, Path(os.environ["TITANS_SHARED_DATA"]))
    return next((c for c in candidates if c.is_dir()), candidates[0])


DATA = shared_data()
BOOKS = DATA / "gutenberg"
BABI = DATA / "babi"
SHAKESPEARE = DATA / "tinyshakespeare" / "input.txt"


def one_book(folder: Path) -> Path:
    """A folder in ``folder`` holding a link to one shared book (The Jungle Book, 290 kB):
    real text, split into sentences in about a second rather than all seven books' eight."""
    books = folder / "books"
    books.mkdir(exist_ok=True)
    (books / "jnglb10.txt").symlink_to(BOOKS / "jnglb10.txt")
    return books
