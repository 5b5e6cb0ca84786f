"""Process entry point."""

from the_loop.cli import main

raise SystemExit(main())
