"""The two fixtures CI provides, PostgreSQL (pg_dsn) and Chromium (chromium_path), really work."""

from __future__ import annotations

from browser_helpers import CHROMIUM_ARGS


def test_pg_dsn_gives_each_test_an_empty_database_it_can_use(pg_dsn: str) -> None:
    import psycopg

    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        assert conn.execute("select 1").fetchone() == (1,)
        tables = conn.execute(
            "select count(*) from information_schema.tables where table_schema = 'public'"
        ).fetchone()
        assert tables == (0,)
        conn.execute("create table mine (x int)")
        database = conn.execute("select current_database()").fetchone()
    assert database is not None and database[0].startswith("the_loop_t_")


def test_chromium_path_launches_headless_chromium_on_a_data_page(chromium_path: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path, args=list(CHROMIUM_ARGS))
        try:
            page = browser.new_page()
            page.goto("data:text/html,<title>t</title><p id=x>hello from chromium</p>")
            assert page.inner_text("#x") == "hello from chromium"
        finally:
            browser.close()
