"""The local tracker's own schema changes, applied by `runtime/db.py`'s migration in order.

Version 3 gives a work item who filed it (`author` is older) and a pull request its branches:
`base`, `head`, `head_repository` and `draft`. `fork` is no column: it is derived from
`head_repository` and the item's repository. A pull request written before version 3 could
only come from the tracker's own repository, so its `head_repository` is set to that; its
branches were never recorded and stay empty.
"""

from __future__ import annotations

#: Columns added to `items` in version 3: (table, column, definition).
ITEM_COLUMNS_V3: tuple[tuple[str, str, str], ...] = (
    ("items", "base", "TEXT NOT NULL DEFAULT ''"),
    ("items", "head", "TEXT NOT NULL DEFAULT ''"),
    ("items", "head_repository", "TEXT NOT NULL DEFAULT ''"),
    ("items", "draft", "INTEGER NOT NULL DEFAULT 0"),
)
#: Run once the columns exist: what an older row's new columns hold.
FILL_V3 = ("UPDATE items SET head_repository = repository "
           "WHERE kind = 'pull-request' AND head_repository = ''")
