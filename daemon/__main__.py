"""`python -m daemon`: the `memoryd` command."""

from daemon.entry import main

if __name__ == "__main__":
    main()
